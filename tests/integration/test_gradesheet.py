"""The grade sheet's own pieces, on a small gradebook made here: statuses kept beside the
gradebook, late penalties recomputed when a score changes, what the exchange holds, the table,
lateness in words, the Moodle files. (Its numbers against nbgrader's export, after real grading:
tests/stories/test_term.py and tests/stories/test_steps.py.)"""

from __future__ import annotations

import csv
import datetime
import json

import pytest

from course import exchange, report, returns
from course.gradesheet import (
    FIELDS,
    STATUS_FILE,
    UNRELEASED,
    Row,
    _late,
    format_table,
    rows_for,
    write_csv,
    write_moodle_csvs,
)
from course.grading import late
from course.grading.batch import FAILED, GRADED, MISSING, PARTIAL, Outcome
from course.grading.words import counted
from course_testing import copy_course

DUE = datetime.datetime(2031, 1, 15, 12, 0)
AUTO, WRITTEN = 16.0, 2.0  # the made-up notebook: one test cell, one written answer


@pytest.fixture
def course(tmp_path):
    """A scratch course whose gradebook has one assignment "01" (notebook "nb": a test worth
    AUTO, a written answer worth WRITTEN, due DUE) and two submissions: ada's 38 s late, ben's
    on time, both with full marks on the test."""
    course = copy_course(tmp_path / "course")
    with course.api().gradebook as gb:
        gb.add_assignment("01", duedate=DUE)
        gb.update_or_create_notebook("nb", "01")
        gb.update_or_create_grade_cell("test", "nb", "01", max_score=AUTO, cell_type="code")
        gb.update_or_create_grade_cell("essay", "nb", "01", max_score=WRITTEN, cell_type="markdown")
        for student, seconds in (("ada", 38), ("ben", -3600)):
            gb.add_student(student)
            gb.add_submission("01", student, timestamp=DUE + datetime.timedelta(seconds=seconds))
            gb.find_grade("test", "nb", "01", student).auto_score = AUTO
        gb.db.commit()
    return course


def _rows(course, outcomes=()):
    with course.api().gradebook as gb:
        return {
            (r.assignment, r.student_id): r
            for r in rows_for(list(outcomes), gb, course.gradebook, exchange.handed_out(course))
        }


def _grade_essay(course, student, score):
    with course.api().gradebook as gb:
        gb.find_grade("essay", "nb", "01", student).manual_score = score
        gb.db.commit()


def test_the_late_penalty_follows_the_rule_whatever_the_order(course):
    """Rule: 10% of the score per started day. A written answer graded after autograde counts
    in the score the penalty is taken from, as soon as the penalties are recomputed."""
    late.reassess(course)
    ada = _rows(course)[("01", "ada")]
    assert ada.late_penalty == pytest.approx(0.1 * AUTO) and ada.score == pytest.approx(0.9 * AUTO)
    assert ada.late == "38s", "under a minute late prints seconds, not 0h 00m"
    _grade_essay(course, "ada", WRITTEN)
    assert _rows(course)[("01", "ada")].late_penalty == pytest.approx(0.1 * AUTO), "not yet"
    late.reassess(course)
    ada = _rows(course)[("01", "ada")]
    assert ada.late_penalty == pytest.approx(0.1 * (AUTO + WRITTEN))
    assert ada.score == pytest.approx(0.9 * (AUTO + WRITTEN))
    assert _rows(course)[("01", "ben")].late_penalty == 0, "on time: no penalty"


def test_a_status_stands_while_the_gradebook_has_what_it_graded(course):
    partial = Outcome("01", "ada", PARTIAL, "not graded: test")
    assert _rows(course, [partial])[("01", "ada")].status == PARTIAL
    _grade_essay(course, "ada", 1.0)  # manual grading leaves the run's finding alone
    assert _rows(course)[("01", "ada")].detail == partial.detail
    assert json.loads(course.gradebook.with_name(STATUS_FILE).read_text())
    with course.api().gradebook as gb:  # another autograde changed the work's score
        gb.find_grade("test", "nb", "01", "ada").auto_score = 3.0
        gb.db.commit()
    assert _rows(course)[("01", "ada")].status == GRADED


def test_a_failure_of_the_grader_shows_once_and_is_not_kept(course):
    broken = Outcome("01", "ben", FAILED, "error: database disk image is malformed")
    broken.grader_fault = True
    assert _rows(course, [broken])[("01", "ben")].status == FAILED
    assert _rows(course)[("01", "ben")].status == GRADED


