"""Grading on a dask cluster as a department runs one: a scheduler and two workers started with
``dask scheduler`` and ``dask worker``, each worker unprivileged (uid nobody, no capability) in a
mount namespace of its own where the course folder does not exist (`course_testing.dask_processes`),
so a path of the instructor's that a job passed would fail it.

- A class graded there with ``python -m course grade --scheduler`` gets the grades, feedback pages,
  autograded notebooks and grade files that ``grade --workers 2`` gives on one machine.
- A student's kernel there looks for the gradebook, the hidden tests' expected values, the source
  and other hand-ins, and finds nothing: the sandbox works without root. The same kernel with the
  sandbox turned off finds its own job's files (the known-bad case), and no other student's.
- Workers that cannot sandbox a kernel at all (no user namespaces either) are refused, unless
  the instructor allows it.
- A worker killed in the middle of a run loses nothing: every submission is graded, as before.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat
import pytest
from distributed import Client

from course.grading import batch
from course.grading.coursedir import Course
from course.submission import build_submission, reference_answers, write_submission
from course_testing import REPO, WORKER_UID, copy_course, dask_processes, jailed, venv_env

A = "01_requires_grad"
EXERCISE = "make_trainable"
WRONG = "def make_trainable(values):\n    return torch.as_tensor(values)"
# A student's answer that first looks for what a kernel must never read: it prints the paths it
# found (and the students in any gradebook it could open), then answers correctly.
PEEK = """
import json as _json, os as _os, sqlite3 as _sqlite3
_wanted = ("gradebook.db", "class-free.db", "nbgrader_config.py", "timestamp.txt")
_found = []
for _folder, _subdirs, _files in _os.walk("/"):
    _subdirs[:] = [d for d in _subdirs if d not in ("usr", "proc", "sys", "dev", "site-packages")]
    _found += [_os.path.join(_folder, f) for f in _files
               if f in _wanted or f.startswith("draw-") or f.endswith(".ipynb")]
_students = {}
for _path in _found:
    if _path.endswith(".db"):
        try:
            _db = _sqlite3.connect(f"file:{_path}?mode=ro", uri=True)
            _students[_path] = sorted(r[0] for r in _db.execute("SELECT id FROM student"))
        except Exception as _error:
            _students[_path] = repr(_error)
print("PEEK:" + _json.dumps({"found": sorted(_found), "students": _students}))
"""


def _class(course: Course, peek: bool = True, extra: int = 0) -> None:
    refs = reference_answers(course, A)
    hand_ins = {"right": refs, "wrong": {**refs, EXERCISE: WRONG}}
    if peek:
        hand_ins["peek"] = {**refs, EXERCISE: PEEK + refs[EXERCISE]}
    for index in range(extra):
        hand_ins[f"extra{index}"] = refs if index % 2 else hand_ins["wrong"]
    for student, answers in hand_ins.items():
        write_submission(course, student, A, build_submission(course, A, answers))
    broken = write_submission(course, "broken", A, build_submission(course, A, refs))
    broken.write_text('{"cells": [')


def _grade_command(course: Course, *options: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "course", "--course", str(course.root), "grade", A, *options]
    return subprocess.run(command, capture_output=True, text=True, env=venv_env(), timeout=900)


def _peeked(course: Course, student: str = "peek") -> dict:
    path = course.root / "autograded" / student / A / f"{A}.ipynb"
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            text = output.get("text", "")
            if output.get("output_type") == "stream" and text.startswith("PEEK:"):
                return json.loads(text.removeprefix("PEEK:").splitlines()[0])
    raise AssertionError(f"the peeking answer printed nothing in {path}")


UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _content(path) -> object:
    """What a file says, less what differs from run to run wherever it is made: a notebook's
    cells' execution times, the random ids nbconvert gives a page's widget views."""
    if path.suffix == ".ipynb":
        nb = json.loads(path.read_text())
        for cell in nb["cells"]:
            cell.get("metadata", {}).pop("execution", None)
        return nb
    return UUID.sub(b"UUID", path.read_bytes())


def _files(folder) -> dict[str, object]:
    return {
        str(p.relative_to(folder)): _content(p) for p in sorted(folder.rglob("*")) if p.is_file()
    }


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.getbasetemp()


@pytest.fixture(scope="module")
def cluster(scratch):
    # the whole of pytest's scratch folder (every course of this run) is hidden from the workers
    with dask_processes(2, [scratch]) as started:
        yield started


@pytest.fixture(scope="module")
def graded(tmp_path_factory, cluster):
    """One class, handed in to two copies of the course: graded on the cluster, and on this
    machine with two local workers."""
    address, _ = cluster
    remote = copy_course(tmp_path_factory.mktemp("remote") / "course", with_release=True)
    local = copy_course(tmp_path_factory.mktemp("local") / "course", with_release=True)
    _class(remote)
    shutil.copytree(remote.root / "submitted", local.root / "submitted")
    on_cluster = _grade_command(remote, "--scheduler", address)
    here = _grade_command(local, "--workers", "2")
    return remote, local, on_cluster, here


def test_a_class_graded_on_the_cluster_gets_what_one_machine_gives(graded):
    remote, local, on_cluster, here = graded
    assert on_cluster.returncode == here.returncode == batch.EXIT_FAILED, on_cluster.stderr
    assert "graded 3, failed 1" in on_cluster.stdout, on_cluster.stdout
    grades = (remote.root / "grades" / "grades.csv").read_text()
    assert "right" in grades and grades == (local.root / "grades" / "grades.csv").read_text()
    for folder in ("feedback", "autograded"):
        made, expected = _files(remote.root / folder), _files(local.root / folder)
        assert sorted(made) == sorted(expected) and made, folder
        different = [name for name in made if made[name] != expected[name]]
        assert not different, f"{folder} differs from one machine's: {different}"


def test_the_run_says_what_the_workers_sandbox_enforces(graded):
    _, _, on_cluster, here = graded
    assert "sandbox on 2 of 2 dask workers: own file view, processes, network" in on_cluster.stderr
    assert "user namespace" in on_cluster.stderr, "the workers are not root"
    assert "sandbox: own file view, processes, network and IPC, a uid of its own" in here.stderr


def test_a_kernel_on_an_unprivileged_worker_reads_nothing(graded):
    remote, local, _, _ = graded
    assert _peeked(remote) == {"found": [], "students": {}}
    assert _peeked(local) == {"found": [], "students": {}}


def test_without_the_sandbox_the_same_kernel_reads_its_own_job_only(tmp_path, cluster):
    """The known-bad case: the sandbox turned off in the course's config."""
    course = copy_course(tmp_path / "course", with_release=True)
    with (course.root / "nbgrader_config.py").open("a") as config:
        config.write("\nc.GradingExecute.isolate = False\n")
    _class(course)
    with Client(cluster[0]) as client:
        batch.grade(course, [A], ["peek"], client=client)
    peeked = _peeked(course)
    assert str(course.root) not in json.dumps(peeked), "the course folder is not on the worker"
    assert not [path for path in peeked["found"] if path.startswith(str(REPO))]
    # what the job brought (what else the machine lets anyone read is the machine's)
    job = [path for path in peeked["found"] if "/course-job-" in path]
    names = {path.rsplit("/", 1)[-1] for path in job}
    assert {"gradebook.db", f"{A}.ipynb", "nbgrader_config.py"} <= names, peeked
    # its gradebook holds its own student alone; no draw's records are on the worker
    assert [peeked["students"][path] for path in job if path.endswith(".db")] == [["peek"]]
    assert not any(name.startswith("draw-") for name in names), peeked


