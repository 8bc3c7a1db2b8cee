"""`python -m course grade --workers 2` leaves the same grades, autograded notebooks and feedback as
stock sequential `nbgrader autograde` + `generate_feedback`, on a class with failing, timed-out and
crashing submissions.

The default run grades the reference, a stub, a wrong answer and a kernel that dies; the two costly
members (a cell that runs into the timeout, a kernel that ignores the interrupt and must be
killed) join the class when tests marked slow run (`make test-all`)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.grading import batch
from course.grading.coursedir import Course
from course.submission import build_submission, reference_answers, write_submission
from course_testing import copy_course, runs_slow_tests, venv_env

ASSIGNMENT = "01_requires_grad"
EXERCISE = "make_trainable"
# What each student writes in the make_trainable cell (the rest is the release stub).
CLASS = {
    "reference": None,
    "stub": "",
    "wrong": "def make_trainable(values):\n    return torch.as_tensor(values)",
    # interrupted by the cell timeout
    "loops": "def make_trainable(values):\n    while True:\n        pass",
    "exits": "import os\nos._exit(3)",  # the kernel dies
    "stubborn": (  # ignores the interrupt: the kernel must be killed
        "import time\nwhile True:\n    try:\n        time.sleep(0.1)\n"
        "    except KeyboardInterrupt:\n        pass"
    ),
}
SLOW_MEMBERS = {"loops", "stubborn"}
GRADED = ["loops", "reference", "stub", "wrong"]  # the others fail, with stock nbgrader too


def _cases(students) -> list:
    return [pytest.param(s, marks=pytest.mark.slow if s in SLOW_MEMBERS else ()) for s in students]


@pytest.fixture(scope="module")
def two_courses(tmp_path_factory, request):
    base = copy_course(tmp_path_factory.mktemp("parallel") / "stock", with_release=True)
    everyone = runs_slow_tests(request)
    with (base.root / "nbgrader_config.py").open("a") as config:
        config.write("\nc.Execute.timeout = 20\nc.GradingExecute.wall_factor = 1.5\n")
    refs = reference_answers(base, ASSIGNMENT)
    for student, code in CLASS.items():
        if student in SLOW_MEMBERS and not everyone:
            continue
        answers = refs if code is None else {EXERCISE: code}
        write_submission(base, student, ASSIGNMENT, build_submission(base, ASSIGNMENT, answers))
    ours = Course.at(shutil.copytree(base.root, base.root.parent / "ours"))
    for command in (["autograde", ASSIGNMENT], ["generate_feedback", ASSIGNMENT]):
        subprocess.run(
            [sys.executable, "-m", "nbgrader", *command],
            cwd=base.root,
            env=venv_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
    outcomes = batch.grade(ours, [ASSIGNMENT], workers=2)
    return base, ours, {o.student: o for o in outcomes}


def _cell_scores(course: Course) -> dict[str, dict[str, float | None]]:
    scores = {}
    with course.api().gradebook as gb:
        for submission in gb.assignment_submissions(ASSIGNMENT):
            scores[submission.student.id] = {
                g.name: g.auto_score for nb in submission.notebooks for g in nb.grades
            }
    return scores


def _outputs(path: Path) -> list:
    """Each cell's source and outputs, as a reader sees them: a stream that arrived in several
    messages counts as one (how the kernel splits it varies from run to run)."""
    nb = nbformat.read(path, as_version=4)
    cells = []
    for cell in nb.cells:
        outputs = []
        for o in cell.get("outputs", []):
            if o.output_type == "stream" and outputs and outputs[-1][:2] == ("stream", o.name):
                outputs[-1] = ("stream", o.name, outputs[-1][2] + o.text)
            elif o.output_type == "stream":
                outputs.append(("stream", o.name, o.text))
            else:
                outputs.append((o.output_type, o.get("ename"), o.get("data", {}).get("text/plain")))
        cells.append((cell.source, outputs))
    return cells


def _page_text(path: Path) -> str:
    """A feedback page's visible text, with the ids that differ on every run masked."""
    text = re.sub(r"<[^>]+>", " ", path.read_text())
    text = re.sub(r"[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}|[0-9a-f]{32}|0x[0-9a-f]+", "ID", text)
    return " ".join(text.split())


@pytest.mark.parametrize("student", _cases(CLASS))
def test_statuses_name_what_happened(two_courses, student):
    _, _, outcomes = two_courses
    outcome = outcomes[student]
    if student == "reference":
        assert outcome.score == outcome.max_score
    elif student in ("stub", "wrong", "loops"):
        assert outcome.status == batch.GRADED
        assert outcome.score < outcome.max_score
    elif student == "exits":
        assert outcome.status == batch.FAILED and "kernel died" in outcome.detail
    else:
        assert outcome.status == batch.FAILED and "timeout" in outcome.detail


@pytest.mark.parametrize("student", _cases(CLASS))
def test_same_grades_as_stock_nbgrader(two_courses, student):
    stock, ours, outcomes = two_courses
    stock_scores, our_scores = _cell_scores(stock), _cell_scores(ours)
    assert (outcomes[student].status == batch.GRADED) == (student in GRADED), outcomes[student]
    if student in GRADED:
        assert our_scores[student] == stock_scores[student], student
    else:
        # Stock nbgrader fails these too; it leaves an ungraded submission (a 0 in its export),
        # we leave none and report the failure instead.
        assert not (stock.root / "autograded" / student / ASSIGNMENT).exists()
        assert all(v is None for v in stock_scores.get(student, {}).values())
        assert student not in our_scores


@pytest.mark.parametrize("student", _cases(GRADED))
def test_same_autograded_notebooks_and_feedback(two_courses, student):
    stock, ours, _ = two_courses
    rel = Path(student) / ASSIGNMENT
    assert _outputs(ours.root / "autograded" / rel / f"{ASSIGNMENT}.ipynb") == _outputs(
        stock.root / "autograded" / rel / f"{ASSIGNMENT}.ipynb"
    ), student
    assert _page_text(ours.root / "feedback" / rel / f"{ASSIGNMENT}.html") == _page_text(
        stock.root / "feedback" / rel / f"{ASSIGNMENT}.html"
    ), student