def test_rows_are_a_function_of_the_gradebook(course):
    """A typo'd assignment added and removed again leaves no row behind; nor does an unreadable
    status file stop the sheet."""
    with course.api().gradebook as gb:
        gb.add_assignment("01_typo")
        gb.add_student("cara")
    rows = _rows(course)
    assert rows[("01_typo", "ada")].status == UNRELEASED, "nobody can have it"
    assert rows[("01", "cara")].status == MISSING, "classmates handed 01 in: cara did not"
    with course.api().gradebook as gb:
        gb.remove_assignment("01_typo")
    assert {a for a, _ in _rows(course)} == {"01"}
    course.gradebook.with_name(STATUS_FILE).write_text("{not json")
    assert _rows(course)[("01", "ada")].status == GRADED


def test_work_waiting_in_the_exchange_is_named_with_the_command_that_collects_it(course):
    inbound = course.root / "exchange" / "autograd-course" / "inbound"
    (inbound / "cara+01+2031-01-15 11:00:00.000000 UTC+x").mkdir(parents=True)
    collected = course.root / "submitted" / "ben" / "01"
    collected.mkdir(parents=True)
    (collected / "timestamp.txt").write_text("2031-01-15 10:00:00.000000 UTC")
    (inbound / "ben+01+2031-01-15 10:00:00.000000 UTC+y").mkdir()
    assert exchange.uncollected(course) == {("01", "cara"): "nbgrader collect 01"}
    (inbound / "ben+01+2031-01-15 11:30:00.000000 UTC+z").mkdir()
    assert exchange.uncollected(course)[("01", "ben")] == "nbgrader collect --update 01"
    with course.api().gradebook as gb:
        gb.add_student("cara")
    rows = _rows(course)
    report.annotate(course, list(rows.values()))
    assert rows[("01", "cara")].notes == ["not collected yet: `nbgrader collect 01`"]


def test_released_feedback_that_differs_from_the_gradebook_is_named(course):
    late.reassess(course)
    feedback = course.root / "feedback" / "ada" / "01"
    feedback.mkdir(parents=True)
    (feedback / "submission_secret.txt").write_text("s3cret")
    (feedback / "nb.html").write_text("page")
    released = course.root / "exchange" / "autograd-course" / "feedback"
    released.mkdir(parents=True)
    page = released / f"{exchange.notebook_hash(secret='s3cret', notebook_id='nb')}.html"
    page.write_text(f"<h4>nb (Score: {0.9 * AUTO:.2f} / {AUTO + WRITTEN})</h4>")
    (course.root / "submitted" / "ada" / "01").mkdir(parents=True)
    (course.root / "submitted" / "ada" / "01" / "timestamp.txt").write_text("x")
    assert report.annotate(course, list(_rows(course).values())) == {}
    _grade_essay(course, "ada", WRITTEN)
    late.reassess(course)
    rows = _rows(course)
    assert report.annotate(course, list(rows.values())) == {"01": ["ada"]}
    assert rows[("01", "ada")].notes == [f"released feedback says {0.9 * AUTO:g}: out of date"]
    assert report.refresh_command("01", ["ada"]) == "python -m course feedback 01 --student ada"


def _release_page(course, secret: str, score: float) -> None:
    """What `nbgrader release_feedback` leaves in the exchange for a submission's notebook."""
    released = course.root / "exchange" / "autograd-course" / "feedback"
    released.mkdir(parents=True, exist_ok=True)
    page = released / f"{exchange.notebook_hash(secret=secret, notebook_id='nb')}.html"
    page.write_text(f"<h4>nb (Score: {score:.2f} / {AUTO + WRITTEN})</h4>")


def test_feedback_released_for_an_earlier_submission_is_named(course):
    """ada resubmitted after her feedback was released; the new version is graded: what she
    fetches is still the earlier page, whatever its score."""
    inbound = course.root / "exchange" / "autograd-course" / "inbound"
    for stamp, secret in (("10:00", "first"), ("11:00", "second")):
        folder = inbound / f"ada+01+2031-01-15 {stamp}:00.000000 UTC+{secret}"
        folder.mkdir(parents=True)
        (folder / "nb.ipynb").write_text("{}")
        (folder / "submission_secret.txt").write_text(secret)
    collected = course.root / "submitted" / "ada" / "01"
    collected.mkdir(parents=True)
    (collected / "timestamp.txt").write_text("2031-01-15 11:00:00.000000 UTC")
    graded = course.root / "feedback" / "ada" / "01"
    graded.mkdir(parents=True)
    (graded / "submission_secret.txt").write_text("second")  # the version graded now
    (graded / "nb.html").write_text("page")
    late.reassess(course)
    assert report.annotate(course, list(_rows(course).values())) == {}, "nothing released yet"
    now = _rows(course)[("01", "ada")].score
    _release_page(course, "first", now)  # the same score as now: still another version's page
    rows = _rows(course)
    assert report.annotate(course, list(rows.values())) == {"01": ["ada"]}
    assert rows[("01", "ada")].notes == [
        f"released feedback is of an earlier submission ({now:g}): out of date"
    ]
    _release_page(course, "second", now)  # `python -m course feedback 01 --student ada`
    assert report.annotate(course, list(_rows(course).values())) == {}


