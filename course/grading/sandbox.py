"""The sandbox a grading kernel runs in: an allow-list of paths, namespaces of its own, limits.

Runs in: the process that becomes a grading kernel, before any student code runs (and the grader,
which kills a kernel's uid).

Everywhere: resource limits (memory, CPU seconds, processes, file size, no core dumps).
Where the machine allows it (Linux, as root with CAP_SYS_ADMIN, or any user where the kernel
allows unprivileged user namespaces), also:
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
  given, signal the grader, or use up another kernel's process quota. Unprivileged (a user
  namespace: an ordinary pod, a worker run as a plain user) there is no other uid to give: the
  kernel keeps the grader's uid with every capability dropped, and its namespaces are what keep
  it from the grader (it sees none of its files, and no process outside its own);
- a home of a fixed size: its private folder (HOME, TMPDIR, IPYTHONDIR, MPLCONFIGDIR, the working
  folder) is a tmpfs of ``Limits.home_mb`` in its own mount namespace, so no path it may write
  lies on the grader's disk (`_build_root`: what the grader and the kernel exchange there);
- a cgroup of its own, where the machine's cgroupfs can be written (`KernelCgroup`): memory and
  process limits for the kernel as a whole, a share of the CPU (``Limits.cpu_share`` cores at
  most, whatever number of threads it runs, so no kernel starves the others), and the CPU time
  of everything it started.

`enter` applies a `Policy` to the current process (a kernel forked from a warm zygote);
``python -m course.grading.sandbox POLICY -- CMD...`` applies it and execs CMD (a kernel started
cold).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import json
import os
import re
import resource
import shutil
import signal
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .kernelenv import package_dir

CLONE_NEWNS, CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWIPC = 0x20000, 0x40000000, 0x20000000, 0x8000000
CLONE_NEWUSER = 0x10000000
NAMESPACES = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOSYMFOLLOW, MS_BIND, MS_REC, MS_PRIVATE = 256, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME = 1024, 2048, 1 << 21
PR_SET_PDEATHSIG, PR_SET_NO_NEW_PRIVS = 1, 38
PR_CAPBSET_DROP, PR_SET_SECUREBITS, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 24, 28, 47, 4
SECURE_NOTHING_REGAINED = 0xEF  # no root magic, no setuid fixup, no ambient raise: all locked
NEW_ROOT = "/mnt"  # where the kernel's root is built, in its own mount namespace
DEVICES = ("null", "zero", "full", "random", "urandom")
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")
FIRST_UID = 100_000  # kernels get FIRST_UID + their pid: unique among live kernels, never a user
CGROUP_PARENT = "course-kernels"  # kernels' cgroups: <the grader's cgroup>/course-kernels/<pid>
CPU_PERIOD = 100_000  # microseconds: the period of a kernel's CPU quota


@dataclass(frozen=True)
class Limits:
    memory_mb: int = 4096  # private memory (RLIMIT_DATA), torch and the lesson included
    cpu_seconds: int = 600  # all threads together; the kernel is killed past it
    processes: int = 256  # processes and threads of the kernel's own uid
    file_mb: int = 64  # the largest file it may write
    tmpfs_mb: int = 64  # size of its private /tmp and /dev/shm
    home_mb: int = 64  # size of its home: HOME, TMPDIR, IPYTHONDIR, MPLCONFIGDIR, working folder
    cpu_share: float = 1.0  # cores it may keep busy at most (its cgroup's quota); 0: no limit


def kernel_memory_mb(limits: Limits) -> int:
    """The memory of all of a kernel's processes together (its cgroup's limit): one process's
    own (``memory_mb``, RLIMIT_DATA) and a margin for what RLIMIT_DATA does not count (code,
    stacks, the page cache), so that a single process still meets RLIMIT_DATA first (a
    MemoryError, "out of memory"), plus its tmpfs folders, whose pages are charged to it."""
    margin = max(256, limits.memory_mb // 4)
    return limits.memory_mb + margin + limits.home_mb + len(SCRATCH) * limits.tmpfs_mb


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
    """CPU seconds used so far by the kernel whose session is ``session`` (its stand-in's pid,
    from the setsid in `enter`): from its cgroup where it has one, so that what it started in a
    session of its own counts too; else by the processes of the session, the children they have
    reaped included (processes that exit meanwhile are skipped).
    """
    used = KernelCgroup.cpu_seconds(session)
    return session_only_cpu_seconds(session) if used is None else used


def session_only_cpu_seconds(session: int) -> float:
    """CPU seconds used so far by the processes of a session and the children they reaped."""
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


def _write(path: str, text: str) -> None:
    """Write a cgroup file: its errors come from the write itself, which this does not buffer."""
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


@functools.lru_cache(maxsize=1)
def _cgroup_homes() -> dict[str, str]:
    """This process's cgroup folder in each hierarchy that has a controller a kernel's cgroup
    uses: "memory", "pids", "cpu", "cpuacct" (cgroup v1), or "unified" (cgroup v2, where it has
    the memory and pids controllers and v1 does not). {} where there is none, or no cgroupfs."""
    try:
        with open("/proc/self/cgroup") as own, open("/proc/self/mountinfo") as info:
            paths = dict(line.rstrip("\n").split(":", 2)[1:] for line in own)
            mounts = info.read().splitlines()
    except (OSError, ValueError):
        return {}
    homes, unified = {}, None
    for line in mounts:
        left, _, right = line.partition(" - ")
        fields, kind = left.split(), right.split()
        if len(fields) < 5 or len(kind) < 3 or kind[0] not in ("cgroup", "cgroup2"):
            continue
        root, point = (re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), f) for f in fields[3:5])
        if kind[0] == "cgroup2":
            key, names = "", ["unified"]
        else:
            names = [o for o in kind[2].split(",") if o in ("memory", "pids", "cpu", "cpuacct")]
            found = (k for k in paths if names and set(k.split(",")) >= set(names))
            key = next(found, None)
        path = paths.get(key) if key is not None else None
        if not names or path is None or not (path + "/").startswith(root.rstrip("/") + "/"):
            continue  # not ours, or mounted from a subtree that does not hold this process
        folder = os.path.normpath(point + "/" + path[len(root.rstrip("/")) :])
        for name in names:
            if name == "unified":
                unified = folder
            else:
                homes.setdefault(name, folder)
    if unified and "memory" not in homes:
        try:
            with open(os.path.join(unified, "cgroup.controllers")) as available:
                if {"memory", "pids"} <= set(available.read().split()):
                    homes = {"unified": unified}
        except OSError:
            pass
    return homes


class KernelCgroup:
    """A kernel's own cgroup, one folder per hierarchy, named by its stand-in's pid under
    ``course-kernels`` in the grader's cgroup (so the grader's own limits still hold): a memory
    limit for all its processes together (`kernel_memory_mb`), a process limit
    (``Limits.processes``), a CPU quota (``Limits.cpu_share`` cores: kernels share the machine
    as equals, each counted as one, not by its number of threads), and the CPU time of
    everything in it (`cpu_seconds`).

    `join` puts the calling process in it, before the kernel's PID namespace has any process:
    everything the kernel starts is in it too, in whatever session. The stand-in moves itself
    back out (`leave`) and removes it once the kernel has ended (`remove`); one left behind by a
    stand-in killed outright is removed by the next kernel's `join` (`_sweep`). Where no cgroup
    can be made (not root, a read-only cgroupfs, cgroup v2 without delegation), there is none and
    the limits stay per process, as without it."""

    def __init__(self, folders: dict[str, str]):
        self.folders = folders  # hierarchy -> this kernel's folder there

    @staticmethod
    def _settings(hierarchy: str, limits: Limits) -> tuple[list[tuple[str, str]], list[str]]:
        """(file, value) pairs that must be written, and the optional files among them."""
        memory = str(kernel_memory_mb(limits) * 1024 * 1024)
        quota = str(int(limits.cpu_share * CPU_PERIOD)) if limits.cpu_share > 0 else "-1"
        if hierarchy == "memory":  # memsw: with swap accounting, swap is no way around it
            return [
                ("memory.limit_in_bytes", memory),
                ("memory.memsw.limit_in_bytes", memory),
            ], ["memory.memsw.limit_in_bytes"]
        if hierarchy == "pids":
            return [("pids.max", str(limits.processes))], []
        if hierarchy == "cpu":
            return [("cpu.cfs_period_us", str(CPU_PERIOD)), ("cpu.cfs_quota_us", quota)], []
        if hierarchy == "unified":
            cpu_max = f"{quota if quota != '-1' else 'max'} {CPU_PERIOD}"
            return [
                ("memory.max", memory),
                ("memory.swap.max", "0"),
                ("pids.max", str(limits.processes)),
                ("cpu.max", cpu_max),
            ], ["memory.swap.max", "cpu.max"]
        return [], []  # cpuacct: counted, not limited

    @classmethod
    def join(cls, limits: Limits) -> KernelCgroup | None:
        """Make the cgroup and move this process into it; None where none can be made."""
        if sys.platform != "linux" or os.geteuid() != 0:
            return None
        folders, pid = {}, os.getpid()
        for hierarchy, home in _cgroup_homes().items():
            parent = os.path.join(home, CGROUP_PARENT)
            leaf = os.path.join(parent, str(pid))
            try:
                if hierarchy == "unified":  # v2: controllers are handed down explicitly
                    for folder in (home, parent):
                        os.makedirs(folder, exist_ok=True)
                        control = os.path.join(folder, "cgroup.subtree_control")
                        _write(control, "+memory +pids")
                        with contextlib.suppress(OSError):  # where v2 has no cpu controller
                            _write(control, "+cpu")
                os.makedirs(parent, exist_ok=True)
                cls._sweep(parent)
                os.makedirs(leaf, exist_ok=True)  # a leftover of a dead pid that was ours: reused
                required, optional = cls._settings(hierarchy, limits)
                for name, value in required:
                    path = os.path.join(leaf, name)
                    if name in optional and not os.path.exists(path):
                        continue
                    _write(path, value)
                _write(os.path.join(leaf, "cgroup.procs"), str(pid))
            except OSError:
                with contextlib.suppress(OSError):
                    os.rmdir(leaf)
                continue
            folders[hierarchy] = leaf
        return cls(folders) if folders else None

    @staticmethod
    def unavailable() -> str | None:
        """Why kernels get no cgroup of their own here, or None if they do."""
        if sys.platform != "linux" or os.geteuid() != 0:
            return "grading does not run as root on Linux"
        homes = _cgroup_homes()
        if "memory" not in homes and "unified" not in homes:
            return "no cgroup hierarchy with the memory controller"
        folder = os.path.join(homes.get("memory") or homes["unified"], f"{CGROUP_PARENT}-probe")
        try:
            os.makedirs(folder, exist_ok=True)
            os.rmdir(folder)
        except OSError as error:
            return f"cgroups cannot be made here ({error.strerror})"
        return None

    @staticmethod
    def _sweep(parent: str) -> None:
        """Remove the cgroups of kernels whose stand-in is gone (killed before it could)."""
        with contextlib.suppress(OSError):
            for name in os.listdir(parent):
                if name.isdigit() and not _alive(int(name)):
                    with contextlib.suppress(OSError):  # not empty yet (EBUSY): next time
                        os.rmdir(os.path.join(parent, name))

    def leave(self) -> None:
        """Move the calling process back to the cgroups it came from (the grader's)."""
        for hierarchy, leaf in self.folders.items():
            home = os.path.dirname(os.path.dirname(leaf))
            with contextlib.suppress(OSError):
                _write(os.path.join(home, "cgroup.procs"), str(os.getpid()))

    def remove(self, wait: float = 2.0) -> None:
        """Remove the (now empty) folders; a process still exiting gets ``wait`` seconds."""
        deadline = time.monotonic() + wait
        for leaf in self.folders.values():
            while True:
                try:
                    os.rmdir(leaf)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # EBUSY: a process of the kernel has not quite gone yet
                    if time.monotonic() > deadline:
                        break  # the next kernel's sweep removes it
                    time.sleep(0.01)

    @staticmethod
    def cpu_seconds(pid: int) -> float | None:
        """CPU seconds used in the cgroup of the kernel whose stand-in is ``pid``, or None."""
        homes = _cgroup_homes()
        try:
            if "cpuacct" in homes:
                path = os.path.join(homes["cpuacct"], CGROUP_PARENT, str(pid), "cpuacct.usage")
                with open(path) as usage:
                    return int(usage.read()) / 1e9
            if "unified" in homes:
                path = os.path.join(homes["unified"], CGROUP_PARENT, str(pid), "cpu.stat")
                with open(path) as stat:
                    fields = dict(line.split() for line in stat if line.strip())
                return int(fields["usage_usec"]) / 1e6
        except (OSError, ValueError, KeyError):
            pass
        return None


_libc = ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args) -> None:
    if getattr(_libc, name)(*args) != 0:
        errno = ctypes.get_errno()
        raise SandboxError(errno, f"{name}: {os.strerror(errno)}")


