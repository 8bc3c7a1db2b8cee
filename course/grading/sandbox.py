"""The sandbox a grading kernel runs in: only its own working copy in reach, and hard limits.

Everywhere: resource limits (memory, CPU seconds, processes, file size, no core dumps).
Where the machine allows it (Linux, as root or with CAP_SYS_ADMIN), also:
- its own mount namespace, in which the course folder, the grader's home and the temp folders are
  covered by empty tmpfs and only the kernel's working copy, the Python installation and the
  `course` package are put back: no solutions, hidden tests, gradebook or other student's work;
- its own network namespace, which has no interface but a loopback that is down: no network
  (the grader talks to the kernel over Unix sockets, which need none);
- a uid of its own (not root, and shared with no other kernel): it cannot write what it was not
  given, signal the grader, or use up another kernel's process quota.

`enter` applies a `Policy` to the current process (a kernel forked from a warm zygote);
``python -m course.grading.sandbox POLICY -- CMD...`` applies it and execs CMD (a kernel started
cold).
"""

from __future__ import annotations

import ctypes
import json
import os
import resource
import signal
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

import course

CLONE_NEWNS, CLONE_NEWNET = 0x00020000, 0x40000000
MS_BIND, MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV = 4096, 16384, 1 << 18, 2, 4
PR_SET_NO_NEW_PRIVS = 38
FIRST_UID = 100_000  # kernels get FIRST_UID + their pid: unique among live kernels, never a user


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096  # private memory (RLIMIT_DATA), torch and the lesson included
    cpu_seconds: int = 600  # all threads together; the kernel is killed past it
    processes: int = 256  # processes and threads of the kernel's own uid
    file_mb: int = 64  # the largest file it may write
    tmpfs_mb: int = 64  # size of its private /tmp and /dev/shm


@dataclass(frozen=True)
class Policy:
    """What one kernel may reach: ``keep`` folders stay visible under the ``hide`` ones."""

    workdir: str  # the kernel's working copy: visible and writable
    private: str  # its home: connection file, sockets, caches
    hide: tuple[str, ...] = ()
    keep: tuple[str, ...] = ()
    limits: Limits = field(default_factory=Limits)
    isolate: bool = True  # namespaces and own uid, where the machine allows

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> Policy:
        data = json.loads(text)
        data["limits"] = Limits(**data["limits"])
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


def policy_for(
    course_root: Path,
    workdir: Path,
    private: Path,
    limits: Limits | None = None,
    isolate: bool = True,
) -> Policy:
    """The policy for a kernel grading in ``workdir``, with the course at ``course_root``."""
    import tempfile

    hide = {
        Path(course_root),
        Path.home(),
        Path(tempfile.gettempdir()),
        Path("/tmp"),
        Path("/var/tmp"),
        Path("/dev/shm"),
    }
    package_home = Path(course.__file__).parent.parent
    if (package_home / "nbgrader_config.py").exists():  # grading a copy: hide the original too
        hide.add(package_home)
    keep = {
        Path(sys.base_prefix),
        Path(sys.prefix),
        Path(course.__file__).parent,
        Path(workdir),
        Path(private),
    }
    return Policy(
        str(workdir),
        str(private),
        tuple(sorted(str(p.resolve()) for p in hide if p.exists())),
        tuple(sorted(str(p.resolve()) for p in keep)),
        limits or Limits(),
        isolate,
    )


def kernel_uid(pid: int) -> int:
    """The uid `enter` gives the kernel with this pid."""
    return FIRST_UID + pid


def kill_uid(uid: int) -> None:
    """Kill every process of ``uid`` at once: a kernel's leftovers (a detached child, a fork
    storm, a process that hops from pid to pid) die with it. Only kernels have such uids; no-op
    when the grader is not root.

    A helper process takes the uid and calls ``kill(-1, SIGKILL)``: Linux signals every process
    that uid may signal in one pass, with new forks held off meanwhile, so nothing slips out as
    it would from a loop over /proc.
    """
    if os.geteuid() != 0 or uid < FIRST_UID:
        return
    helper = os.fork()
    if helper == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        except OSError:  # no process of that uid is left (ESRCH)
            pass
        finally:
            os._exit(0)
    os.waitpid(helper, 0)


