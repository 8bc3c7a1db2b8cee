"""Warm kernels: each grading kernel is a fresh fork of a prepared process, not a cold start.

Runs in: the grader or a dask worker (zygotes started), a zygote (kernels forked) and a worker
(its kernel manager).

Starting a kernel cold costs a Python start, importing torch and running the whole lesson before
the first exercise, for every submission. A zygote does that once per notebook: it runs the
notebook's leading locked cells (the lesson up to the first exercise, instructor code only),
forked from one process that imported what every kernel needs once (`serve_all`). Each
submission's kernel is then forked from it: a process of its own that no other student's code
has touched, which starts where a cold kernel would be after those cells.
What those cells printed is recorded once per version of the source, by the trusted kernel that
runs the reference solutions (`course.grading.reference.prefix`, no student code there),
and copied into each notebook graded warm (`course.grading.execute.GradingExecute`). A kernel
whose zygote is still starting waits for it (`zygote_socket`): no submission is graded cold to
record them, and no cold start competes with the starting zygotes for the cores.

    python -m course.grading.warm SPEC.json...   # a zygote per spec, on the socket it names
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

import nbformat
import zmq
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import DottedObjectName, Integer, Type, Unicode

from . import atomic
from .kernelenv import kernel_env, package_view


@dataclass
class Prefix:
    """A notebook's leading locked code cells, as the source has them, and what they printed in
    a cold grading kernel (before any student code had run there)."""

    sources: list[str]
    outputs: list[list[dict]]
    execution_counts: list[int]
    widget_state: dict  # nbclient's widget models after them, for the notebook's metadata
    widget_buffers: dict[str, list]  # comm id -> [[path, buffer], ...]

    def save(self, path: Path) -> None:
        """Write it once, atomically: concurrent jobs may record the same prefix."""
        atomic.write_text(path, json.dumps(asdict(self)))

    @classmethod
    def load(cls, path: Path) -> Prefix:
        return cls(**json.loads(path.read_text()))


def prefix_file(warm_dir: Path, assignment: str, notebook: str) -> Path:
    """Where the recorded prefix of a notebook lies; its zygote's socket and spec lie beside it."""
    return Path(warm_dir) / assignment / f"{notebook}.prefix.json"


def _beside(prefix: Path, suffix: str) -> Path:
    return prefix.with_name(prefix.name.removesuffix(".prefix.json") + suffix)


ZYGOTE_WAIT = 120.0  # seconds a kernel waits for its notebook's zygote to start, then starts cold


def zygote_socket(prefix: Path) -> str | None:
    """The socket of the zygote that serves the notebook whose prefix lies at ``prefix``, or None
    (none, or it failed: the kernel starts cold). While it starts (its spec is there, its
    socket not yet) wait for it, at most `ZYGOTE_WAIT` seconds: a fork costs a fraction of a
    cold start, which would also compete with the starting zygotes for the same cores."""
    socket, spec = _beside(prefix, ".sock"), _beside(prefix, ".zygote.json")
    return str(socket) if _served(spec, socket, time.monotonic() + ZYGOTE_WAIT) else None


def _served(spec: Path, socket: Path, deadline: float, alive=lambda: True) -> bool:
    """Wait while a zygote starts (its spec there, its socket not yet, ``alive()`` true), until
    ``deadline``; whether it serves. A zygote that failed removes its spec."""
    while not socket.exists() and spec.exists() and alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    return socket.exists()


def leading_code(notebook: nbformat.NotebookNode, count: int) -> list[int]:
    """The indices of the first ``count`` code cells that are not empty (where a prefix lies)."""
    cells = notebook.cells
    return [i for i, c in enumerate(cells) if c.cell_type == "code" and c.source.strip()][:count]


def widget_buffer_lists(client) -> dict[str, list]:
    """An nbclient client's widget buffers as JSON: comm id -> [[path, buffer], ...]."""
    return {
        comm: [[list(path), value] for path, value in buffers.items()]
        for comm, buffers in client.widget_buffers.items()
    }


def prefix_sources(notebook: nbformat.NotebookNode) -> list[str]:
    """The code cells before the first one a student may change (solution, test or unlocked)."""
    sources = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        meta = cell.metadata.get("nbgrader", {})
        if not meta.get("locked") or meta.get("solution") or meta.get("grade"):
            break
        sources.append(cell.source)
    return sources


