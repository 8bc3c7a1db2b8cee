"""Kernels forked from a zygote: starting, watching and stopping them never races with the zygote.

The zygote is the forked kernel's parent and reaps it the moment it exits. The grader watched the
kernel by reading ``/proc/<pid>/stat``; a read while the zygote reaped it failed with ESRCH
(ProcessLookupError), which failed about one submission in a hundred at kernel shutdown."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from course.grading.batch import check_references
from course.grading.coursedir import Course
from course.grading.sandbox import Limits, kernel_uid, kill_uid, policy_for
from course.grading.warm import (
    ZYGOTE_WAIT,
    ForkedProcess,
    Prefix,
    SandboxedKernelManager,
    WarmUp,
    prefix_file,
    prefix_texts,
    request_fork,
    zygote_alive,
    zygote_socket,
)
from course_testing import REPO, run_in_fresh_loop


def _reaper(count: int) -> tuple[int, int]:
    """A process that forks ``count`` children that exit at once, reaps each as soon as it
    exits (as the zygote does) and writes each pid to a pipe; returns (its pid, the pipe)."""
    read, write = os.pipe()
    reaper = os.fork()
    if reaper == 0:
        try:  # never return into pytest from a forked child
            os.close(read)
            for _ in range(count):
                pid = os.fork()
                if pid == 0:
                    os._exit(0)
                os.write(write, f"{pid}\n".encode())
                os.waitpid(pid, 0)
        finally:
            os._exit(0)
    os.close(write)
    return reaper, read


# Forks from this (large) process cost about 20 ms each: 300 in the default run, 3000 (the race
# failed about one kernel in a hundred) with the tests marked slow.
@pytest.mark.parametrize("count", [300, pytest.param(3000, marks=pytest.mark.slow)])
def test_watching_a_kernel_that_its_zygote_reaps_never_fails(count):
    reaper, pipe = _reaper(count)
    watched = 0
    with os.fdopen(pipe) as pids:
        for line in pids:
            process = ForkedProcess(int(line))
            process.wait(timeout=5)  # raises if poll() does
            assert process.poll() is not None
            process.kill()  # a signal to a process that is gone is no error
            watched += 1
    os.waitpid(reaper, 0)
    assert watched == count


def test_a_forked_process_is_seen_running_then_exited():
    pid = os.fork()
    if pid == 0:
        try:
            signal.pause()
        finally:
            os._exit(0)
    process = ForkedProcess(pid)
    assert process.poll() is None
    with pytest.raises(Exception, match="timed out"):
        process.wait(timeout=0.1)
    process.terminate()
    assert process.wait(timeout=5) is not None
    os.waitpid(pid, 0)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory):
    warm = tmp_path_factory.mktemp("warm")
    warm_up = WarmUp(prefix_texts(check_references(Course.at(REPO), ["04_no_grad"])), warm)
    warm_up.wait()
    socket = warm / "04_no_grad" / "04_no_grad.sock"
    assert socket.exists(), (warm / "zygotes.log").read_text()
    yield str(socket)
    warm_up.close()


def _children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def test_one_process_starts_every_notebooks_zygote_and_they_end_with_it(tmp_path):
    """torch is imported once for all the zygotes; killing that one process (as the grader does
    when it ends) ends every zygote too."""
    prefixes = check_references(Course.at(REPO), ["01_requires_grad", "04_no_grad"])
    warm_up = WarmUp(prefix_texts(prefixes), tmp_path)
    try:
        warm_up.wait()
        assert [served.exists() for _, served in warm_up.specs] == [True, True]
        zygotes = _children(warm_up.process.pid)
        assert len(zygotes) == 2
    finally:
        warm_up.close()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in zygotes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in zygotes)


STARTER = """
import sys, time
from pathlib import Path
from course.grading.batch import check_references
from course.grading.coursedir import Course
from course.grading.warm import WarmUp, prefix_texts
warm_up = WarmUp(prefix_texts(check_references(Course.at(sys.argv[1]), ["04_no_grad"])),
                 Path(sys.argv[2]))
