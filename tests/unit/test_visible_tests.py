"""The visible tests a student can run catch each exercise's central mistake, and say what it is.

For every assignment, the release notebook (what students get: visible tests only) runs in one
in-process namespace: its lesson cells once, then, for each answer file under
``fixtures/answers/<assignment>/<exercise>/``, the answer in place of the exercise's answer cell
followed by the cells after it up to the next answer cell (the exercise's visible test cells and
the locked helper cells they use), each on a fresh copy of the lesson's namespace.

The convention for answer files: the first line is a comment saying what the answer does. A wrong
answer whose first line reads ``# Wrong (visible): ...`` makes a central mistake of the exercise,
and at least one visible test cell of that exercise must fail on it with a ``CheckFailed`` (the
checks' own message, not a raw error). An optional line ``# Visible message: <text>`` names words
that the first failing check's message must contain. Every ``correct_*`` answer passes every
visible test of its exercise, and no answer at all makes a visible test fail with a raw error: a
mistake gets a message that explains it, never a bare ``'NoneType' object has no attribute``.

A misconception of ``fixtures/misconceptions/<assignment>/<exercise>/`` that carries a
``# Visible message: <text>`` line is held to the same rule: a visible test fails on it, and the
first failing check's message contains the text (it names the mistake before any grading).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib
import nbformat
import pytest
import torch

from course_testing import CONTRACT, REPO

matplotlib.use("Agg")

ANSWERS = REPO / "fixtures" / "answers"
MISCONCEPTIONS = REPO / "fixtures" / "misconceptions"
VISIBLE = re.compile(r"^#\s*(wrong|misconception)\s*\(visible\)\s*:", re.IGNORECASE)
MESSAGE = re.compile(r"^#\s*visible message:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)


@dataclass
class Exercise:
    """An answer cell and what runs after it: helper cells and the exercise's test cells."""

    name: str
    cells: list[tuple[str, str]] = field(default_factory=list)  # (grade_id or "", source)
    tests: list[str] = field(default_factory=list)  # grade ids of its test cells


@dataclass
class Outcome:
    """What one visible test cell did: passed, failed a check (``CheckFailed``) or raised."""

    cell: str
    error: str | None = None  # the exception's class name, None when the cell passed
    message: str = ""

    @property
    def check_failed(self) -> bool:
        return self.error == "CheckFailed"


