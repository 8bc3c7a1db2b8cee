"""The kernel sandbox (course.grading.sandbox), through its launcher: what a sandboxed process can
see, reach and use. The grading tests (test_adversarial) check the same through real kernels."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from course.grading import sandbox

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


def _run(tmp_path: Path, isolate: bool = True, *extra: str) -> str:
    course = tmp_path / "course"
    (course / "source").mkdir(parents=True)
    (course / "gradebook.db").write_text("secret")
    workdir, private = tmp_path / "work", tmp_path / "private"
    workdir.mkdir()
    private.mkdir()
    policy = sandbox.policy_for(course, workdir, private, isolate=isolate)
    result = subprocess.run(
        [
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
import os, time
while True:  # fork, and let the parent go: a new pid every few microseconds
    if os.fork():
        os._exit(0)
"""


def _processes_of(uid: int) -> list[int]:
    """The live processes of ``uid`` (zombies are dead already)."""
    found = []
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            lines = status.read_text().splitlines()
        except OSError:
            continue
        fields = dict(line.split(":", 1) for line in lines if ":" in line)
        zombie = fields.get("State", "").split()[:1] == ["Z"]  # dead, waiting to be reaped
        if "Uid" in fields and int(fields["Uid"].split()[0]) == uid and not zombie:
            found.append(int(status.parent.name))
    return found


def test_kill_uid_ends_a_process_that_hops_from_pid_to_pid():
    if sandbox.unavailable() is not None:
        pytest.skip("needs root")
    python = Path("/usr/bin/python3")  # one that any uid may run (the venv's sits under /root)
    if not python.exists():
        pytest.skip(f"{python} is missing")
    uid = sandbox.FIRST_UID + 999_998
    subprocess.Popen([python, "-c", HOPPER], user=uid, group=uid, start_new_session=True)

    def seen(samples: int) -> bool:
        """Whether a live process of ``uid`` shows up in any of ``samples`` looks at /proc."""
        found = False
        for _ in range(samples):
            found = found or bool(_processes_of(uid))
            time.sleep(0.05)
        return found

    def within(seconds: float, condition) -> bool:
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)
        return True

    # Deadlines, not durations: on a loaded machine Python itself takes seconds to start.
    assert within(60, lambda: _processes_of(uid)), "the hopper runs"
    sandbox.kill_uid(uid)
    within(30, lambda: not _processes_of(uid))  # SIGKILLed processes take a moment to die
    assert not seen(20), f"a hopper outlived the kill: {_processes_of(uid)}"
