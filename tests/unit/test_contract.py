"""The source notebooks keep docs/exercise-contract.md: names, cells, points and stubs."""

from __future__ import annotations

import ast

import nbformat
import pytest

from course_testing import CONTRACT, REPO, read_contract

CASES = [(a, e) for a, exercises in CONTRACT.items() for e in exercises]


def _cells(folder: str, assignment: str):
    nb = nbformat.read(REPO / folder / assignment / f"{assignment}.ipynb", as_version=4)
    return [(c, c.metadata.get("nbgrader", {})) for c in nb.cells]


def contract_problems(cells, exercise: str) -> list[str]:
    """How the notebook's cells break the contract for ``exercise`` (empty when they keep it)."""
    answers = [
        i for i, (c, m) in enumerate(cells) if m.get("solution") and m.get("grade_id") == exercise
    ]
    if len(answers) != 1:
        return [f"{len(answers)} answer cells have grade_id {exercise!r}, expected exactly 1"]
    at = answers[0]
    cell = cells[at][0]
    problems = []
    if cell.cell_type != "code" or cells[at][1].get("grade"):
        problems.append(f"{exercise} must be an autograded answer (code, solution, not graded)")
    defined = [
        n.name
        for n in ast.parse(cell.source.replace("%", "#")).body
        if isinstance(n, ast.FunctionDef)
    ]
    if exercise not in defined:
        problems.append(f"the answer cell does not define {exercise}()")
    tests = [
        (c, m)
        for c, m in cells[at + 1 :]
        if m.get("grade")
        and not m.get("solution")
        and m.get("grade_id", "").startswith(f"test_{exercise}")
    ]
    before = [
        m["grade_id"] for c, m in cells[:at] if m.get("grade_id", "").startswith(f"test_{exercise}")
    ]
    if before:
        problems.append(f"test cells {before} come before the answer cell")
    if not tests:
        problems.append(f"no test_{exercise}* test cell after the answer cell")
    if sum(m.get("points", 0) for _, m in tests) < 1:
        problems.append(f"the tests of {exercise} carry less than 1 point")
    bare = [m["grade_id"] for c, m in tests if "### BEGIN HIDDEN TESTS" not in c.source]
    if bare:  # its points would rest on the kernel's own verdict
        problems.append(f"the tests of {exercise} have no hidden tests: {bare}")
    if any(not c.source.lstrip().startswith('"""') for c, _ in tests):
        problems.append(f"every test cell of {exercise} opens with a one-sentence docstring")
    return problems


@pytest.mark.parametrize("assignment,exercise", CASES)
def test_source_keeps_the_contract(assignment, exercise):
    assert contract_problems(_cells("source", assignment), exercise) == []


@pytest.mark.parametrize("assignment,exercise", CASES)
def test_release_keeps_signature_and_docstring_with_a_stub(assignment, exercise):
    source = next(c for c, m in _cells("source", assignment) if m.get("grade_id") == exercise)
    release = next(c for c, m in _cells("release", assignment) if m.get("grade_id") == exercise)
    src_fn = next(n for n in ast.parse(source.source).body if isinstance(n, ast.FunctionDef))
    rel_fn = next(n for n in ast.parse(release.source).body if isinstance(n, ast.FunctionDef))
    assert ast.dump(src_fn.args) == ast.dump(rel_fn.args), "the release changed the signature"
    assert ast.get_docstring(src_fn) == ast.get_docstring(rel_fn)
    assert "raise NotImplementedError()" in release.source


def test_the_contract_check_catches_a_broken_notebook():
    from nbformat.v4 import new_code_cell

    def cell(source, **meta):
        c = new_code_cell(source)
        return c, meta

    good = [
        cell("def f(x):\n    return x", solution=True, grade_id="f"),
        cell(
            '"""Check f."""\nassert f(1) == 1\n### BEGIN HIDDEN TESTS\n### END HIDDEN TESTS',
            grade=True,
            grade_id="test_f",
            points=1,
        ),
    ]
    assert contract_problems(good, "f") == []
    assert contract_problems(good, "g") == ["0 answer cells have grade_id 'g', expected exactly 1"]
    no_points = [good[0], cell(good[1][0].source, grade=True, grade_id="test_f", points=0)]
    assert "the tests of f carry less than 1 point" in contract_problems(no_points, "f")
    no_hidden = [
        good[0],
        cell('"""Check f."""\nassert f(1) == 1', grade=True, grade_id="test_f", points=1),
    ]
    assert "the tests of f have no hidden tests: ['test_f']" in contract_problems(no_hidden, "f")
    one_bare = [*good, cell('"""Check f."""\nassert f(2) == 2', grade=True, grade_id="test_f2")]
    assert "the tests of f have no hidden tests: ['test_f2']" in contract_problems(one_bare, "f")
    tests_first = [good[1], good[0]]
    assert "no test_f* test cell after the answer cell" in contract_problems(tests_first, "f")
    renamed = [cell("def g(x):\n    return x", solution=True, grade_id="f"), good[1]]
    assert "the answer cell does not define f()" in contract_problems(renamed, "f")


def test_the_contract_names_every_assignment_of_the_course():
    """docs/exercise-contract.md is where the tests read the contract from: each assignment in
    source/ has a section with at least one exercise, and nothing else has one."""
    sources = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
    assert sorted(CONTRACT) == sources
    assert all(CONTRACT.values())


def test_reading_the_contract_keeps_only_exercise_items():
    text = (
        "## Where things live\n- `NAME` anything\n"
        "## 01_a\n- `f(x)`: does f.\n- not an exercise\n"
        "## 02_b\n- `g(y, z=1)`: does g.\n- `h()`: does h.\n"
    )
    assert read_contract(text) == {"01_a": ["f"], "02_b": ["g", "h"]}
