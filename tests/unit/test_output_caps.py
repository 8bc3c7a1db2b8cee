"""Every path from a grading kernel into the notebook is bounded (course.grading.execute): what a
message's buffers carry counts like its content, and an error's text copied from the kernel's
reply is cut."""

from __future__ import annotations

import nbformat
import zmq

from course.grading.execute import MAX_ERROR_TEXT, GradingExecute
from course.grading.warm import SandboxedKernelManager


def _execute() -> GradingExecute:
    executor = GradingExecute(max_output_kb=1, max_notebook_output_kb=4)
    executor._cell_output_bytes = executor._output_bytes = 0
    return executor


def test_a_messages_buffers_count_against_the_caps():
    """A widget message whose buffers hold megabytes is cut, though its content is small."""
    executor = _execute()
    assert executor._counted({"content": {"data": {}}, "buffers": []}) == "keep"
    assert executor._counted({"content": {}, "buffers": [b"x" * 2048]}) == "cut"
    assert executor._counted({"content": {}, "buffers": [b"x"]}) == "drop"


def test_an_error_copied_from_the_kernels_reply_is_cut():
    """nbgrader adds the reply's error to the cell when no output named it: a 24 MiB message
    reached the notebook that way."""
    executor = _execute()
    cell = nbformat.v4.new_code_cell("raise ValueError('x' * 2**24)")
    reply = {
        "content": {
            "status": "error",
            "ename": "E" * 10_000,
            "evalue": "x" * 2**24,
            "traceback": ["y" * 10_000] * 1000,
        }
    }
    executor.on_cell_executed(cell=cell, cell_index=0, execute_reply=reply)
    (error,) = cell.outputs
    assert len(error.evalue) == len(error.ename) == MAX_ERROR_TEXT
    assert len(error.traceback) == 20 and all(len(t) == MAX_ERROR_TEXT for t in error.traceback)


def test_a_kernel_client_refuses_a_message_over_the_cap_on_a_context_of_its_own():
    """A frame sent zero-copy costs the kernel nothing; libzmq would take it in whole. The
    client's context is its own: the manager destroys its own at shutdown, under a heartbeat
    thread still running on it (a traceback on the instructor's terminal)."""
    manager = SandboxedKernelManager(max_message=1234)
    client = manager.client()
    socket = client.context.socket(zmq.DEALER)
    try:
        assert socket.getsockopt(zmq.MAXMSGSIZE) == 1234
    finally:
        socket.close(linger=0)
    assert client.context is not manager.context
    client.stop_channels()  # destroys the context it made
    assert client.context.closed
