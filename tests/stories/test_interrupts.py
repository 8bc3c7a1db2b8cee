"""Ctrl-C during a class run, as at a terminal: the whole foreground process group gets SIGINT.
The run stops within seconds with one line, nothing is half-recorded, nothing it started keeps
running (on this machine, or on a dask cluster's workers), and the same command run again picks
up where it stopped."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from course.grading import warm
from course.submission import build_submission, reference_answers, write_submission
from course_testing import copy_course, dask_processes, live_processes, points, venv_env

A = "01_requires_grad"
CLASS = [f"s{i}" for i in range(4)]
STOPS_WITHIN = 20  # seconds from Ctrl-C to exit, on a loaded 2-core machine
LOCAL = ("--workers", "2")


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    course = copy_course(tmp_path_factory.mktemp("ctrlc") / "course", with_release=True)
    refs = reference_answers(course, A)
    for student in CLASS:
        write_submission(course, student, A, build_submission(course, A, refs))
    return course.root


@pytest.fixture
def course_root(template, tmp_path):
    root = tmp_path / "course"
    shutil.copytree(template, root, symlinks=True)
    (tmp_path / "tmp").mkdir()
    return root


def _start(root: Path, script: str = "", where: tuple[str, ...] = LOCAL) -> subprocess.Popen:
    """`python -m course grade` in a session of its own (a terminal's foreground group), its
    temporary files under a folder of this test's, so its processes can be told from others';
    graded ``where`` (on this machine, or ``--scheduler ADDRESS``)."""
    code = textwrap.dedent(script) + "\nfrom course.cli import main\nraise SystemExit(main())\n"
    env = venv_env(TMPDIR=str(root.parent / "tmp"))
    return subprocess.Popen(
        [sys.executable, "-c", code, "grade", A, *where],
        cwd=root,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _ours(root: Path) -> list[str]:
    """Processes still running that this test's run started (their command lines name its
    temporary folder: kernels' connection files, zygotes' specs)."""
    marker = str(root.parent / "tmp")
    found = []
    for entry in Path("/proc").iterdir():
        try:
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if entry.name.isdigit() and marker in line and int(entry.name) != os.getpid():
            found.append(line)
    return found


def _recorded(root: Path) -> set[str]:
    from course.grading.coursedir import Course

    with Course.at(root).api().gradebook as gb:
        return {s.student.id for s in gb.find_assignment(A).submissions}


def _check_stopped(root: Path, run: subprocess.Popen, signalled: float) -> str:
    out, err = run.communicate(timeout=120)
    assert run.returncode == 130, out + err
    assert time.monotonic() - signalled < STOPS_WITHIN, "took too long to stop"
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    recorded = _recorded(root)
    assert last == (
        f"interrupted: {len(recorded)} of {len(CLASS)} recorded, the rest unchanged; "
        "run the same command again"
    ), err
    for student in CLASS:  # whole or not at all
        folder = root / "autograded" / student / A
        assert (student in recorded) == (folder / f"{A}.ipynb").is_file(), student
        assert (student in recorded) == (root / "feedback" / student / A).is_dir(), student
    deadline = time.monotonic() + 15
    while _ours(root) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _ours(root), _ours(root)
    return last


def _check_resumes(root: Path, kept: set[str], where: tuple[str, ...] = LOCAL) -> None:
    stamps = {s: (root / "autograded" / s / A / f"{A}.ipynb").stat().st_mtime_ns for s in kept}
    again = _start(root, where=where)
    out, err = again.communicate(timeout=1200)
    assert again.returncode == 0, out + err
    assert _recorded(root) == set(CLASS)
    for student in kept:  # picked up where it stopped: what was recorded is not graded again
        assert (root / "autograded" / student / A / f"{A}.ipynb").stat().st_mtime_ns == stamps[
            student
        ]
    from course.grading.coursedir import Course

    with Course.at(root).api().gradebook as gb:
        for student in CLASS:
            assert gb.find_submission(A, student).code_score == points(A), student
    assert not (root / ".course" / "interrupted.json").exists()


def _when_one_is_recorded(root: Path, run: subprocess.Popen) -> None:
    """Wait until one submission is recorded (the others running)."""
    deadline = time.monotonic() + 600
    while not list(root.glob("autograded/*/*/*.ipynb")):
        assert run.poll() is None and time.monotonic() < deadline, run.communicate()
        time.sleep(0.1)


@pytest.mark.parametrize("stop", ["ctrl-c", "kill"])
def test_ctrl_c_while_jobs_run_stops_at_once_and_the_next_run_picks_up(course_root, stop):
    """Ctrl-C reaches the whole process group; `kill` (or a closed terminal, a scheduler) sends
    SIGTERM to the grader alone, which once left its zygotes running."""
    run = _start(course_root)
    _when_one_is_recorded(course_root, run)
    if stop == "ctrl-c":
        os.killpg(run.pid, signal.SIGINT)
    else:
        os.kill(run.pid, signal.SIGTERM)
    _check_stopped(course_root, run, time.monotonic())
    _check_resumes(course_root, _recorded(course_root))


def _descendants(processes: list[subprocess.Popen]) -> set[int]:
    """The live processes that ``processes`` started, and those started, and so on."""
    children: dict[int, list[int]] = {}
    for pid, fields in live_processes():
        children.setdefault(int(fields["PPid"]), []).append(pid)
    found, todo = set(), [p.pid for p in processes]
    while todo:
        started = children.get(todo.pop(), [])
        found.update(started)
        todo += started
    return found


def test_ctrl_c_during_a_cluster_run_stops_it_there_too(course_root, tmp_path_factory):
    """The workers are another user's processes, which Ctrl-C does not reach: the grader stops
    its jobs and the workers' zygotes, what the run started on them ends, and they grade the
    next run."""
    from distributed import Client

    with dask_processes(2, [tmp_path_factory.getbasetemp()]) as (address, workers):
        idle = _descendants(workers)  # dask's own
        on_cluster = ("--scheduler", address)
        run = _start(course_root, where=on_cluster)
        _when_one_is_recorded(course_root, run)
        os.killpg(run.pid, signal.SIGINT)
        _check_stopped(course_root, run, time.monotonic())
        with Client(address) as client:
            assert set(client.run(warm.zygote_dir).values()) == {None}, "zygotes left running"
        # a job that was running ends with its notebook (a kernel's time is bounded)
        deadline = time.monotonic() + 60
        while _descendants(workers) - idle and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _descendants(workers) - idle, "the run left processes on the workers"
        _check_resumes(course_root, _recorded(course_root), on_cluster)


RECORD_INTERRUPTED = """
import os, signal, time
from course.grading import batch
record = batch._record
def interrupted_record(*args):
    with open(os.path.join(os.environ["TMPDIR"], "signalled"), "w") as note:
        note.write(repr(time.monotonic()))  # the clock is the machine's: the test reads it
    os.killpg(0, signal.SIGINT)  # Ctrl-C in the middle of recording the first submission
    time.sleep(1)
    return record(*args)
batch._record = interrupted_record
"""


def test_ctrl_c_while_recording_finishes_that_submission_first(course_root):
    run = _start(course_root, RECORD_INTERRUPTED)
    deadline = time.monotonic() + 600
    while run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    signalled = float((course_root.parent / "tmp" / "signalled").read_text())
    last = _check_stopped(course_root, run, signalled)
    assert last.startswith("interrupted: 1 of "), last
    _check_resumes(course_root, _recorded(course_root))