warm_up.wait()
print(warm_up.process.pid, flush=True)
time.sleep(600)
"""


def test_zygotes_end_with_the_process_that_started_them_killed_outright(tmp_path):
    """A dask worker (or a grader) killed in the middle of a run leaves no zygote behind."""
    starter = subprocess.Popen(
        [sys.executable, "-c", STARTER, str(REPO), str(tmp_path)], stdout=subprocess.PIPE, text=True
    )
    server = int(starter.stdout.readline())
    left = [server, *_children(server)]
    assert len(left) == 2, "the process that serves, and the notebook's zygote"
    starter.kill()
    starter.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{pid}").exists() for pid in left) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(Path(f"/proc/{pid}").exists() for pid in left)


def test_a_course_in_a_deep_folder_still_gets_warm_kernels(tmp_path):
    """A Unix socket's path may have 108 bytes at most: a zygote in a deeper folder binds and is
    reached all the same."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    warm_up = WarmUp(prefix_texts(check_references(Course.at(REPO), ["04_no_grad"])), deep)
    try:
        ((_, served),) = warm_up.specs
        assert len(str(served)) > 108
        warm_up.wait()
        assert served.exists(), (deep / "zygotes.log").read_text()
        pid = request_fork(str(served), {"argv": ["--help"], "env": {}, "cwd": str(tmp_path),
                                         "policy": "{}"})  # fmt: skip
        os.kill(pid, signal.SIGKILL)
    finally:
        warm_up.close()


def test_a_kernel_whose_zygote_failed_does_not_wait_for_it(tmp_path):
    """A zygote whose lesson cells fail says so (its spec goes): a kernel then starts cold at
    once, not after `ZYGOTE_WAIT` seconds."""
    recorded = tmp_path / "broken.prefix.json"
    Prefix(["raise RuntimeError('a broken lesson')"], [[]], [1], {}, {}).save(recorded)
    warm_up = WarmUp({("a1", "broken"): recorded.read_text()}, tmp_path / "warm")
    try:
        started = time.monotonic()
        assert zygote_socket(prefix_file(tmp_path / "warm", "a1", "broken")) is None
        assert time.monotonic() - started < ZYGOTE_WAIT / 2
    finally:
        warm_up.close()


def _manager(zygote: str, private: str, work: str) -> SandboxedKernelManager:
    km = SandboxedKernelManager(kernel_name="python3")
    km.transport = "ipc"
    km.ip = os.path.join(private, "ipc")
    km.connection_file = os.path.join(private, "kernel.json")
    km.zygote = zygote
    km.policy = policy_for(REPO, Path(work), Path(private), Limits()).to_json()
    return km


def test_the_zygote_answers_with_a_process_group_leader(zygote, tmp_path):
    """jupyter_client signals the kernel's process group as soon as it has the pid."""
    for i in range(10):
        private, work = tmp_path / f"p{i}", tmp_path / f"w{i}"
        private.mkdir()
        work.mkdir()
        km = _manager(zygote, str(private), str(work))
        pid = request_fork(zygote, {"argv": ["--help"], "env": {}, "cwd": str(work),
                                    "policy": km.policy})  # fmt: skip
        try:
            assert os.getpgid(pid) == pid
        finally:
            os.kill(pid, signal.SIGKILL)
            kill_uid(kernel_uid(pid))


def test_many_forks_shut_down_at_once_all_go_cleanly(zygote):
    async def one(quick: bool) -> None:
        private, work = tempfile.mkdtemp(), tempfile.mkdtemp()
        km = _manager(zygote, private, work)
        await km.start_kernel(cwd=work, extra_arguments=["--HistoryManager.hist_file=:memory:"])
        pid = km.provisioner.pid
        if not quick:
            client = km.client()
            client.start_channels()
            await client.wait_for_ready(timeout=60)
            client.stop_channels()
        await km.interrupt_kernel()
        await km.shutdown_kernel(now=True)
        kill_uid(kernel_uid(pid))
        assert not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text()

    async def all_of_them() -> None:
        for _ in range(8):
            await asyncio.gather(one(True), one(False))

    run_in_fresh_loop(all_of_them())


def test_whatever_connects_to_a_zygote_never_stops_it(zygote, tmp_path):
    """A kernel could lead the grader to connect a channel to a zygote's socket (a red team put a
    link in its heartbeat socket's place): whatever a connection sends, or does not send, the
    zygote goes on serving, and a grader that reads it as alive is right."""
    import socket

    for sent in (b"\xff\x00\x01zmq greeting\n", b"", b"{}\n", b"[1, 2]\n", b"x" * 100_000):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(zygote)
            conn.sendall(sent)
    assert zygote_alive(zygote)
    request = {"argv": ["--help"], "env": {}, "cwd": str(tmp_path), "policy": "{}"}
    pid = request_fork(zygote, request)  # it still forks
    os.kill(pid, signal.SIGKILL)
    assert not zygote_alive(str(tmp_path / "no-such.sock"))  # the known-bad case