def die_with_parent() -> None:
    """Be killed (SIGKILL) when the process that started this one ends."""
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


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


def _kept_flags(path: str) -> int:
    """The flags of the mount ``path`` lies on that a remount must keep: in a user namespace the
    kernel locks them (nodev, noexec, the atime mode), and a remount that drops one fails."""
    got = os.statvfs(path).f_flag
    pairs = [(os.ST_NODEV, MS_NODEV), (os.ST_NOEXEC, MS_NOEXEC), (os.ST_NOATIME, MS_NOATIME)]
    pairs += [(os.ST_NODIRATIME, MS_NODIRATIME), (os.ST_RELATIME, MS_RELATIME)]
    return sum(flag for st, flag in pairs if got & st)


def _bind(source: str, target: str, read_only: bool) -> None:
    if os.path.isdir(source):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        open(target, "a").close()
    _mount(source, target, None, MS_BIND | MS_REC)
    if read_only:
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY | MS_REC | MS_NOSUID | _kept_flags(source)
        _mount("none", target, None, flags)


def _tmpfs(target: str, mode: str, size_mb: int, flags: int = 0, owner: int = 0) -> None:
    os.makedirs(target, exist_ok=True)
    options = f"mode={mode},size={size_mb}m" + (f",uid={owner},gid={owner}" if owner else "")
    _mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV | flags, options)