# ---- the zygote ------------------------------------------------------------------------------


def _run_prefix(sources: list[str]) -> tuple[dict, int]:
    """Run the cells in an IPython shell; return its namespace and next execution count."""
    import matplotlib

    matplotlib.use("agg")  # the forked kernel switches to the inline backend
    import torch
    from IPython.core.interactiveshell import InteractiveShell
    from traitlets.config import Config

    torch.set_num_threads(1)  # one thread: forking never inherits a busy thread pool
    config = Config()
    config.HistoryManager.hist_file = ":memory:"
    shell = InteractiveShell.instance(config=config)
    with (
        open(os.devnull, "w") as sink,
        contextlib.redirect_stdout(sink),
        contextlib.redirect_stderr(sink),
    ):
        for source in sources:
            result = shell.run_cell(source, store_history=True)
            if not result.success:
                raise RuntimeError(f"a locked cell failed in the zygote: {result.error_in_exec!r}")
    import matplotlib.pyplot as plt

    plt.close("all")
    namespace, count = shell.user_ns, shell.execution_count
    InteractiveShell.clear_instance()
    return namespace, count


def _become_kernel(request: dict, namespace: dict, count: int) -> None:
    """In the forked child: sandbox this process and run it as the kernel."""
    from ipykernel.kernelapp import IPKernelApp
    from IPython.core.interactiveshell import InteractiveShell

    from .sandbox import Policy, close_inherited, enter

    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    close_inherited()
    enter(Policy.from_json(request["policy"]))  # what it could not enforce, `grade` has said
    InteractiveShell.clear_instance()
    # Read from the environment when ipykernel was imported, i.e. in the zygote: set it here.
    parent = int(os.environ.get("JPY_PARENT_PID") or 0)
    app = IPKernelApp.instance(user_ns=namespace, parent_handle=parent)
    app.initialize(request["argv"])
    app.shell.execution_count = count
    if "matplotlib.pyplot" in sys.modules:
        app.shell.enable_matplotlib("inline")  # what a cold kernel gets from MPLBACKEND
    app.start()