def session_cpu_seconds(session: int) -> float:
    """CPU seconds used so far by the processes of a session (a kernel's own, from the setsid in
    `enter`), the children they have reaped included; processes that exit meanwhile are skipped.
    """
    ticks = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:  # it exited while we looked (ENOENT, or ESRCH mid-read)
            continue
        if int(fields[3]) == session:  # state ppid pgrp session ... utime stime cutime cstime
            ticks += sum(int(f) for f in fields[11:15])
    return ticks / os.sysconf("SC_CLK_TCK")


class SandboxError(OSError):
    pass


_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args) -> None:
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise SandboxError(errno, f"{name}: {os.strerror(errno)}")


def _mount(source: str, target: str, fstype: str | None, flags: int, data: str | None = None):
    _call(
        "mount",
        source.encode(),
        target.encode(),
        fstype.encode() if fstype else None,
        ctypes.c_ulong(flags),
        data.encode() if data else None,
    )


def _limit(kind: int, value: int) -> None:
    soft, hard = resource.getrlimit(kind)
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (value, value))


def _apply_limits(limits: Limits) -> None:
    mb = 1024 * 1024
    _limit(resource.RLIMIT_CORE, 0)
    _limit(resource.RLIMIT_DATA, limits.memory_mb * mb)
    _limit(resource.RLIMIT_CPU, limits.cpu_seconds)
    _limit(resource.RLIMIT_NPROC, limits.processes)
    _limit(resource.RLIMIT_FSIZE, limits.file_mb * mb)


def _isolate_files(policy: Policy) -> None:
    """Cover the hidden folders with empty tmpfs and put the kept ones back, in a new mount
    namespace: the rest of the machine keeps its view."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    # Handles on the kept folders, taken before anything covers them.
    kept = [(path, os.open(path, os.O_PATH)) for path in policy.keep if os.path.isdir(path)]
    for hidden in sorted(policy.hide, key=len):
        if os.path.isdir(hidden):
            mode = "1777" if hidden in ("/tmp", "/var/tmp", "/dev/shm") else "755"
            _mount(
                "tmpfs",
                hidden,
                "tmpfs",
                MS_NOSUID | MS_NODEV,
                f"mode={mode},size={policy.limits.tmpfs_mb}m",
            )
    for path, handle in kept:
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC)
        os.close(handle)


def unavailable() -> str | None:
    """Why kernels cannot get their own file view, network and uid here, or None if they can."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "grading does not run as root on Linux"
    pid = os.fork()
    if pid == 0:  # try in a throw-away child: unshare changes the caller for good
        try:
            _call("unshare", CLONE_NEWNS | CLONE_NEWNET)
            os._exit(0)
        except SandboxError as error:
            os._exit(error.errno or 1)
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"namespaces are not allowed here ({os.strerror(code)})"


def enter(policy: Policy) -> list[str]:
    """Sandbox the current process (which then runs the kernel); return what was not enforced."""
    missing = []
    try:
        os.setsid()  # its own process group: killing the kernel kills what it started
    except OSError:
        pass  # already a group leader (a launcher started with start_new_session)
    isolated = False
    if policy.isolate and os.geteuid() == 0:
        try:
            _call("unshare", CLONE_NEWNS | CLONE_NEWNET)
            _isolate_files(policy)
            isolated = True
        except SandboxError as error:
            missing.append(f"no private file view or network ({error.strerror})")
    elif policy.isolate:
        missing.append("no private file view, network or own uid (the grader is not root)")
    uid = kernel_uid(os.getpid())
    if isolated:
        for folder in (policy.workdir, policy.private):
            for path in [folder, *(str(p) for p in Path(folder).rglob("*"))]:
                os.lchown(path, uid, uid)
    _apply_limits(policy.limits)
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary gives rights back
    if isolated:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        # The cwd still pointed into the covered tree, where ../.. reaches what is hidden; enter
        # the working copy again through the new view.
        os.chdir(policy.workdir)
    home = policy.private
    os.environ.update(
        HOME=home,
        IPYTHONDIR=f"{home}/.ipython",
        MPLCONFIGDIR=f"{home}/.matplotlib",
        TMPDIR=home,
        JUPYTER_RUNTIME_DIR=home,
    )
    return missing


def main(argv: list[str]) -> None:
    """``python -m course.grading.sandbox POLICY_JSON -- CMD...``: sandbox, then become CMD."""
    split = argv.index("--")
    for problem in enter(Policy.from_json(argv[split - 1])):
        print(f"sandbox: {problem}", file=sys.stderr)
    command = argv[split + 1 :]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