def _connection_sockets(private: str) -> list[str]:
    """The socket paths in ``private`` that the kernel binds: those of a connection file there
    (``kernel.json``, written by the grader before the kernel starts) with the ipc transport."""
    sockets = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(private):
            if not entry.name.endswith(".json") or not entry.is_file(follow_symlinks=False):
                continue
            try:
                info = json.loads(Path(entry.path).read_text())
            except (OSError, ValueError):
                continue
            if not isinstance(info, dict) or info.get("transport") != "ipc":
                continue
            ip = str(info.get("ip", ""))
            if not ip.startswith(private + "/"):
                continue
            ports = (v for k, v in info.items() if k.endswith("_port") and isinstance(v, int))
            sockets += [f"{ip}-{port}" for port in ports]
    return sockets


def _link_kernel_sockets(policy: Policy, stand_in: int) -> None:
    """The kernel binds its sockets in its home, a tmpfs of its own mount namespace: give each
    its name in the grader's folder too, as a link through the stand-in's root, which is that
    namespace's (the grader is root: it may follow it). The links are the grader's; the kernel
    never sees this folder writable."""
    for path in _connection_sockets(policy.private):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)  # a previous kernel's, on a restart
        os.symlink(f"/proc/{stand_in}/root{NEW_ROOT}{path}", path)


