"""Build student submissions from the release notebooks (for the demo class, tests and benchmarks).

Runs in: the grader's demo, the tests and the benchmarks (never a grading run).

A submission is the release notebook with some answer cells filled in: by the reference solution
from source/ or by a named answer file under ``fixtures/answers/<assignment>/<exercise>/``.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from .grading.coursedir import Course

ANSWERS_DIR = Path("fixtures") / "answers"
_SOLUTION_BLOCK = re.compile(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", re.MULTILINE)


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


def _is_code_answer(cell) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.cell_type == "code" and meta.get("solution", False)


def reference_answers(course: Course, assignment: str) -> dict[str, str]:
    """The instructor's solution for every code answer cell, markers removed, by grade id."""
    nb = nbformat.read(course.root / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    return {_grade_id(c): _SOLUTION_BLOCK.sub("", c.source) for c in nb.cells if _is_code_answer(c)}


def answer_file(course: Course, assignment: str, exercise: str, name: str) -> str:
    """The source of a named answer, e.g.
    ``answer_file(c, "03_grad_zeroing", "train_step", "wrong_no_zero")``."""
    path = course.root / ANSWERS_DIR / assignment / exercise / f"{name}.py"
    return path.read_text()


def answer_names(course: Course, assignment: str, exercise: str) -> list[str]:
    """Names of the answer files for one exercise, e.g. ``["correct_loop", "wrong_no_zero"]``."""
    folder = course.root / ANSWERS_DIR / assignment / exercise
    return sorted(p.stem for p in folder.glob("*.py"))


def build_submission(
    course: Course, assignment: str, answers: dict[str, str]
) -> nbformat.NotebookNode:
    """The release notebook with the answer cells named in ``answers`` replaced by their source."""
    path = course.root / "release" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(path, as_version=4)
    unknown = set(answers) - {_grade_id(c) for c in nb.cells if _is_code_answer(c)}
    if unknown:
        raise KeyError(f"{assignment} has no answer cell named {', '.join(sorted(unknown))}")
    for cell in nb.cells:
        if _is_code_answer(cell) and _grade_id(cell) in answers:
            cell.source = answers[_grade_id(cell)].rstrip("\n")
    return nb


def write_submission(course: Course, student: str, assignment: str, nb) -> Path:
    """Place a notebook in submitted/<student>/<assignment>/ as nbgrader's collect would."""
    folder = course.root / "submitted" / student / assignment
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{assignment}.ipynb"
    nbformat.write(nb, path)
    (folder / "timestamp.txt").write_text("2026-01-15 12:00:00.000000 UTC")
    return path