def _meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def read_notebook(assignment: str) -> tuple[list[str], dict[str, Exercise]]:
    """The lesson's code cells (before the first answer or test) and each answer cell's
    exercise, from the release notebook."""
    path = REPO / "release" / assignment / f"{assignment}.ipynb"
    cells = [c for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
    lesson: list[str] = []
    exercises: dict[str, Exercise] = {}
    current: Exercise | None = None
    for cell in cells:
        meta = _meta(cell)
        grade_id = meta.get("grade_id", "")
        if meta.get("solution"):
            current = exercises[grade_id] = Exercise(grade_id)
        elif current is None:
            if meta.get("grade"):
                raise AssertionError(f"{assignment}: test cell {grade_id} before any answer cell")
            lesson.append(cell.source)
        else:
            current.cells.append((grade_id, cell.source))
            if meta.get("grade") and grade_id.startswith(f"test_{current.name}"):
                current.tests.append(grade_id)
    return lesson, exercises


def _run(source: str, namespace: dict, name: str) -> None:
    with (
        contextlib.redirect_stdout(io.StringIO()),
        contextlib.redirect_stderr(io.StringIO()),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        exec(compile(source, name, "exec"), namespace)


class Notebook:
    """One release notebook whose lesson has run once; ``grade(exercise, source)`` runs an answer
    and the visible tests after it on a copy of the lesson's namespace."""

    def __init__(self, assignment: str):
        self.assignment = assignment
        lesson, self.exercises = read_notebook(assignment)
        self.namespace: dict = {"__name__": "__main__"}
        saved = os.environ.get("NBGRADER_EXECUTION")
        os.environ["NBGRADER_EXECUTION"] = "autograde"  # widgets are placeholders, as in grading
        try:
            for i, source in enumerate(lesson):
                _run(source, self.namespace, f"<{assignment} lesson cell {i}>")
        finally:
            if saved is None:
                os.environ.pop("NBGRADER_EXECUTION")
            else:
                os.environ["NBGRADER_EXECUTION"] = saved
            import matplotlib.pyplot as plt

            plt.close("all")

    def grade(self, exercise: str, answer: str) -> list[Outcome]:
        with torch.enable_grad():  # a fresh kernel's mode; an answer that leaves it off stays here
            return self._grade(exercise, answer)

    def _grade(self, exercise: str, answer: str) -> list[Outcome]:
        namespace = dict(self.namespace)
        _run(answer, namespace, f"<answer {exercise}>")
        outcomes = []
        for grade_id, source in self.exercises[exercise].cells:
            try:
                _run(source, namespace, f"<{grade_id or 'helper cell'}>")
            except Exception as error:  # a failed test: nbgrader records it and goes on
                if grade_id in self.exercises[exercise].tests:
                    outcomes.append(Outcome(grade_id, type(error).__name__, str(error)))
                elif grade_id:
                    raise
                else:
                    raise AssertionError(f"a locked helper cell after {exercise} failed") from error
            else:
                if grade_id in self.exercises[exercise].tests:
                    outcomes.append(Outcome(grade_id))
        return outcomes


def answer_files(assignment: str, root: Path = ANSWERS) -> list[tuple[str, Path]]:
    folder = root / assignment
    return sorted((p.parent.name, p) for p in folder.glob("*/*.py")) if folder.is_dir() else []


ASSIGNMENTS = sorted(p.name for p in (REPO / "release").iterdir() if p.is_dir())
CASES = [
    pytest.param(a, e, p, id=f"{a}/{e}/{p.stem}") for a in ASSIGNMENTS for e, p in answer_files(a)
]
VISIBLE_CASES = [c for c in CASES if VISIBLE.match(c.values[2].read_text())]
SHOWN_MISCONCEPTIONS = [
    pytest.param(a, e, p, id=f"{a}/{e}/{p.stem}")
    for a in ASSIGNMENTS
    for e, p in answer_files(a, MISCONCEPTIONS)
    if MESSAGE.search(p.read_text())
]


@pytest.fixture(scope="module")
def notebooks():
    cache: dict[str, Notebook] = {}

    def get(assignment: str) -> Notebook:
        if assignment not in cache:
            cache[assignment] = Notebook(assignment)
        return cache[assignment]

    return get


def _report(outcomes: list[Outcome]) -> str:
    return "\n".join(
        f"  {o.cell}: " + (f"{o.error}: {o.message}" if o.error else "passed") for o in outcomes
    )


@pytest.mark.parametrize("assignment,exercise,path", [c for c in CASES if "correct_" in c.id])
def test_a_correct_answer_passes_every_visible_test(notebooks, assignment, exercise, path):
    outcomes = notebooks(assignment).grade(exercise, path.read_text())
    assert outcomes, f"{exercise} has no visible test cells after its answer cell"
    assert all(o.error is None for o in outcomes), _report(outcomes)


@pytest.mark.parametrize("assignment,exercise,path", VISIBLE_CASES)
def test_a_central_mistake_fails_a_visible_test_with_a_message(
    notebooks, assignment, exercise, path
):
    _fails_in_view(notebooks, assignment, exercise, path)


@pytest.mark.parametrize("assignment,exercise,path", SHOWN_MISCONCEPTIONS)
def test_a_misconception_fails_a_visible_test_with_a_message_naming_it(
    notebooks, assignment, exercise, path
):
    _fails_in_view(notebooks, assignment, exercise, path)


def _fails_in_view(notebooks, assignment: str, exercise: str, path: Path) -> None:
    text = path.read_text()
    outcomes = notebooks(assignment).grade(exercise, text)
    failed = [o for o in outcomes if o.error]
    assert failed, f"{path.name} passes every visible test of {exercise}:\n{_report(outcomes)}"
    assert failed[0].check_failed, f"not a CheckFailed:\n{_report(outcomes)}"
    wanted = MESSAGE.search(text)
    if wanted:
        assert wanted[1].lower() in failed[0].message.lower(), (
            f"the message should mention {wanted[1]!r}:\n{_report(outcomes)}"
        )


@pytest.mark.parametrize("assignment,exercise,path", [c for c in CASES if "wrong_" in c.id])
def test_no_wrong_answer_gets_a_raw_error_from_a_visible_test(
    notebooks, assignment, exercise, path
):
    outcomes = notebooks(assignment).grade(exercise, path.read_text())
    raw = [o for o in outcomes if o.error and not o.check_failed]
    assert not raw, f"raw errors with no hint from {path.name}:\n{_report(outcomes)}"


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_exercise_has_a_central_mistake_caught_in_view(assignment):
    """Each contract exercise with answer files has at least one ``(visible)`` wrong answer."""
    marked = {c.values[1] for c in VISIBLE_CASES if c.values[0] == assignment}
    have_answers = {e for e, _ in answer_files(assignment)}
    missing = [e for e in CONTRACT.get(assignment, []) if e in have_answers and e not in marked]
    assert not missing, f"no '# Wrong (visible): ...' answer for {missing}"


def test_the_harness_sees_a_stub_fail_and_a_check_fail(notebooks):
    """The release stub raises NotImplementedError (a raw error, not a check), and the harness
    tells the two kinds of failure apart."""
    assignment, exercise = "01_requires_grad", "make_trainable"
    nb = notebooks(assignment)
    stub = "def make_trainable(values):\n    raise NotImplementedError()"
    assert all(o.error == "NotImplementedError" for o in nb.grade(exercise, stub))
    returns_none = "def make_trainable(values):\n    return None"
    outcomes = nb.grade(exercise, returns_none)
    assert outcomes and all(o.check_failed for o in outcomes), _report(outcomes)


def test_a_misconception_that_passes_or_is_told_something_else_is_refused(notebooks, tmp_path):
    """The known-bad cases of the misconception rule: a right answer that claims a message, and a
    real mistake whose first failing message does not contain the text its file names."""
    right = tmp_path / "right.py"
    right.write_text(
        "# Visible message: anything\n"
        "def predict(model, x):\n    with torch.no_grad():\n        return model(x)\n"
    )
    with pytest.raises(AssertionError, match="passes every visible test"):
        _fails_in_view(notebooks, "04_no_grad", "predict", right)
    told_otherwise = tmp_path / "told_otherwise.py"
    told_otherwise.write_text(
        "# Visible message: model.eval()\n"
        "def predict(model, x):\n    torch.set_grad_enabled(False)\n    return model(x)\n"
    )
    with pytest.raises(AssertionError, match="should mention"):
        _fails_in_view(notebooks, "04_no_grad", "predict", told_otherwise)
    assert torch.is_grad_enabled()  # the answer left tracking off in its own run only