def _make_home(policy: Policy, uid: int) -> None:
    """The kernel's private folder, inside its root: a tmpfs of ``home_mb``, owned by it, with a
    copy of the grader's files there (the connection file: ipykernel rewrites it) and its working
    folder."""
    root, private, size = NEW_ROOT, policy.private, policy.limits.home_mb
    # No link there is followed: the grader connects to the kernel's sockets by their names in
    # this folder, which the kernel can write, and a link put in a socket's place would lead the
    # grader (root) to any socket of the machine's, such as a zygote's.
    _tmpfs(root + private, "700", size, MS_NOSYMFOLLOW, owner=uid)
    if not policy.workdir.startswith(private + "/"):  # elsewhere (never, in this grader)
        _tmpfs(root + policy.workdir, "700", size, owner=uid)
    for entry in os.scandir(private):
        if entry.is_file(follow_symlinks=False):
            copy = root + entry.path
            shutil.copyfile(entry.path, copy)
            os.chown(copy, uid, uid)
            os.chmod(copy, 0o600)
    if policy.workdir.startswith(private + "/"):
        made = root + private
        for part in Path(policy.workdir).relative_to(private).parts:
            made = os.path.join(made, part)
            os.makedirs(made, exist_ok=True)
            os.chown(made, uid, uid)


