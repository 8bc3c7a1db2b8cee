"""The course's patch of jupyter_client (`course.grading.shell_wakeup`), on the scene of issue 38
made deterministic: the kernel's reply lands in the client's shell socket while a poll waits for
it, and before the event loop looks, the client sends on that channel."""

from __future__ import annotations

import asyncio
import select
import time
from collections.abc import Callable

import zmq
import zmq.asyncio
from jupyter_client.channels import AsyncZMQSocketChannel
from jupyter_client.session import Session

from course.grading import shell_wakeup
from course.grading.execute import GradingExecute
from course_testing import run_in_fresh_loop


async def reply_lands_during_a_send(send: Callable[[AsyncZMQSocketChannel], None]):
    """(whether the waiting poll was woken, whether the reply was in the socket), once the event
    loop has turned a few times after ``send(channel)``."""
    context = zmq.asyncio.Context()
    try:
        kernel = context.socket(zmq.ROUTER)
        port = kernel.bind_to_random_port("tcp://127.0.0.1")
        socket = context.socket(zmq.DEALER)
        socket.connect(f"tcp://127.0.0.1:{port}")
        channel = AsyncZMQSocketChannel(socket, Session(key=b""))
        channel.send(channel.session.msg("execute_request"))
        identity, *_ = await kernel.recv_multipart()
        waiting = asyncio.ensure_future(socket.poll(60_000))  # nbclient waits for the reply
        await asyncio.sleep(0)  # the poll is registered; nothing has come yet
        kernel.send_multipart([identity, b"execute_reply"])
        select.select([socket.FD], [], [], 10)  # it has landed: the socket's fd says so
        time.sleep(0.01)  # libzmq takes in news on a send when a millisecond has passed
        send(channel)
        for _ in range(10):  # each turn of the loop looks at every readable fd
            await asyncio.sleep(0)
        there = zmq.Socket.shadow(socket.underlying).get(zmq.EVENTS) & zmq.POLLIN
        return waiting.done(), bool(there)
    finally:
        context.destroy(linger=0)


def send_on_the_channel(channel: AsyncZMQSocketChannel) -> None:
    channel.send(channel.session.msg("comm_msg"))  # as nbclient's stand-in for an Output widget


def test_jupyter_client_still_hides_the_reply_else_drop_the_patch(monkeypatch):
    """Upstream's bug, as jupyter_client 8.10.0 has it: the poll sleeps on with the reply in the
    socket. When an upgrade fixes it, this fails: drop the patch and its pins."""
    monkeypatch.delattr(AsyncZMQSocketChannel, "send")  # jupyter_client's own (conftest patched)
    assert run_in_fresh_loop(reply_lands_during_a_send(send_on_the_channel)) == (False, True)


def test_a_send_on_a_patched_channel_wakes_the_waiting_poll():
    shell_wakeup.install()
    assert run_in_fresh_loop(reply_lands_during_a_send(send_on_the_channel)) == (True, True)


def test_the_grader_patches_its_kernel_clients(monkeypatch):
    """A grading worker's process has only the grader to patch it."""
    monkeypatch.delattr(AsyncZMQSocketChannel, "send")
    GradingExecute()
    assert run_in_fresh_loop(reply_lands_during_a_send(send_on_the_channel)) == (True, True)