def test_workers_that_cannot_sandbox_are_refused(scratch, tmp_path):
    course = copy_course(tmp_path / "course", with_release=True)
    _class(course, peek=False)
    with dask_processes(1, [scratch], user_namespaces=False) as (address, _):
        refused = _grade_command(course, "--scheduler", address)
    assert refused.returncode == 2, refused.stderr
    assert "1 of 1 dask workers cannot sandbox a kernel" in refused.stderr, refused.stderr
    assert "--allow-unsandboxed" in refused.stderr
    assert not (course.root / "autograded").exists(), "nothing was graded"


def test_one_machine_whose_kernels_get_no_sandbox_is_refused_too():
    """`grade --workers N` where neither root nor a user namespace is to be had."""
    folder = Path(tempfile.mkdtemp(prefix="course-unsandboxed-"))  # pytest's: root's alone
    try:
        folder.chmod(0o755)
        course = copy_course(folder / "course", with_release=True)
        _class(course, peek=False)
        for path in [folder, *folder.rglob("*")]:
            os.chown(path, WORKER_UID, WORKER_UID, follow_symlinks=False)
        command = [sys.executable, "-m", "course", "--course", str(course.root), "grade", A]
        jail = jailed(folder, "--no-user-namespaces")
        refused = subprocess.run([*jail, *command], capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2, refused.stderr
        assert "kernels cannot be sandboxed here" in refused.stderr
        assert "--allow-unsandboxed" in refused.stderr
        assert not (course.root / "autograded").exists(), "nothing was graded"
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_worker_killed_mid_run_loses_nothing(tmp_path, cluster):
    address, workers = cluster
    course = copy_course(tmp_path / "course", with_release=True)
    _class(course, peek=False, extra=4)
    killed = []

    def kill_a_worker(outcome: batch.Outcome) -> None:
        if not killed:
            os.killpg(workers[0].pid, signal.SIGKILL)  # its nanny and worker; zygotes follow
            killed.append(outcome.student)

    with Client(address) as client:
        outcomes = batch.grade(course, [A], client=client, on_outcome=kill_a_worker)
        assert len(client.scheduler_info()["workers"]) == 1
    by_student = {o.student: o for o in outcomes}
    assert killed
    assert by_student.pop("broken").status == batch.FAILED
    assert all(o.status == batch.GRADED for o in by_student.values()), by_student
    full = by_student["right"].max_score
    assert {s: o.score == full for s, o in by_student.items()} == {
        "right": True,
        "wrong": False,
        **{f"extra{i}": bool(i % 2) for i in range(4)},
    }
