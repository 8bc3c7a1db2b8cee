"""Grading as courses are really run: a course folder copied for a new term or a TA (with its own
`course` package), graded with the environment installed from the original folder, through
`python -m course grade` and through plain `nbgrader autograde`. The kernel must import the
package the grader runs, whatever the interpreter would find by itself, and grade exactly as in
place."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from course.submission import build_submission, reference_answers, write_submission
from course_testing import (
    REPO,
    cell_scores,
    copy_course,
    corpus,
    exercise_points,
    points,
    venv_env,
)

A = "01_requires_grad"
STUDENTS = ["s0", "s1", "s2", "s3"]  # with 2 workers, the first run cold and later ones warm
HONEST = corpus("honest")[A]


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """A copy of the course with its own `course` package (no venv: the original's serves it),
    a class of reference answers and one honest answer per exercise of the corpus, and a
    PYTHONPATH in the grader's environment that leads to a broken `course`; in a folder whose
    name holds a URI's characters."""
    # Named as people name folders: "#", "?" and "%" are a URI's own (tests/unit/
    # test_gradebook_location.py); unescaped, the gradebook landed beside the course.
    root = tmp_path_factory.mktemp("term2") / "CS 101 #2 (?50% done)"
    course = copy_course(root, with_release=True)
    shutil.copytree(REPO / "course", root / "course", ignore=shutil.ignore_patterns("__pycache__"))
    assert Path(sys.modules["course"].__file__).resolve().is_relative_to(REPO)
    refs = reference_answers(course, A)
    for student in STUDENTS:
        write_submission(course, student, A, build_submission(course, A, refs))
    honest = {e: files[0] for e, files in HONEST.items()}
    answers = {**refs, **{e: p.read_text() for e, p in honest.items()}}
    write_submission(course, "honest", A, build_submission(course, A, answers))
    decoy = tmp_path_factory.mktemp("decoy") / "course"
    decoy.mkdir()
    (decoy / "__init__.py").write_text("raise ImportError('the decoy course package')\n")
    return course, decoy.parent


def test_python_m_course_in_a_copy_grades_as_in_place(copied):
    course, decoy = copied
    done = subprocess.run(
        [sys.executable, "-m", "course", "grade", A, "--workers", "2"],
        cwd=course.root,
        env=venv_env(PYTHONPATH=str(decoy)),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "failed" not in done.stdout, done.stdout
    assert [p.name for p in course.root.parent.iterdir()] == [course.root.name], "nothing beside"
    full = points(A)
    for student in [*STUDENTS, "honest"]:
        scores = cell_scores(course, A, student)
        assert sum(v or 0 for v in scores.values()) == full, (student, scores)


def test_nbgrader_autograde_in_a_copy_grades_as_in_place(copied):
    course, _ = copied
    done = subprocess.run(
        ["nbgrader", "autograde", A, "--force"],
        cwd=course.root,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for student in [*STUDENTS, "honest"]:
        scores = cell_scores(course, A, student)
        for exercise in HONEST:
            assert exercise_points(scores, exercise) == points(A, f"test_{exercise}"), (
                student,
                exercise,
                scores,
            )


def test_a_kernel_without_the_graders_code_is_the_graders_fault_not_the_students(
    copied, monkeypatch
):
    """Where the kernel cannot import what grading needs (here: the module that gives test
    cells' names back), the submission fails as the grader's trouble, after its retries: never
    a rule the student broke, and the grade it had stays."""
    from course.grading import batch, kernelcalls

    course, _ = copied
    before = cell_scores(course, A, "s0")
    missing = "__import__('course.lesson.no_such_module')"
    monkeypatch.setattr(kernelcalls, "watch_test_cells", lambda sources: missing)
    (outcome,) = batch.grade(course, [A], students=["s0"], warm=False)
    assert outcome.status == batch.FAILED and outcome.grader_fault, outcome
    assert "the grader's fault" in outcome.detail and "previous grade kept" in outcome.detail
    assert "ModuleNotFoundError" in outcome.detail, outcome.detail
    assert "policy" not in outcome.detail
    assert batch.exit_status([outcome]) == batch.EXIT_GRADER_FAILED
    assert cell_scores(course, A, "s0") == before


def test_a_grade_never_depends_on_a_warm_or_a_cold_kernel(copied):
    """IPython magics an honest answer keeps (%matplotlib inline, %load_ext autoreload) change
    the kernel as the lesson's own set-up does: a kernel forked warm and one started cold give
    the same, full grade."""
    from course.grading import batch

    course, _ = copied
    refs = reference_answers(course, A)
    autoreload = REPO / "fixtures/honest" / A / "make_trainable/autoreload_fstring_debug.py"
    answers = {
        **refs,
        "make_trainable": autoreload.read_text(),
        "leaf_inputs": "%matplotlib inline\n" + refs["leaf_inputs"],
    }
    write_submission(course, "magics", A, build_submission(course, A, answers))
    graded = {}
    for warm in (True, False):  # warm: s0 runs cold first and records the prefix, then forks
        outcomes = batch.grade(course, [A], students=["s0", "s1", "magics"], warm=warm)
        assert all(o.status == batch.GRADED for o in outcomes), outcomes
        graded[warm] = cell_scores(course, A, "magics")
    assert graded[True] == graded[False]
    assert sum(v or 0 for v in graded[True].values()) == points(A)
