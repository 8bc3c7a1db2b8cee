"""The sandbox a grading kernel runs in: an allow-list of paths, namespaces of its own, limits.

Everywhere: resource limits (memory, CPU seconds, processes, file size, no core dumps).
Where the machine allows it (Linux, as root or with CAP_SYS_ADMIN), also:
- its own root folder, built from an allow-list: the Python installation, the system's /usr and
  the `course` package, read-only; its own private folder (home, sockets, working folder),
  writable; private /tmp, /var/tmp and /dev/shm; /dev/null and the random devices; a /proc of its
  own. Nothing else exists there: no course folder, solutions, hidden tests, gradebook or other
  student's work, no shared world-writable folder (/run/lock), and a course or repository that
  lies inside an allowed tree is covered;
- its own PID namespace, whose first process is the kernel: when the kernel ends, everything it
  started ends with it, and it sees no other process on the machine. The process the grader
  started stays outside as a stand-in (`_stand_in`); the kernel dies with it;
- its own network namespace (a loopback that is down: no network; the grader talks to the kernel
  over Unix sockets, which need none) and IPC namespace (no shared memory or semaphores with
  another kernel);
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

from .kernelenv import package_dir

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC = 0x20000, 0x40000000, 0x20000000, 0x8000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
NEW_ROOT = "/mnt"  # where the kernel's root is built, in its own mount namespace
DEVICES = ("null", "zero", "full", "random", "urandom")
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
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
    """What one kernel may reach: the ``read_only`` trees, minus the ``hide`` ones inside them,
    and its ``private`` folder."""

    workdir: str  # the kernel's working folder, inside ``private``
    private: str  # its home: connection file, sockets, caches; visible and writable
    hide: tuple[str, ...] = ()
    read_only: tuple[str, ...] = ()
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
    view: Path | None = None,
) -> Policy:
    """The policy for a kernel working in ``workdir`` (inside ``private``), grading the course
    at ``course_root``, importing the grader's package through ``view``
    (`course.grading.kernelenv.package_view`)."""
    package_home = package_dir().parent
    hide = {Path(course_root)}
    if (package_home / "nbgrader_config.py").exists():  # grading a copy: hide the original too
        hide.add(package_home)
    executable = Path(os.path.realpath(sys.executable)).parent
    read_only = {
        Path("/usr"),
        Path("/etc/ld.so.cache"),
        Path("/etc/fonts"),
        Path(sys.base_prefix),
        Path(sys.prefix),
        executable.parent if executable.name == "bin" else executable,
        package_dir(),
        *([Path(view)] if view else []),
    }
    return Policy(
        str(workdir),
        str(private),
        tuple(sorted(str(p.resolve()) for p in hide if p.exists())),
        tuple(sorted(str(p.resolve()) for p in read_only if p.exists())),
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


def _bind(source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        _mount("none", target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC | MS_NOSUID)


def _tmpfs(target: str, mode: str, size_mb: int, flags: int = 0) -> None:
    os.makedirs(target, exist_ok=True)
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | flags, f"mode={mode},size={size_mb}m")


def _build_root(policy: Policy) -> None:
    """Make the kernel's root folder from the policy's allow-list, then enter it. Runs as the
    first process of the new PID namespace, so the /proc it mounts shows only the kernel's."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)  # what follows stays in this namespace
    root = NEW_ROOT
    _tmpfs(root, "755", 1)
    for scratch in SCRATCH:  # first: an allowed tree may lie inside one (a venv under /tmp)
        _tmpfs(root + scratch, "1777", policy.limits.tmpfs_mb)
    for path in policy.read_only:
        _bind(path, root + path, read_only=True)
    for link in ("bin", "lib", "lib64", "sbin"):  # merged /usr, as Debian has it
        if os.path.islink(f"/{link}"):
            os.symlink(os.readlink(f"/{link}"), f"{root}/{link}")
    for hidden in policy.hide:  # a course inside an allowed tree (not one around it)
        if any(hidden.startswith(tree + "/") for tree in policy.read_only):
            _tmpfs(root + hidden, "755", 1, MS_RDONLY)
    for folder in {policy.private, policy.workdir}:
        if folder == policy.private or not folder.startswith(policy.private + "/"):
            _bind(folder, root + folder, read_only=False)
    for device in DEVICES:
        if os.path.exists(f"/dev/{device}"):
            _bind(f"/dev/{device}", f"{root}/dev/{device}", read_only=False)
    os.makedirs(f"{root}/proc", exist_ok=True)
    _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(root, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY)  # the skeleton itself
    os.chroot(root)
    os.chdir(policy.workdir)


def _stand_in(kernel: int, parent: int) -> None:
    """The process the grader started, once the kernel runs in a PID namespace beneath it: it
    waits for the kernel and exits as it did. Signals for the kernel reach it through the
    process group (jupyter_client signals the group); whatever ends this process ends the
    kernel too (its parent-death signal), and it ends with the process that started it (the
    grader's worker or zygote), so a grader killed outright leaves no kernel behind."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the grader's end is the end
    if os.getppid() != parent:  # it ended before that took hold
        os._exit(1)
    while True:
        try:
            _, status = os.waitpid(kernel, 0)
            break
        except ChildProcessError:
            os._exit(1)
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)


def unavailable() -> str | None:
    """Why kernels cannot get their own file view, network and uid here, or None if they can."""
    if sys.platform != "linux" or os.geteuid() != 0:
        return "grading does not run as root on Linux"
    pid = os.fork()
    if pid == 0:  # try in a throw-away child: unshare changes the caller for good
        try:
            _call("unshare", NAMESPACES)
            os._exit(0)
        except SandboxError as error:
            os._exit(error.errno or 1)
    status = os.waitpid(pid, 0)[1]
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else f"namespaces are not allowed here ({os.strerror(code)})"


def close_inherited() -> None:
    """Keep no descriptor of the process this one was forked from: standard streams to
    /dev/null (the kernel's output goes over its own sockets, made after this), every other one
    closed. A zygote's log, shared by every kernel it forks, must never carry one student's
    output to another's grading. (A kernel started cold is exec'ed with only its standard
    streams, the grader's own.)"""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])


def enter(policy: Policy) -> list[str]:
    """Sandbox the current process (which then runs the kernel); return what was not enforced.
    Isolated, the caller stays outside as the kernel's stand-in and never returns from here: its
    child, the first process of a new PID namespace, returns and becomes the kernel."""
    missing = []
    parent = os.getppid()
    try:
        os.setsid()  # its own process group: killing the kernel kills what it started
    except OSError:
        pass  # already a group leader (a launcher started with start_new_session)
    uid = kernel_uid(os.getpid())  # the pid the grader knows, not the namespace's 1
    isolated = False
    if policy.isolate and os.geteuid() == 0:
        try:
            _call("unshare", NAMESPACES)
            isolated = True
        except SandboxError as error:
            missing.append(f"no namespaces of its own ({error.strerror})")
    elif policy.isolate:
        missing.append("no private file view, namespaces or own uid (the grader is not root)")
    if isolated:
        kernel = os.fork()
        if kernel:
            _stand_in(kernel, parent)
        for folder in {policy.private, policy.workdir}:
            for path in [folder, *(str(p) for p in Path(folder).rglob("*"))]:
                os.lchown(path, uid, uid)
        _build_root(policy)
    _apply_limits(policy.limits)
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary gives rights back
    if isolated:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # after setuid, which clears it
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