def test_a_hand_in_without_timestamp_says_how_it_was_timed(course):
    (course.root / "submitted" / "ben" / "01").mkdir(parents=True)
    rows = _rows(course)
    report.annotate(course, list(rows.values()))
    assert rows[("01", "ben")].notes == [report.returns.NO_TIMESTAMP]
    assert rows[("01", "ada")].notes == []


def test_counts_in_words(course):
    assert counted(1, "submission") == "1 submission"
    assert counted(0, "submission") == "0 submissions" and counted(2, "answer") == "2 answers"
    released = [("01", "ada")]
    assert returns.summary(course, released, []) == (
        "feedback regenerated and released for 1 submission"
    )
    assert "for 2 submissions" in returns.summary(course, released * 2, [])


def test_lateness_in_words():
    assert _late(0) == "" and _late(-5) == ""
    assert _late(0.2) == "1s" and _late(38) == "38s" and _late(59.5) == "60s"
    assert _late(60) == "0h 01m"
    assert _late(2 * 3600 + 5 * 60) == "2h 05m"
    assert _late(86400 + 2 * 3600) == "1d 2h 00m"


def test_the_table_shows_the_total_and_what_a_person_still_has_to_do():
    rows = [
        Row("01", "ada", "graded", "", 16.0, 18.0, 16.0, 0.0, 0.0, "", ["01: essay"]),
        Row("01", "cara", "graded", "", 12.8, 18.0, 16.0, 0.0, 3.2, "1d 2h 00m"),
        Row("01", "eva", "failed", "invalid notebook: not JSON", None, 18.0),
        Row("01", "fay", "missing", "", notes=["not collected yet: `nbgrader collect 01`"]),
    ]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["assignment", "student", "status", "score", "detail"]
    assert "16/18" in lines[1] and "1 written answer to grade by hand" in lines[1]
    assert "12.8/18" in lines[2] and "late by 1d 2h 00m (penalty 3.2)" in lines[2]
    assert lines[3].split()[3] == "-" and "invalid notebook" in lines[3]
    assert lines[4].endswith("not collected yet: `nbgrader collect 01`")


def test_the_table_shows_no_control_character_a_student_chose():
    """A notebook's name, a student's folder name or what an error says of a notebook's content
    reach the table: escape codes there would retitle the instructor's terminal, write its
    clipboard or forge a line. Each is shown escaped, and a long detail is cut."""
    evil = "\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\ngraded 40\r"
    rows = [Row("01", f"ada{evil}", "failed", f"missing notebook: found {evil}" + "x" * 2000)]
    table = format_table(rows)
    assert not any(c in table.splitlines()[1] for c in "\x1b\x07\r")
    assert "\\x1b]0;pwned\\x07" in table and len(table.splitlines()[1]) < 1000
    assert len(table.splitlines()) == 2, "a newline in a name makes no line of its own"


def test_the_sheet_and_the_moodle_files_carry_every_row(tmp_path):
    rows = [
        Row("01", "ada", "graded", "", 16.0, 18.0),
        Row("01", "ben", "missing"),
        Row("02", "ada", "graded", "", 3.5, 4.0),
    ]
    sheet = write_csv(rows, tmp_path / "grades.csv")
    assert sheet.read_text().splitlines()[0] == ",".join(FIELDS)
    folder = tmp_path / "moodle"
    folder.mkdir()
    (folder / "02_typo.csv").write_text("an assignment no longer in the gradebook")
    write_moodle_csvs(rows, folder)
    assert sorted(p.name for p in folder.iterdir()) == ["01.csv", "02.csv"]
    with (folder / "01.csv").open() as handle:
        assert list(csv.reader(handle)) == [["Username", "01"], ["ada", "16"], ["ben", ""]]
