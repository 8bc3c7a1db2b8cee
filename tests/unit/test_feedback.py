"""Failed tests show their message in feedback, never a traceback quoting hidden test lines."""

import nbformat
from nbformat.v4 import new_code_cell, new_notebook, new_output

from course.grading.feedback import (
    STUB_HINT,
    WRAP_CSS,
    ShortTestErrors,
    WrapLongLines,
    short_error,
)


def _cell(grade: bool, solution: bool = False):
    cell = new_code_cell("x = f()\n### BEGIN HIDDEN TESTS\nassert f(42) == 7\n### END HIDDEN TESTS")
    cell.metadata["nbgrader"] = {"grade": grade, "solution": solution, "grade_id": "t", "points": 1}
    cell.outputs = [
        new_output(
            "error",
            ename="CheckFailed",
            evalue="f(42) is wrong: did you ...",
            traceback=["Traceback", "----> 3 assert f(42) == 7"],
        )
    ]
    return cell


def test_test_cell_tracebacks_become_the_message():
    nb = new_notebook(
        cells=[_cell(grade=True), _cell(grade=False), _cell(grade=True, solution=True)]
    )
    out, _ = ShortTestErrors().preprocess(nbformat.from_dict(nb), {})
    assert out.cells[0].outputs[0].traceback == ["CheckFailed: f(42) is wrong: did you ..."]
    # Only graded test cells are rewritten: a student's own cell keeps its full traceback.
    assert out.cells[1].outputs[0].traceback == ["Traceback", "----> 3 assert f(42) == 7"]
    assert out.cells[2].outputs[0].traceback == ["Traceback", "----> 3 assert f(42) == 7"]


def test_short_error_explains_a_stub():
    assert short_error("NotImplementedError", "") == f"NotImplementedError: {STUB_HINT}"
    assert short_error("KeyError", "'w'") == "KeyError: 'w'"
    assert short_error("AssertionError", "") == "AssertionError"


def test_long_messages_wrap_inside_the_page():
    """The wrapping rule joins the page's inlined styles, after those nbconvert put there."""
    resources = {"inlining": {"css": ["body {}"]}}
    _, out = WrapLongLines().preprocess(new_notebook(), resources)
    assert out["inlining"]["css"] == ["body {}", WRAP_CSS]
    assert "pre-wrap" in WRAP_CSS and "overflow-wrap: anywhere" in WRAP_CSS
    _, fresh = WrapLongLines().preprocess(new_notebook(), {})
    assert fresh["inlining"]["css"] == [WRAP_CSS]