@contextlib.contextmanager
def _short_path(path: str):
    """``path`` as a Unix socket may take it (108 bytes at most, which a course in a deep folder
    passes): through a descriptor of its folder, ``/proc/self/fd/<n>/<name>``."""
    folder = os.open(os.path.dirname(path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{os.path.basename(path)}"
    finally:
        os.close(folder)


def serve(spec_path: Path) -> None:
    """Run one notebook's prefix, then fork a kernel for each request on its socket."""
    spec = json.loads(spec_path.read_text())
    namespace, count = _run_prefix(spec["sources"])  # if it fails, `serve_all` says so

    def reap(*_):
        with contextlib.suppress(ChildProcessError):
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass

    signal.signal(signal.SIGCHLD, reap)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    with _short_path(spec["socket"] + ".tmp") as path:
        listener.bind(path)
    listener.listen(64)
    os.rename(spec["socket"] + ".tmp", spec["socket"])  # appears only once it accepts
    listener.settimeout(1.0)
    grader = os.getppid()
    while os.getppid() == grader:  # the grader gone (even killed): stop serving
        try:
            conn, _ = listener.accept()
        except (InterruptedError, TimeoutError):
            continue
        with conn:
            if (request := _request(conn)) is not None and os.fork() == 0:
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                listener.close()
                # The child answers, once it leads a process group of its own: the grader
                # signals that group (jupyter_client's pgid) as soon as it has the pid.
                os.setsid()
                conn.sendall(f"{os.getpid()}\n".encode())
                conn.close()
                try:
                    _become_kernel(request, namespace, count)
                finally:
                    os._exit(0)


REQUEST_LIMIT = 1 << 20  # bytes: a fork request is a line of JSON (an environment, a policy)
REQUEST_WAIT = 10.0  # seconds a connection may take to send its request


def _request(conn: socket.socket) -> dict | None:
    """The fork request a connection sends, or None for anything else: whatever connects to a
    zygote (a grader, or something a kernel tricked into connecting) never stops it serving."""
    conn.settimeout(REQUEST_WAIT)
    try:
        line = conn.makefile("rb").readline(REQUEST_LIMIT)
        request = json.loads(line)
    except (OSError, ValueError):  # a timeout, a broken line, not JSON
        return None
    needed = ("argv", "env", "cwd", "policy")
    return request if isinstance(request, dict) and all(k in request for k in needed) else None


def serve_all(spec_paths: list[Path]) -> None:
    """Import what every zygote needs once, then fork a zygote per notebook (`serve`): they
    share the imported modules' memory, and torch is imported once, not once per notebook."""
    os.environ["NBGRADER_EXECUTION"] = "autograde"  # the lessons run as they do under grading
    import ipykernel.kernelapp  # noqa: F401 (imported once here, not in every kernel)
    import matplotlib

    matplotlib.use("agg")  # as in `_run_prefix`: the forked kernel switches to the inline backend
    import matplotlib.pyplot  # noqa: F401
    import torch  # noqa: F401

    from .sandbox import die_with_parent

    die_with_parent()  # its grader (or dask worker) killed outright: the zygotes go too
    if os.getppid() == 1:  # it ended before that took hold
        return
    root, zygotes = os.getpid(), []
    for spec_path in spec_paths:
        pid = os.fork()
        if pid == 0:
            try:
                die_with_parent()  # the grader ends this process: its zygotes end with it
                if os.getppid() == root:
                    serve(spec_path)
            except BaseException:
                traceback.print_exc()  # into the zygotes' log
                spec_path.unlink(missing_ok=True)  # its kernels start cold at once
            finally:
                os._exit(0)
        zygotes.append(pid)
    for pid in zygotes:  # they end when the grader does (they watch their parent's pid)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def prefix_texts(prefixes: dict[Path, Path]) -> dict[tuple[str, str], str]:
    """The prefixes the reference's run recorded (source notebook -> its file) as data, as
    `WarmUp` takes them: (assignment, notebook) -> the file's text."""
    return {(s.parent.name, s.stem): path.read_text() for s, path in sorted(prefixes.items())}


_zygote_dir: Path | None = None  # where this process's jobs find zygotes


def set_zygote_dir(folder: Path | None) -> None:
    """Say where the zygotes that serve this process's jobs are (None: none, start cold): set in
    each worker, by the grader's pool or a dask worker plugin (`course.grading.cluster`)."""
    global _zygote_dir
    _zygote_dir = folder


def zygote_dir() -> Path | None:
    return _zygote_dir


class WarmUp:
    """A zygote for every notebook whose prefix the reference's run recorded (``prefixes``:
    (assignment, notebook) -> that file's text, `prefix_texts`), started in the background by one
    process (`serve_all`): grading starts at once, and a kernel waits for its notebook's zygote
    (`zygote_socket`). They end with the thread that made this `WarmUp`, or at `close`."""

    def __init__(self, prefixes: dict[tuple[str, str], str], warm_dir: Path):
        self.specs: list[tuple[Path, Path]] = []  # (spec, socket) of each zygote
        for (assignment, notebook), text in sorted(prefixes.items()):
            prefix = prefix_file(warm_dir, assignment, notebook)
            prefix.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_text(prefix, text)
            spec, served = _beside(prefix, ".zygote.json"), _beside(prefix, ".sock")
            lead = Prefix.load(prefix).sources
            spec.write_text(json.dumps({"socket": str(served), "sources": lead}))
            self.specs.append((spec, served))
        self.process = None
        if self.specs:
            with (warm_dir / "zygotes.log").open("ab") as out:
                self.process = subprocess.Popen(
                    [sys.executable, "-m", "course.grading.warm", *(str(s) for s, _ in self.specs)],
                    cwd=warm_dir,
                    env=kernel_env(os.environ, package_view(warm_dir)),  # its kernels keep it
                    start_new_session=True,  # a Ctrl-C at the terminal is the grader's to handle
                    stdout=out,
                    stderr=out,
                    stdin=subprocess.DEVNULL,
                )

    def wait(self, timeout: float = 300) -> None:
        """Block until every zygote serves (or failed: its notebook is graded cold)."""
        deadline = time.monotonic() + timeout
        for spec, served in self.specs:
            _served(spec, served, deadline, lambda: self.process.poll() is None)

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()  # and its zygotes, by their parent-death signal
            self.process.wait()
        for spec, served in self.specs:
            spec.unlink(missing_ok=True)
            served.unlink(missing_ok=True)


# ---- the grader's side -----------------------------------------------------------------------


def zygote_alive(sock_path: str) -> bool:
    """Whether the zygote at ``sock_path`` still accepts connections (it ignores one that sends
    no request)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5.0)
        try:
            with _short_path(sock_path) as path:
                conn.connect(path)
        except OSError:
            return False
    return True


def request_fork(sock_path: str, request: dict) -> int:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(ZYGOTE_WAIT)  # a zygote that does not answer: start cold instead
        with _short_path(sock_path) as path:
            conn.connect(path)
        conn.sendall((json.dumps(request) + "\n").encode())
        answer = conn.makefile().readline()
    if not answer.strip():
        raise ConnectionError("the zygote's fork exited before it answered")
    return int(answer)


class ForkedProcess:
    """The part of ``subprocess.Popen`` that jupyter_client uses, for a kernel the zygote forked
    (the zygote is its parent and reaps it).

    It is watched through a pidfd, not through ``/proc/<pid>``: reading ``/proc/<pid>/stat``
    while the zygote reaps the exiting kernel fails with ESRCH (ProcessLookupError), which
    failed about one grading in a hundred at kernel shutdown, and a pid can be reused once
    reaped. A pidfd names this one process for as long as it is open.
    """

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # gone (and reaped) before we looked
            self._pidfd = None
            self.returncode = -signal.SIGKILL

    def poll(self) -> int | None:
        """None while it runs; once it has exited (a zombie included), a negative status: the
        real one went to the zygote."""
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = -signal.SIGKILL
            os.close(self._pidfd)
            self._pidfd = None
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.poll() is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired(str(self.pid), timeout)
        return self.poll()

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):  # exited since poll: nothing to do
                signal.pidfd_send_signal(self._pidfd, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class CappedKernelClient(AsyncKernelClient):
    """A kernel client whose sockets take no message larger than ``max_message``: a kernel can
    send a frame of any size at no cost of its own (zero-copy), which libzmq would otherwise
    take in whole; a larger one drops the connection, and the kernel's output stops there. The
    context is the client's own, as jupyter_client makes it: the manager destroys its context
    when the kernel is shut down, before nbclient stops the channels, and a heartbeat thread
    still running on it dies with a traceback on the grader's terminal."""

    max_message = Integer(64 * 2**20, help="bytes: the largest message taken from the kernel")

    def _context_default(self) -> zmq.asyncio.Context:
        context = super()._context_default()
        context.setsockopt(zmq.MAXMSGSIZE, self.max_message)
        return context


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel sandboxed (`course.grading.sandbox`): forked from a zygote when
    ``zygote`` names one, else cold through the sandbox launcher."""

    zygote = Unicode("", help="socket of the zygote to fork from; empty: start cold")
    max_message = Integer(64 * 2**20, help="bytes: the largest message taken from the kernel")
    policy = Unicode("", help="the sandbox policy, as JSON")
    view = Unicode("", help="the folder the kernel imports `course` from (`kernelenv`)")

    client_class = DottedObjectName("course.grading.warm.CappedKernelClient")
    client_factory = Type(klass=CappedKernelClient)

    def client(self, **kwargs) -> CappedKernelClient:
        return super().client(max_message=self.max_message, **kwargs)

    async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
        kw["env"] = kernel_env(kw["env"], Path(self.view))
        # ipykernel's own arguments, without the interpreter and module that run it
        argv = kernel_cmd[kernel_cmd.index("-f") :]
        try:
            pid = (
                request_fork(
                    self.zygote,
                    {"argv": argv, "env": kw["env"], "cwd": kw["cwd"], "policy": self.policy},
                )
                if self.zygote
                else None
            )
        except OSError:  # gone, or on another host (a shared folder): start cold instead
            pid = None
        if pid is None:
            launcher = [sys.executable, "-m", "course.grading.sandbox", self.policy, "--"]
            # none of the grader's streams: its terminal takes no byte a kernel chose
            kw.update(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
            kw.update(stderr=subprocess.DEVNULL)
            return await super()._async_launch_kernel(launcher + kernel_cmd, **kw)
        provisioner = self.provisioner
        provisioner.process = ForkedProcess(pid)
        provisioner.pid = provisioner.pgid = pid  # it leads its group before it answers
        self._reconcile_connection_info(provisioner.connection_info)


if __name__ == "__main__":
    serve_all([Path(arg) for arg in sys.argv[1:]])
