"""release/ is nbgrader's student version of source/: regenerated identically, free of answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from course_testing import CONTRACT, REPO, venv_env

ASSIGNMENTS = list(CONTRACT)
# `nbgrader validate` (a cold kernel each) on the first assignment in the default run, on the
# others with the tests marked slow: the default run grades every assignment's reference (full
# marks, tests/stories/test_answers.py) and stubs (0 points: dan in tests/stories/test_demo.py)
# anyway.
VALIDATED = [
    pytest.param(a, marks=() if a == ASSIGNMENTS[0] else pytest.mark.slow) for a in ASSIGNMENTS
]
NBGRADER = [sys.executable, "-m", "nbgrader"]
# Text that only the instructor's version may contain.
ANSWER_MARKERS = [
    "BEGIN SOLUTION",
    "END SOLUTION",
    "BEGIN HIDDEN TESTS",
    "END HIDDEN TESTS",
    "BEGIN MARK SCHEME",
    "END MARK SCHEME",
]


def _notebooks(folder: str) -> list[Path]:
    return sorted((REPO / folder).rglob("*.ipynb"))


def test_every_assignment_has_its_source_and_release_notebook():
    for assignment in ASSIGNMENTS:
        assert (REPO / "source" / assignment / f"{assignment}.ipynb").is_file()
        assert (REPO / "release" / assignment / f"{assignment}.ipynb").is_file()
    assert sorted(p.name for p in (REPO / "release").iterdir()) == ASSIGNMENTS


def test_release_is_identical_to_a_fresh_regeneration(released_course):
    fresh = sorted(
        p.relative_to(released_course.root)
        for p in (released_course.root / "release").rglob("*")
        if p.is_file()
    )
    committed = sorted(p.relative_to(REPO) for p in (REPO / "release").rglob("*") if p.is_file())
    assert fresh == committed
    for rel in committed:
        assert (released_course.root / rel).read_bytes() == (REPO / rel).read_bytes(), (
            f"{rel} differs from a fresh `python -m course release`: run it and commit the result"
        )


def _code_cells_with_outputs(path: Path) -> list[str]:
    nb = json.loads(path.read_text())
    return [
        c.get("id", "?")
        for c in nb["cells"]
        if c["cell_type"] == "code" and (c.get("outputs") or c.get("execution_count"))
    ]


@pytest.mark.parametrize("folder", ["source", "release"])
def test_notebooks_are_committed_without_outputs(folder):
    paths = _notebooks(folder)
    assert paths
    for path in paths:
        assert _code_cells_with_outputs(path) == [], (
            f"{path} has outputs: clear them before committing"
        )


def test_the_output_check_catches_outputs(tmp_path):
    nb = {
        "cells": [
            {
                "cell_type": "code",
                "id": "x",
                "execution_count": 3,
                "outputs": [],
                "source": "",
                "metadata": {},
            }
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    path = tmp_path / "dirty.ipynb"
    path.write_text(json.dumps(nb))
    assert _code_cells_with_outputs(path) == ["x"]


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_release_reveals_no_answers(assignment):
    text = (REPO / "release" / assignment / f"{assignment}.ipynb").read_text()
    for marker in ANSWER_MARKERS:
        assert marker not in text, f"release/{assignment} contains {marker!r}"
    source = (REPO / "source" / assignment / f"{assignment}.ipynb").read_text()
    assert "BEGIN HIDDEN TESTS" in source and "BEGIN SOLUTION" in source


@pytest.mark.parametrize("assignment", VALIDATED)
def test_source_notebook_passes_nbgrader_validate(assignment, tmp_path):
    path = REPO / "source" / assignment / f"{assignment}.ipynb"
    run = subprocess.run(
        [*NBGRADER, "validate", str(path)],
        capture_output=True,
        text=True,
        env=venv_env(),
        cwd=tmp_path,
        timeout=600,
    )
    assert "Success! Your notebook passes all the tests." in run.stdout, run.stdout + run.stderr


@pytest.mark.parametrize("assignment", VALIDATED)
def test_release_stubs_fail_every_test(assignment, tmp_path):
    path = REPO / "release" / assignment / f"{assignment}.ipynb"
    run = subprocess.run(
        [*NBGRADER, "validate", "--invert", str(path)],
        capture_output=True,
        text=True,
        env=venv_env(),
        cwd=tmp_path,
        timeout=600,
    )
    assert "Success! The notebook does not pass any tests." in run.stdout, run.stdout + run.stderr