def _build_root(policy: Policy, uid: int) -> None:
    """Make the kernel's root folder from the policy's allow-list, then enter it. Runs as the
    first process of the new PID namespace, so the /proc it mounts shows only the kernel's.

    Every folder it may write is a tmpfs of a fixed size: /tmp, /var/tmp, /dev/shm
    (``tmpfs_mb``) and its private folder (``home_mb``, `_make_home`). The grader and the kernel
    exchange, in that folder: the connection file (the grader writes it, the kernel reads and
    rewrites it: a copy) and the kernel's sockets (the kernel binds them, the grader connects:
    `_link_kernel_sockets`)."""
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
    _make_home(policy, uid)
    for device in DEVICES:
        if os.path.exists(f"/dev/{device}"):
            _bind(f"/dev/{device}", f"{root}/dev/{device}", read_only=False)
    os.makedirs(f"{root}/proc", exist_ok=True)
    _mount("proc", f"{root}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    _mount(root, root, None, MS_REMOUNT | MS_BIND | MS_RDONLY)  # the skeleton itself
    os.chroot(root)
    os.chdir(policy.workdir)


def _stand_in(kernel: int, parent: int, cgroup: KernelCgroup | None) -> None:
    """The process the grader started, once the kernel runs in a PID namespace beneath it: it
    waits for the kernel and exits as it did. Signals for the kernel reach it through the
    process group (jupyter_client signals the group); whatever ends this process ends the
    kernel too (its parent-death signal), and it ends with the process that started it (the
    grader's worker or zygote), so a grader killed outright leaves no kernel behind. It moves
    out of the kernel's cgroup at once and removes it when the kernel has ended."""
    if cgroup is not None:
        cgroup.leave()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()  # the grader's end is the end
    if os.getppid() != parent:  # it ended before that took hold
        os._exit(1)
    while True:
        try:
            _, status = os.waitpid(kernel, 0)
            break
        except ChildProcessError:
            os._exit(1)
    code = os.waitstatus_to_exitcode(status)
    if cgroup is not None:
        cgroup.remove()  # the PID namespace's last process is gone with its first
    os._exit(code if code >= 0 else 128 - code)


def _isolate() -> bool:
    """Give the calling process namespaces of its own: as root, those alone (the kernel then
    gets a uid of its own: True); else inside a new user namespace whose root is the caller's
    own uid (False). Raises `SandboxError` when neither is allowed."""
    if os.geteuid() == 0:
        try:
            _call("unshare", NAMESPACES)
            return True
        except SandboxError:  # root without CAP_SYS_ADMIN (a container): as an ordinary user
            pass
    uid, gid = os.geteuid(), os.getegid()
    _call("unshare", CLONE_NEWUSER | NAMESPACES)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        _write(f"/proc/self/{name}", text)
    return False


def _drop_capabilities() -> None:
    """Keep none of the capabilities a user namespace's root has there (mount, chroot, ...), and
    regain none by exec: the kernel cannot undo its file view or leave its root folder."""
    _call("prctl", PR_SET_SECUREBITS, SECURE_NOTHING_REGAINED, 0, 0, 0)
    last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
    for capability in range(last + 1):
        _call("prctl", PR_CAPBSET_DROP, capability, 0, 0, 0)
    _call("prctl", PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    _call("capset", header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: none


def unavailable() -> str | None:
    """Why kernels cannot get their own file view, processes and network here, or None if they
    can (`protections` says with which uid)."""
    return _tried()[1]


def protections() -> str:
    """What a grading kernel here gets, in one line, for the grader to say once."""
    own_uid, reason = _tried()
    if reason:
        return f"limits only: no namespaces ({reason}); the kernel runs with the grader's rights"
    held = "own file view, processes, network and IPC"
    held += ", a uid of its own" if own_uid else " (a user namespace: the grader's uid, no rights)"
    cgroup = KernelCgroup.unavailable()
    return held + (f"; per-process limits, no cgroup ({cgroup})" if cgroup else "; a cgroup")


UNTRIED = 255  # a throw-away child's exit status when it failed for another reason than errno


def _exit_after(attempt) -> None:
    """In a forked child: run ``attempt()`` and exit with what it returns, 2 + the errno of an
    OSError it raised, or `UNTRIED`: never back into the caller's code."""
    code = UNTRIED
    try:
        code = attempt()
    except OSError as error:
        code = min(UNTRIED - 1, 2 + (error.errno or 0))
    finally:
        os._exit(code)


def _try_root() -> int:
    """Make what `_build_root` makes first: a private tmpfs and a /proc of the PID namespace
    (which a container whose /proc has masked paths refuses a user namespace)."""
    _mount("none", "/", None, MS_REC | MS_PRIVATE)
    _tmpfs(NEW_ROOT, "755", 1)
    os.makedirs(f"{NEW_ROOT}/proc")
    _mount("proc", f"{NEW_ROOT}/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return 0


def _try_isolate() -> int:
    """0 or 1 (`_isolate` gave a uid of its own, or not) once the first process of the new
    PID namespace has built a root (`_try_root`); else what that child exited with."""
    own_uid = _isolate()
    first = os.fork()
    if first == 0:
        _exit_after(_try_root)
    built = os.waitstatus_to_exitcode(os.waitpid(first, 0)[1])
    return built or (0 if own_uid else 1)


@functools.lru_cache(maxsize=1)
def _tried() -> tuple[bool, str | None]:
    """(whether kernels get a uid of their own, why they get no namespaces or None), tried once
    in a throw-away child (unshare changes the caller for good) and its child, the first
    process of the new PID namespace, as a kernel's would be."""
    if sys.platform != "linux":
        return False, "not Linux"
    pid = os.fork()
    if pid == 0:
        _exit_after(_try_isolate)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if code in (0, 1):
        return code == 0, None
    if code == UNTRIED or code < 0:
        return False, "namespaces could not be tried here"
    return False, f"namespaces are not allowed here ({os.strerror(code - 2)})"


def close_inherited() -> None:
    """Keep no descriptor of the process this one was forked from: standard streams to /dev/null
    (the kernel's output goes over its own sockets, made after this), every other one closed. A
    zygote's log, shared by every kernel it forks, must never carry one student's output to
    another's grading. (A kernel started cold is launched with its streams on /dev/null and keeps
    only those, `main`: the grader's terminal never receives a byte a kernel chose.)"""
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
    isolated = own_uid = False
    if policy.isolate:
        try:
            own_uid = _isolate()
            isolated = True
        except SandboxError as error:
            missing.append(f"no namespaces of its own ({error.strerror})")
    # the pid the grader knows, not the namespace's 1; in a user namespace its root, which is
    # the grader's uid outside
    uid = kernel_uid(os.getpid()) if own_uid else 0
    if isolated:
        _link_kernel_sockets(policy, os.getpid())
        # before the namespace has a process
        cgroup = KernelCgroup.join(policy.limits) if own_uid else None
        kernel = os.fork()
        if kernel:
            _stand_in(kernel, parent, cgroup)
        for folder in {policy.private, policy.workdir} if own_uid else ():
            for path in [folder, *(str(p) for p in Path(folder).rglob("*"))]:
                os.lchown(path, uid, uid)  # its view of the grader's: read-only
        _build_root(policy, uid)
    _apply_limits(policy.limits)
    _call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # no setuid binary gives rights back
    if own_uid:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)  # and with it every capability
        die_with_parent()  # again after setuid, which clears it
    elif isolated:
        _drop_capabilities()
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
    enter(Policy.from_json(argv[split - 1]))  # what it could not enforce, `grade` has said
    # Only the standard streams its starter chose go on (the grader gives a kernel /dev/null).
    os.closerange(3, resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    command = argv[split + 1 :]
    os.execvp(command[0], command)


if __name__ == "__main__":
    main(sys.argv[1:])
