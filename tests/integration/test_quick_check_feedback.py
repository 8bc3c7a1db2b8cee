"""Released feedback is no answer key: a wrong quick-check answer is named, with its hint, but
the right one is not, unless the grader is told to reveal it (after the due date)."""

from __future__ import annotations

import ast
import json
import re

import nbformat

from course.grading import judging
from course_testing import REPO


def _quick_check_hints() -> list[tuple[str, dict[str, str], tuple[str, ...]]]:
    """(probe title, hints, options) of every quick check in the sources."""
    found = []
    for source in sorted((REPO / "source").glob("*/*.ipynb")):
        for cell in nbformat.read(source, as_version=4).cells:
            text = cell.source
            for title, hints, options in re.findall(
                r'@probe\("(quick check q\d)", hints=(\{.*?\})\)\n.*?choice\(q\d, (\(.*?\))',
                text,
                re.S,
            ):
                found.append((title, ast.literal_eval(hints), ast.literal_eval(options)))
    return found


def _record(title, answer, hints):
    return {"title": title, "record": {"dict": {"answer": answer}}, "rtol": 0, "atol": 0,
            "hints": hints, "teaching": {}}  # fmt: skip


def test_a_wrong_quick_check_answer_gets_its_hint_not_the_answer():
    checks = _quick_check_hints()
    assert checks, "the sources have quick checks"
    for title, hints, options in checks:
        right, wrong = options[0], options[1]
        want = [_record(title, right, hints)]
        verdict = judging.judge([_record(title, wrong, hints)], want)
        (problem,) = verdict.problems
        assert problem == f'{title}: answer: got "{wrong}", not the answer', problem
        assert verdict.why == [hints["answer"]], "the hint says why"
        assert json.dumps(right) not in problem, f"the page gives the answer away: {problem}"
        (revealed,) = judging.judge([_record(title, wrong, hints)], want, reveal=True).problems
        assert f"expected {json.dumps(right)}" in revealed
        assert judging.judge([_record(title, right, hints)], want) == judging.Verdict()


def test_a_non_answer_is_described_without_the_answer():
    want = [_record("quick check q1", "c", {})]
    got = [{"title": "quick check q1", "record": {"dict": {"answer": None}}}]
    (problem,) = judging.judge(got, want).problems
    assert problem == "quick check q1: answer: got None, not the answer" and '"c"' not in problem


def test_the_answer_is_revealed_only_once_the_due_date_has_passed(released_course, tmp_path):
    """The grader's side: `past_due` reads the assignment's due date from the gradebook."""
    import datetime
    import shutil

    from nbgrader.api import Gradebook

    from course.grading.execute import past_due

    db = tmp_path / "gradebook.db"
    shutil.copy2(released_course.gradebook, db)
    resources = {"nbgrader": {"db_url": f"sqlite:///{db}", "assignment": "01_requires_grad"}}
    assert not past_due(resources)  # no due date: classmates may still hand in
    now = datetime.datetime.now(datetime.timezone.utc).replace(tzinfo=None)
    for due, revealed in [
        (now + datetime.timedelta(days=1), False),
        (now - datetime.timedelta(seconds=5), True),
    ]:
        with Gradebook(f"sqlite:///{db}") as gb:
            gb.update_or_create_assignment("01_requires_grad", duedate=due)
        assert past_due(resources) is revealed
    assert not past_due({"nbgrader": {"db_url": f"sqlite:///{db}", "assignment": "nope"}})
    assert not past_due({})
