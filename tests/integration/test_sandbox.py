"""The kernel sandbox (course.grading.sandbox), through its launcher: what a sandboxed process can
see, reach and use. The grading tests (test_adversarial) check the same through real kernels."""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from course.grading import sandbox
from course_testing import WORKER_UID, jailed, live_processes

PROBE = """
import os, socket, sys
from pathlib import Path
print("uid", os.getuid())
print("cwd", os.getcwd())
course = Path(sys.argv[1])
print("course sees", sorted(p.name for p in course.iterdir()) if course.exists() else "nothing")
try:
    socket.create_connection(("127.0.0.1", 9), timeout=1)
    print("network yes")
except OSError as error:
    print("network no", error.errno)
try:
    bytearray(6 * 1024**3)
    print("memory yes")
except MemoryError:
    print("memory no")
try:
    Path(sys.argv[1], "written").write_text("x")
    print("wrote course")
except OSError:
    print("no write to course")
print("root sees", sorted(os.listdir("/")))
print("shared lock folder", os.path.exists("/run/lock"))
print("processes", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
print("ipc namespace", os.readlink("/proc/self/ns/ipc"))
status = open("/proc/self/status").read()
print("capabilities", status.split("CapEff:")[1].split()[0])
try:
    os.chroot("/tmp")  # with CAP_SYS_CHROOT, a way out of its root folder
    print("chroot allowed")
except OSError:
    print("chroot refused")
try:
    Path(sys.prefix, "planted").write_text("x")
    Path(sys.prefix, "planted").unlink()  # not isolated, this could write: leave nothing
    print("wrote python")
except OSError:
    print("python read-only")
if len(sys.argv) > 2:  # leave a child behind, which must not outlive this process
    import subprocess
    subprocess.Popen(["sleep", sys.argv[2]], start_new_session=True)
"""


