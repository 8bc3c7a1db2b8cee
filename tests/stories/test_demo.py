"""`make demo`: the fictional class grades to the statuses and scores its members stand for."""

from __future__ import annotations

import csv
import html
import io
import re

import pytest

from course import demo
from course.grading import batch
from course.grading.coursedir import Course
from course.progress import Progress
from course_testing import CONTRACT, REPO, secret_lines

LAST = list(CONTRACT)[1:]


class Terminal(io.StringIO):
    """What `make demo` writes its progress bar to."""

    def isatty(self):
        return True


TERMINAL = Terminal()


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    scratch = tmp_path_factory.mktemp("demo") / "course"
    printed = []
    outcomes = demo.run_demo(Course.at(REPO), scratch, printed.append, Progress(stream=TERMINAL))
    return scratch, {(o.assignment, o.student): o for o in outcomes}, "\n".join(printed)


def test_the_demo_shows_its_grading_progress(demo_run):
    """`make demo` grades for minutes: it shows `grade`'s bar, with what it is doing first."""
    _, outcomes, printed = demo_run
    assert printed.splitlines()[1].startswith("Releasing the assignments")
    shown = TERMINAL.getvalue().split("\r\033[K")
    total = len(CONTRACT) * len(demo.DEMO_CLASS)
    assert any("checking the reference solutions' records" in line for line in shown), shown
    failed = sum(o.status == batch.FAILED for o in outcomes.values())
    assert shown[-1].startswith(f"[{'#' * 24}] {total}/{total} graded, {failed} failed"), shown
    assert [f" {n}/{total} graded" in "".join(shown) for n in range(1, total + 1)] == [True] * total


def test_every_student_has_a_row_per_assignment(demo_run):
    _, outcomes, _ = demo_run
    assert set(outcomes) == {(a, s) for a in CONTRACT for s in demo.DEMO_CLASS}


@pytest.mark.parametrize("assignment", list(CONTRACT))
def test_statuses_and_scores(demo_run, assignment):
    _, outcomes, _ = demo_run
    get = lambda s: outcomes[(assignment, s)]  # noqa: E731
    for student in ("ada", "cleo"):
        assert get(student).status == batch.GRADED, get(student).detail
        assert get(student).score == get(student).max_score > 0
    assert get("ben").status == batch.GRADED
    assert get("ben").score < get("ben").max_score
    assert get("dan").status == batch.GRADED and get("dan").score == 0
    assert get("eva").status == batch.FAILED
    assert get("eva").detail.startswith("invalid notebook:") and get("eva").score is None
    if assignment in LAST:
        assert get("finn").status == batch.MISSING
    else:
        assert get("finn").score == get("finn").max_score


def test_table_csv_and_feedback_are_where_the_demo_says(demo_run):
    scratch, outcomes, printed = demo_run
    assert f"Grades (CSV): {scratch / 'grades' / 'grades.csv'}" in printed
    assert re.search(r"^01_requires_grad\s+eva\s+failed\s+-\s+invalid notebook", printed, re.M)
    with (scratch / "grades" / "grades.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(outcomes)
    for (assignment, student), outcome in outcomes.items():
        feedback = scratch / "feedback" / student / assignment / f"{assignment}.html"
        assert feedback.is_file() == (outcome.status == batch.GRADED), (student, assignment)


def test_report_shows_statuses_failures_and_common_messages(demo_run):
    scratch, outcomes, printed = demo_run
    page = (scratch / "grades" / "report.html").read_text()
    assert f"Report (HTML): {scratch / 'grades' / 'report.html'}" in printed
    assert "01_requires_grad / eva: failed, invalid notebook" in page
    # dan handed in stubs: every test of his failed with the stub hint, so it is among the top.
    assert "NotImplementedError: this exercise still raises NotImplementedError" in page
    for assignment in CONTRACT:
        assert f"<h2>{assignment}</h2>" in page and f"mean score per test of {assignment}" in page


@pytest.mark.parametrize("assignment", list(CONTRACT))
def test_feedback_never_shows_hidden_tests(demo_run, assignment):
    scratch, _, _ = demo_run
    hidden = secret_lines(assignment, "HIDDEN TESTS")
    assert hidden, "the source has hidden tests to hide"
    for student in ("ada", "ben", "dan"):
        page = (scratch / "feedback" / student / assignment / f"{assignment}.html").read_text()
        shown = [line for line in hidden if html.escape(line) in page or line in page]
        assert shown == [], f"{student}'s feedback shows hidden test lines"


def test_the_demo_ends_with_the_summary_line_of_grade(demo_run):
    """`make demo` ends as `python -m course grade` does: the count of each status."""
    _, outcomes, printed = demo_run
    last = printed.splitlines()[-1]
    assert last == batch.summary(list(outcomes.values()))
    assert last == "graded 17, failed 4, missing 3"


def readme_sample() -> list[str]:
    """The lines of the demo's output that the README shows (its "..." lines left out)."""
    section = (REPO / "README.md").read_text().split("## On a fresh machine", 1)[1]
    blocks = re.findall(r"^```(\w*)\n(.*?)^```$", section, flags=re.M | re.S)
    block = next(text for language, text in blocks if not language)
    return [line for line in block.splitlines() if line.strip() and line != "..."]


def unshown(sample: list[str], printed: str) -> list[str]:
    """The README's lines that the demo did not print (`...` in a line stands for any text,
    `.../.demo/` for the scratch folder)."""
    missing = []
    for line in sample:
        pattern = re.escape(line.replace(".../.demo/", ".../")).replace(r"\.\.\.", ".*")
        if not re.search(f"^{pattern}$", printed, flags=re.M):
            missing.append(line)
    return missing


def test_the_readme_shows_what_the_demo_prints(demo_run):
    _, _, printed = demo_run
    sample = readme_sample()
    assert sample[-1] == printed.splitlines()[-1]
    assert unshown(sample, printed) == []
    assert unshown(["01_requires_grad  ada      graded   99/99"], printed) != []
