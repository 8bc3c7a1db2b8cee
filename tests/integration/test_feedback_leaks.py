"""What a student's kernel says while the hidden tests run never reaches the feedback: not an
exception's message (of any class, however long), not an update of an earlier cell's display,
not a widget message. The grader writes those lines itself. Each attack leaks only once the
notebook's last cell has run (its marker is then the probes' inputs), and prints a marker of its
own in an ordinary cell, which must reach the feedback: the check can see a leak."""

from __future__ import annotations

import html
import re
import subprocess
import sys

import nbformat
import pytest

from course.submission import build_submission, write_submission
from course_testing import copy_course, venv_env

A = "01_requires_grad"
SEEN = "SEEN-IN-AN-ORDINARY-CELL"  # the leak marker is made at run time, never in a source

# Each: the answer cell for make_trainable, and a last cell that arms it (after the visible tests).
ATTACKS = {
    "base_exception": """
class Boom(BaseException):
    pass

armed = False

def make_trainable(values):
    if armed:
        raise Boom("LEAK" + "ED-WHILE-PROBING " + repr(values) * 2000)
    return torch.tensor(values, dtype=torch.float32).requires_grad_()
""",
    "display_update": """
from IPython.display import display, update_display

armed = False
display("placeholder", display_id="board")

def make_trainable(values):
    if armed:
        update_display("LEAK" + "ED-WHILE-PROBING " + repr(values), display_id="board")
    return torch.tensor(values, dtype=torch.float32).requires_grad_()
""",
    "long_name_error": """
armed = False

def make_trainable(values):
    if armed:
        kind = type("LEAK" + "ED_WHILE_PROBING_" + "x" * 200, (Exception,), {})
        raise kind("LEAK" + "ED-WHILE-PROBING " + repr(values))
    return torch.tensor(values, dtype=torch.float32).requires_grad_()
""",
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = copy_course(tmp_path_factory.mktemp("leaks") / "course", with_release=True)
    for name, answer in ATTACKS.items():
        nb = build_submission(course, A, {"make_trainable": answer})
        nb.cells.append(nbformat.v4.new_code_cell(f"print('{SEEN}')\narmed = True"))
        write_submission(course, name, A, nb)
    done = subprocess.run(
        [sys.executable, "-m", "course", "grade", A, "--workers", "2"],
        cwd=course.root,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return course


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_nothing_said_during_the_hidden_tests_reaches_the_feedback(graded, attack):
    page = graded.root / "feedback" / attack / A / f"{A}.html"
    text = html.unescape(re.sub(r"<[^>]+>", "", page.read_text()))
    assert SEEN in text, "the ordinary cell's output is missing: the check could not see a leak"
    assert "LEAKED" not in text.replace("-", "_").upper(), attack
    notebook = graded.root / "autograded" / attack / A / f"{A}.ipynb"
    assert "LEAKED" not in notebook.read_text().replace("-", "_").upper()
    assert page.stat().st_size < 2_000_000