def _run(tmp_path: Path, isolate: bool = True, *extra: str, jail: tuple[str, ...] = ()) -> str:
    """The probe's report, run in the sandbox by a grader started with the command prefix
    ``jail`` (which then owns ``tmp_path``), or by one like this process."""
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("secret")
    workdir, private = tmp_path / "work", tmp_path / "private"
    workdir.mkdir()
    private.mkdir()
    if jail:
        for path in [tmp_path, *tmp_path.rglob("*")]:
            os.chown(path, WORKER_UID, WORKER_UID)
    policy = sandbox.policy_for(course, workdir, private, isolate=isolate)
    result = subprocess.run(
        [
            *jail,
            sys.executable,
            "-m",
            "course.grading.sandbox",
            policy.to_json(),
            "--",
            sys.executable,
            "-c",
            PROBE,
            str(course),
            *extra,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


needs_root = pytest.mark.skipif(
    sandbox.unavailable() is not None, reason=f"no sandbox here: {sandbox.unavailable()}"
)


def test_this_machine_can_sandbox():
    """CI and the instructor's container run as root: the sandbox must be there."""
    assert sandbox.unavailable() is None


@needs_root
def test_a_sandboxed_process_sees_only_its_working_copy(tmp_path):
    out = _run(tmp_path)
    uid = int(out.split("uid ")[1].split()[0])
    assert uid >= sandbox.FIRST_UID
    assert f"cwd {tmp_path / 'work'}" in out
    assert "course sees []" in out or "course sees nothing" in out  # no source/, no gradebook
    assert "network no" in out
    assert "no write to course" in out and not (tmp_path / "course" / "written").exists()


def test_limits_apply_without_isolation_too(tmp_path):
    out = _run(tmp_path, isolate=False)
    assert "memory no" in out  # 6 GiB is past the 4 GiB limit
    assert "course sees ['gradebook.db', 'source']" in out  # the known-bad case: not isolated
    assert "chroot allowed" in out  # root's capabilities, kept


def test_a_policy_survives_its_json():
    policy = sandbox.policy_for(Path("/srv/course"), Path("/tmp/w"), Path("/tmp/p"))
    assert sandbox.Policy.from_json(policy.to_json()) == policy
    assert not any(p.startswith("/srv") for p in policy.read_only)
    assert str(Path(sys.prefix).resolve()) in policy.read_only


@needs_root
def test_the_kernel_sees_an_allow_list_and_its_own_processes_only(tmp_path):
    """Nothing but the Python installation (read-only), /usr and its own folders: no shared
    world-writable folder, no other process, an IPC namespace of its own."""
    out = _run(tmp_path)
    root = out.split("root sees ")[1].splitlines()[0]
    assert "'home'" not in root and "'run'" not in root and "'srv'" not in root
    assert "shared lock folder False" in out
    assert out.split("processes ")[1].splitlines()[0] == "[1]"  # the kernel is the first
    assert Path("/proc/self/ns/ipc").readlink().name not in out.split("ipc namespace ")[1]
    assert "python read-only" in out
    assert "capabilities 0000000000000000" in out and "chroot refused" in out


@needs_root
def test_an_unprivileged_grader_sandboxes_through_a_user_namespace():
    """A grader that is not root (a worker in an ordinary pod: `tests/worker_jail.py`) still
    gives the kernel its own root folder, processes and network, with no capability left:
    only its uid is the grader's."""
    folder = Path(tempfile.mkdtemp(prefix="course-unprivileged-"))  # pytest's: root's alone
    try:
        folder.chmod(0o755)
        out = _run(folder, True, jail=tuple(jailed(folder)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert "uid 0" in out, "root of its user namespace: the grader's uid outside"
    assert "course sees nothing" in out or "course sees []" in out
    assert "network no" in out and "no write to course" in out and "python read-only" in out
    assert out.split("processes ")[1].splitlines()[0] == "[1]"
    assert "capabilities 0000000000000000" in out and "chroot refused" in out
    assert "memory no" in out


@pytest.mark.parametrize(
    "why,reason",
    [("--no-user-namespaces", "No space left on device"), ("--masked-proc", "not permitted")],
)
def test_a_worker_that_cannot_build_the_sandbox_says_so(why, reason):
    """Where user namespaces are forbidden, or a container's /proc has masked files (a user
    namespace may then mount no /proc of its own), the grader knows before any kernel starts."""
    folder = Path(tempfile.mkdtemp(prefix="course-unprivileged-"))
    try:
        folder.chmod(0o755)
        said = subprocess.run(
            [*jailed(folder, why), sys.executable, "-c", TELL],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    assert said.returncode == 0, said.stderr
    unavailable, protections = said.stdout.splitlines()
    assert "namespaces are not allowed here" in unavailable and reason in unavailable
    assert protections.startswith("limits only: no namespaces")


TELL = (
    "from course.grading import sandbox; print(sandbox.unavailable()); print(sandbox.protections())"
)


@needs_root
def test_nothing_a_kernel_started_outlives_it(tmp_path):
    """A child in a session of its own (what escaped a process-group kill) ends with the
    kernel: the kernel was the first process of its PID namespace."""
    marker = "987.5"
    _run(tmp_path, True, marker)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        left = subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True)
        if not left.stdout.strip():
            break
        time.sleep(0.2)
    assert not left.stdout.strip(), "the sleep the kernel started is still running"


@needs_root
def test_a_course_inside_an_allowed_tree_is_covered(tmp_path, monkeypatch):
    """Where the venv's folder also holds a course (a clone with source/ beside .venv), the
    kernel does not see it."""
    policy = sandbox.policy_for(Path(sys.prefix) / "lib", tmp_path / "w", tmp_path / "p")
    assert str((Path(sys.prefix) / "lib").resolve()) in policy.hide


def test_kill_uid_ends_every_process_of_a_kernel_uid(tmp_path):
    if sandbox.unavailable() is not None:
        pytest.skip("needs root")
    uid = sandbox.FIRST_UID + 999_999
    sleepers = [
        subprocess.Popen(["sleep", "60"], user=uid, group=uid, start_new_session=True)
        for _ in range(3)
    ]
    sandbox.kill_uid(uid)
    assert all(p.wait(timeout=10) == -9 for p in sleepers)


HOPPER = """
import os, sys
hops = 0
while True:  # fork, and let the parent go: a new pid every few microseconds
    hops += 1
    if hops % 100 == 0:  # the count goes on in the child: it moves while any hopper lives
        with open(sys.argv[1], "w") as count:
            count.write(str(hops))
    if os.fork():
        os._exit(0)
"""


def _processes_of(uid: int) -> dict[int, str]:
    """The live processes of ``uid``, with their states."""
    return {
        pid: fields["State"]
        for pid, fields in live_processes()
        if int(fields["Uid"].split()[0]) == uid
    }


def test_kill_uid_ends_a_process_that_hops_from_pid_to_pid():
    if sandbox.unavailable() is not None:
        pytest.skip("needs root")
    python = Path("/usr/bin/python3")  # one that any uid may run (the venv's sits under /root)
    if not python.exists():
        pytest.skip(f"{python} is missing")
    uid = sandbox.FIRST_UID + 999_998
    # A scan of /proc can miss a process that changes pid every few microseconds; the count
    # the hoppers write cannot: it moves while one lives. (In /tmp itself: pytest's folders are
    # closed to other uids.)
    shared = Path(tempfile.mkdtemp(prefix="hopper-", dir="/tmp"))
    shared.chmod(0o777)
    count = shared / "count"

    def hops() -> int:
        text = count.read_text() if count.exists() else ""
        return int(text) if text.strip() else 0

    subprocess.Popen(
        [python, "-c", HOPPER, str(count)], user=uid, group=uid, start_new_session=True
    )

    def seen(samples: int) -> dict[int, str]:
        """The first live processes of ``uid`` that any of ``samples`` looks at /proc finds."""
        for _ in range(samples):
            if found := _processes_of(uid):
                return found
            time.sleep(0.05)
        return {}

    def within(seconds: float, condition) -> bool:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    # Deadlines, not durations: on a loaded machine Python itself takes seconds to start.
    try:
        assert within(60, lambda: hops() > 0), "the hopper runs"
        sandbox.kill_uid(uid)
        within(30, lambda: not _processes_of(uid))  # SIGKILLed processes take a moment to die
        survivors = seen(20)
        assert not survivors, f"a hopper outlived the kill: {survivors}"
        before = hops()
        time.sleep(1)
        assert hops() == before, "a hopper outlived the kill: the count still moves"
    finally:
        sandbox.kill_uid(uid)
        shutil.rmtree(shared, ignore_errors=True)


# ---- the kernel as a whole: its home's size, its cgroup ---------------------------------------


def _sandboxed(
    tmp_path: Path, code: str, *args: str, isolate: bool = True, **limits: int
) -> subprocess.Popen:
    """Start ``python -c code args`` sandboxed, as the grader starts a kernel cold: in a private
    folder holding its working folder and a connection file (ipc transport)."""
    private = tmp_path / "private"
    workdir = private / "work"
    workdir.mkdir(parents=True)
    (private / "kernel.json").write_text(
        json.dumps({"transport": "ipc", "ip": f"{private}/ipc", "shell_port": 1, "key": "k"})
    )
    policy = sandbox.policy_for(
        tmp_path / "course", workdir, private, sandbox.Limits(**limits), isolate=isolate
    )
    command = [sys.executable, "-m", "course.grading.sandbox", policy.to_json(), "--"]
    return subprocess.Popen(
        [*command, sys.executable, "-c", code, *args],
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as jupyter_client starts it
    )


def _finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def _size_kb(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*")) // 1024


FILLER = """
import os, sys
from pathlib import Path
home = Path(os.environ["HOME"])
for folder in (Path.cwd(), home, Path(os.environ["TMPDIR"]), home / ".ipython"):
    folder.mkdir(exist_ok=True)
    try:
        for i in range(4):  # 12 MB in files of 3 MB, each under the file-size limit
            (folder / f"fill{i}").write_bytes(b"x" * (3 << 20))
        print(folder, "wrote 12 MB")
    except OSError as error:
        print(folder, "error", error.errno)
    for i in range(4 if sys.argv[1:] != ["keep"] else 0):  # the next folder: a new try
        (folder / f"fill{i}").unlink(missing_ok=True)
"""


@needs_root
def test_a_kernel_cannot_fill_the_graders_disk(tmp_path):
    """Its home (HOME, TMPDIR, IPYTHONDIR, the working folder) is a tmpfs of ``home_mb``:
    writing past it fails (ENOSPC, or EFBIG), and nothing lands in the grader's folder."""
    out = _finish(_sandboxed(tmp_path, FILLER, home_mb=8))
    assert "wrote" not in out, out
    assert out.count(" error 28") + out.count(" error 27") == 4, out
    assert _size_kb(tmp_path / "private") < 64

    bad = tmp_path / "bad"  # the known-bad case: no namespaces, so the home is the host folder
    bad.mkdir()
    out = _finish(_sandboxed(bad, FILLER, "keep", isolate=False, home_mb=8))
    assert out.count("wrote 12 MB") == 4, out
    assert _size_kb(bad / "private") > 12 * 1024


EXCHANGE = """
import json, os, socket
home = os.environ["HOME"]
info = json.load(open(f"{home}/kernel.json"))
kernel = socket.socket(socket.AF_UNIX)
kernel.bind(f"{info['ip']}-{info['shell_port']}")  # what ipykernel does with the ipc transport
kernel.listen(1)
conn, _ = kernel.accept()
print("kernel got", conn.recv(64).decode(), flush=True)
"""


@needs_root
def test_the_grader_and_the_kernel_still_meet_in_its_home(tmp_path):
    """The kernel's home is its own tmpfs, yet the grader connects to the sockets it binds there
    (the connection file's)."""
    process = _sandboxed(tmp_path, EXCHANGE)
    private = tmp_path / "private"
    deadline = time.monotonic() + 60
    while True:
        try:
            grader = socket.socket(socket.AF_UNIX)
            grader.connect(str(private / "ipc-1"))
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                pytest.fail(f"no socket of the kernel's reached: {process.communicate()[1]}")
            time.sleep(0.05)
    grader.sendall(b"from the grader")
    assert "kernel got from the grader" in _finish(process)


PLANTED = """
import os
home = os.environ["HOME"]
with open(f"{home}/target", "w") as out:
    out.write("followed")
os.symlink(f"{home}/target", f"{home}/ipc-9")  # a link where the grader looks for a socket
print("planted", flush=True)
import time
time.sleep(60)
"""


@needs_root
def test_the_grader_follows_no_link_the_kernel_puts_in_its_home(tmp_path):
    """The grader reaches the kernel's sockets by their names in the kernel's home, which the
    kernel writes: a link there is never followed (the home is mounted nosymfollow), so a kernel
    cannot lead the grader to another socket of the machine's, such as a zygote's."""
    process = _sandboxed(tmp_path, PLANTED)
    assert process.stdout.readline().strip() == "planted"
    home = f"/proc/{process.pid}/root{sandbox.NEW_ROOT}{tmp_path / 'private'}"
    try:
        assert Path(home, "target").read_text() == "followed"  # the known-bad case: no link
        with pytest.raises(OSError) as refused:
            Path(home, "ipc-9").read_text()
        assert refused.value.errno == errno.ELOOP
    finally:
        process.kill()
        process.wait()


needs_cgroups = pytest.mark.skipif(
    sandbox.KernelCgroup.unavailable() is not None or sandbox.unavailable() is not None,
    reason=f"no cgroup per kernel here: {sandbox.KernelCgroup.unavailable() or 'no sandbox'}",
)

HOGS = """
import os, sys, time
count, size = int(sys.argv[1]), int(sys.argv[2]) << 20
children = []
for _ in range(count):
    child = os.fork()
    if child == 0:
        block = b"x" * size  # written, so it is really held
        time.sleep(3)
        os._exit(0)
    children.append(child)
print("children", [os.waitstatus_to_exitcode(os.waitpid(c, 0)[1]) for c in children])
"""


@needs_cgroups
def test_processes_of_one_kernel_share_one_memory_limit(tmp_path):
    """Four processes of 160 MB, each under the 200 MB of RLIMIT_DATA, together past the
    kernel's 488 MB (`kernel_memory_mb`): some are stopped. One of them alone runs."""
    limits = dict(memory_mb=200, home_mb=8, tmpfs_mb=8)
    assert sandbox.kernel_memory_mb(sandbox.Limits(**limits)) == 488
    process = _sandboxed(tmp_path / "together", HOGS, "4", "160", **limits)
    out, err = process.communicate(timeout=120)
    assert process.returncode != 0 or -9 in eval(out.split("children ")[1]), out + err

    assert "children [0]" in _finish(_sandboxed(tmp_path / "alone", HOGS, "1", "160", **limits))
    # the known-bad case: no namespaces, so no stand-in and no cgroup: all four hold their 160 MB
    out = _finish(_sandboxed(tmp_path / "bad", HOGS, "4", "160", isolate=False, **limits))
    assert "children [0, 0, 0, 0]" in out


SPINNER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
print("started", flush=True)
time.sleep(60)
"""


@needs_cgroups
def test_what_a_kernel_starts_in_another_session_counts_in_its_cpu_time(tmp_path):
    """A child in a session of its own is charged to the kernel (its cgroup's CPU time), which
    counting the kernel's session alone (the known-bad case) misses."""
    process = _sandboxed(tmp_path, SPINNER)
    assert process.stdout.readline().strip() == "started"
    deadline = time.monotonic() + 60
    while sandbox.session_cpu_seconds(process.pid) < 1.5:  # the spinner's, on a busy machine
        assert time.monotonic() < deadline, "the spinner is not counted"
        time.sleep(0.1)
    used, session_only = (
        sandbox.session_cpu_seconds(process.pid),
        sandbox.session_only_cpu_seconds(process.pid),
    )
    process.kill()
    process.wait()
    assert used - session_only > 1.0, (used, session_only)


SPINNERS = """
import subprocess, sys, time
for _ in range(3):
    subprocess.Popen([sys.executable, "-c", "while True: pass"])
print("started", flush=True)
time.sleep(60)
"""


def _cpu_folder(pid: int) -> Path:
    return Path(sandbox._cgroup_homes()["cpu"], sandbox.CGROUP_PARENT, str(pid))


@needs_cgroups
@pytest.mark.skipif("cpu" not in sandbox._cgroup_homes(), reason="no cpu controller here")
def test_a_kernel_gets_its_share_of_the_cpu_however_many_processes_it_runs(tmp_path):
    """Three spinning processes of one kernel with a share of half a core use about half a core
    (a quota is an upper bound, whatever else the machine does): a kernel cannot starve the
    classmates graded beside it."""
    process = _sandboxed(tmp_path / "half", SPINNERS, cpu_share=0.5)
    assert process.stdout.readline().strip() == "started"
    assert (_cpu_folder(process.pid) / "cpu.cfs_quota_us").read_text().strip() == "50000"
    start, began = sandbox.session_cpu_seconds(process.pid), time.monotonic()
    time.sleep(3)
    used = sandbox.session_cpu_seconds(process.pid) - start
    elapsed = time.monotonic() - began
    process.kill()
    process.wait()
    assert used <= 0.5 * elapsed * 1.3 + 0.2, (used, elapsed)
    # the known-bad case: no share set, no quota
    process = _sandboxed(tmp_path / "free", SPINNERS, cpu_share=0)
    assert process.stdout.readline().strip() == "started"
    assert (_cpu_folder(process.pid) / "cpu.cfs_quota_us").read_text().strip() == "-1"
    process.kill()
    process.wait()


@needs_cgroups
def test_a_kernels_cgroup_goes_with_it_and_leftovers_are_swept(tmp_path):
    """The stand-in removes the kernel's cgroup; one left by a stand-in killed outright (named
    by a pid no longer alive) is removed when the next kernel starts."""
    parent = Path(sandbox._cgroup_homes()["memory"], sandbox.CGROUP_PARENT)
    parent.mkdir(exist_ok=True)
    dead = subprocess.Popen(["true"])
    dead.wait()
    (parent / str(dead.pid)).mkdir(exist_ok=True)
    process = _sandboxed(tmp_path, "print('ran')")
    assert _finish(process).strip() == "ran"
    assert not (parent / str(dead.pid)).exists()
    assert not (parent / str(process.pid)).exists()
