"""`python -m course` on bad input: a clear message, the right exit code, nothing lost."""

from __future__ import annotations

import csv
import html
import json
import os
import re
import subprocess
import sys

import nbformat
import pytest

from course.submission import build_submission, reference_answers, write_submission
from course_testing import CONTRACT, REPO, copy_course, essay_cell, points, with_essay

ASSIGNMENT = "01_requires_grad"
POINTS = points(ASSIGNMENT) + points(ASSIGNMENT, kind="markdown")
ESSAY = "PyTorch keeps .grad where an optimizer needs it: on the leaves it updates."


def course_cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=900,
    )


def test_outside_a_course_directory_is_a_clear_error(tmp_path):
    run = course_cli("release", cwd=tmp_path)
    assert run.returncode == 2
    assert "is not a course directory: it has no nbgrader_config.py" in run.stderr


def test_missing_source_folder_is_a_clear_error(tmp_path):
    (tmp_path / "nbgrader_config.py").write_text("c = get_config()\n")
    run = course_cli("release", cwd=tmp_path)
    assert run.returncode == 2
    assert "it has no source/ folder" in run.stderr


def test_unknown_assignment_is_a_clear_error(tmp_path):
    copy_course(tmp_path / "course")
    for command in (["release", "99_nope"], ["grade", "99_nope"]):
        run = course_cli(*command, cwd=tmp_path / "course")
        assert run.returncode == 2, run.stderr
        assert "unknown assignment 99_nope; this course has: 01_requires_grad" in run.stderr
    assert not (tmp_path / "course" / "release").exists(), "nothing is released on a bad request"


def test_usage_errors_exit_non_zero(tmp_path):
    run = course_cli("grade", cwd=tmp_path)  # no assignment given
    assert run.returncode == 2
    assert "the following arguments are required: assignments" in run.stderr


def table_lines(printed: str) -> list[str]:
    """The rows of the table a command printed."""
    return [line for line in printed.splitlines() if re.match(r"\d\d_\w+ ", line)]


@pytest.fixture(scope="module")
def bad_class(tmp_path_factory):
    """A class where one student is fine (with a written answer to grade by hand), one notebook
    is corrupt and one folder has no notebook."""
    course = copy_course(tmp_path_factory.mktemp("cli") / "course", with_release=True)
    good = build_submission(course, ASSIGNMENT, reference_answers(course, ASSIGNMENT))
    write_submission(course, "alice", ASSIGNMENT, with_essay(good, ASSIGNMENT, ESSAY))
    corrupt = write_submission(course, "bob", ASSIGNMENT, good)
    corrupt.write_text('{"cells": [')
    (course.root / "submitted" / "carol" / ASSIGNMENT).mkdir(parents=True)
    (course.root / "submitted" / "carol" / ASSIGNMENT / "notes.txt").write_text("oops")
    run = course_cli("grade", ASSIGNMENT, cwd=course.root)
    return course, run


def test_a_corrupt_submission_does_not_stop_the_batch(bad_class):
    """The others are graded; the exit status says that some submissions failed (1), and the
    last line counts the statuses."""
    course, run = bad_class
    assert run.returncode == 1, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "graded 1, failed 2"
    lines = {
        line.split()[1]: line for line in run.stdout.splitlines() if line.startswith(ASSIGNMENT)
    }
    earned, available = map(float, lines["alice"].split()[3].split("/"))
    assert lines["alice"].split()[2] == "graded", lines["alice"]
    # every autograded point; the written answer's are in the maximum (no one graded it yet)
    assert (earned, available) == (points(ASSIGNMENT), POINTS), lines["alice"]
    assert "invalid notebook: 01_requires_grad.ipynb is not valid JSON" in lines["bob"]
    assert "failed" in lines["bob"].split()
    assert "missing notebook: 01_requires_grad.ipynb is not in the submission" in lines["carol"]
    assert (course.root / "autograded" / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb").is_file()
    assert (course.root / "feedback" / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.html").is_file()


def test_grade_prints_the_rows_of_what_it_graded(bad_class):
    _, run = bad_class
    rows = table_lines(run.stdout)
    assert sorted(line.split()[1] for line in rows) == ["alice", "bob", "carol"], run.stdout
    assert {line.split()[0] for line in rows} == {ASSIGNMENT}, "no other assignment's rows"


def test_every_student_is_in_the_csv_with_a_status(bad_class):
    course, _ = bad_class
    with (course.root / "grades" / "grades.csv").open() as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == ASSIGNMENT}
    assert set(rows) == {"alice", "bob", "carol"}
    alice = rows["alice"]
    assert alice["status"] == "graded" and float(alice["max_score"]) == POINTS
    assert float(alice["score"]) == float(alice["auto_score"]) == points(ASSIGNMENT)
    assert float(alice["manual_score"]) == 0
    for student in ("bob", "carol"):
        assert rows[student]["status"] == "failed"
        assert rows[student]["score"] == "", "a failed submission is never a silent 0"
        assert rows[student]["detail"]


def scheme_lines(assignment: str) -> list[str]:
    """The lines of the source's mark scheme for the written answer (as the source holds them)."""
    source = json.loads((REPO / "source" / assignment / f"{assignment}.ipynb").read_text())
    essay, _ = essay_cell(assignment)
    (cell,) = [
        c for c in source["cells"] if c["metadata"].get("nbgrader", {}).get("grade_id") == essay
    ]
    text = "".join(cell["source"])
    scheme = text.split("=== BEGIN MARK SCHEME ===")[1].split("=== END MARK SCHEME ===")[0]
    return [line.strip() for line in scheme.splitlines() if line.strip()]


def test_the_report_shows_the_mark_scheme_of_answers_waiting_and_feedback_never(bad_class):
    course, _ = bad_class
    essay, _ = essay_cell(ASSIGNMENT)
    lines = scheme_lines(ASSIGNMENT)
    assert len(lines) > 2
    report = html.unescape((course.root / "grades" / "report.html").read_text())
    assert f"{ASSIGNMENT} / alice: {ASSIGNMENT}: {essay}" in report, "alice's answer waits"
    shown = [line for line in lines if line in report]
    assert shown == lines, "the mark scheme beside the answers waiting"
    page = (course.root / "feedback" / "alice" / ASSIGNMENT / f"{ASSIGNMENT}.html").read_text()
    assert ESSAY in html.unescape(page)
    assert not [line for line in lines if line in html.unescape(page)], "never to the student"


@pytest.mark.parametrize("buffered", [True, False], ids=["buffered", "unbuffered"])
def test_export_to_a_reader_that_goes_away_does_its_work_quietly(bad_class, buffered):
    """`python -m course export | head`: head may exit before export prints (its table, at exit
    or line by line); export still writes every grade file, and says nothing of a broken pipe."""
    course, _ = bad_class
    sheet = course.root / "grades" / "grades.csv"
    sheet.unlink()
    env = {**os.environ, **({} if buffered else {"PYTHONUNBUFFERED": "1"})}
    export = subprocess.Popen(
        [sys.executable, "-m", "course", "export"],
        cwd=course.root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    export.stdout.close()  # the reader is gone before the first line
    errors = export.stderr.read().decode()
    assert export.wait(timeout=600) == 0, errors
    assert "BrokenPipe" not in errors and "Traceback" not in errors, errors
    assert sheet.is_file() and "alice" in sheet.read_text()


def test_failed_students_stay_in_the_gradebook(bad_class):
    course, _ = bad_class
    with course.api().gradebook as gb:
        assert {s.id for s in gb.students} >= {"alice", "bob", "carol"}


def test_a_mistyped_student_is_an_error_and_creates_nothing(bad_class):
    course, _ = bad_class
    sheet = (course.root / "grades" / "grades.csv").read_text()
    run = course_cli("grade", ASSIGNMENT, "--student", "alcie", cwd=course.root)
    assert run.returncode == 2
    assert "unknown student alcie" in run.stderr and "did you mean alice?" in run.stderr
    with course.api().gradebook as gb:
        assert "alcie" not in {s.id for s in gb.students}
    assert (course.root / "grades" / "grades.csv").read_text() == sheet


def test_grading_one_student_updates_only_their_row(bad_class):
    course, _ = bad_class
    run = course_cli("grade", ASSIGNMENT, "--student", "alice", cwd=course.root)
    assert run.returncode == 0, run.stderr
    with (course.root / "grades" / "grades.csv").open() as handle:
        rows = {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == ASSIGNMENT}
    assert set(rows) == {"alice", "bob", "carol"}, "the rest of the class is still there"
    assert rows["alice"]["status"] == "graded"
    assert rows["bob"]["status"] == rows["carol"]["status"] == "failed"
    assert "not valid JSON" in rows["bob"]["detail"]
    assert [line.split()[:2] for line in table_lines(run.stdout)] == [[ASSIGNMENT, "alice"]], (
        "the table shows what was asked"
    )


def test_a_source_whose_graded_cells_changed_stops_grading_before_anything(bad_class):
    course, _ = bad_class
    source = course.root / "source" / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
    before = source.read_bytes()
    sheet = (course.root / "grades" / "grades.csv").read_bytes()
    nb = nbformat.read(source, as_version=4)
    test = next(
        c
        for c in nb.cells
        if c.metadata.get("nbgrader", {}).get("grade_id", "").startswith("test_")
    )
    test.metadata["nbgrader"]["points"] += 1
    nbformat.write(nb, source)
    try:
        run = course_cli("grade", ASSIGNMENT, cwd=course.root)
    finally:
        source.write_bytes(before)
    assert run.returncode == 2
    grade_id = test.metadata["nbgrader"]["grade_id"]
    assert f"new points: {grade_id}" in run.stderr and "Nothing was graded" in run.stderr
    assert "nbgrader cannot change the graded cells" in run.stderr  # alice has a submission
    assert (course.root / "grades" / "grades.csv").read_bytes() == sheet


@pytest.mark.parametrize("elsewhere", [True, False], ids=["exchange elsewhere", "course-local"])
def test_lab_makes_the_configured_exchange_and_passes_options_on(tmp_path, elsewhere):
    """`make lab` runs `python -m course lab`: it makes the exchange nbgrader_config.py names
    (and no other) before JupyterLab starts, and hands JupyterLab the options it is given."""
    course = copy_course(tmp_path / "course")
    exchange = tmp_path / "srv" / "exchange" if elsewhere else course.root / "exchange"
    if elsewhere:
        with (course.root / "nbgrader_config.py").open("a") as config:
            config.write(f"\nc.Exchange.root = {str(exchange)!r}\n")
    run = course_cli("lab", "--version", cwd=course.root)  # JupyterLab's own option: it exits
    assert run.returncode == 0, run.stderr
    assert re.fullmatch(r"4\.6\.\d+\s*", run.stdout), run.stdout
    assert exchange.is_dir()
    assert (course.root / "exchange").is_dir() == (not elsewhere), "no stray exchange/"
    refused = course_cli("export", "--version", cwd=course.root)  # only lab passes options on
    assert refused.returncode == 2 and "unrecognized arguments: --version" in refused.stderr


def test_an_assignment_nobody_has_is_not_released_rather_than_missing(bad_class):
    """Only the first assignment was handed in, and no other is in the exchange: the others are
    `unreleased` in grades.csv, with no Canvas column, Moodle file, table row or points in the
    report's totals; once one is released to the exchange, its students are `missing`."""
    course, _ = bad_class
    later = [a for a in CONTRACT if a != ASSIGNMENT]
    grades = course.root / "grades"

    def export():
        done = course_cli("export", cwd=course.root)
        assert done.returncode == 0, done.stderr
        with (grades / "grades.csv").open() as handle:
            rows = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(handle)}
        with (grades / "canvas.csv").open() as handle:
            canvas = list(csv.reader(handle))
        return done.stdout, rows, canvas

    printed, rows, canvas = export()
    assert {line.split()[0] for line in table_lines(printed)} == {ASSIGNMENT}, printed
    assert f"Not released yet (no student has them): {', '.join(later)}" in printed
    for assignment in later:
        for student in ("alice", "bob", "carol"):
            row = rows[(assignment, student)]
            assert row["status"] == "unreleased" and row["score"] == "", row
            assert row["detail"].startswith("not released"), row
    assert canvas[0][5:] == [ASSIGNMENT] and float(canvas[1][5]) == POINTS
    assert sorted(p.stem for p in (grades / "moodle").glob("*.csv")) == [ASSIGNMENT]
    report = (grades / "report.html").read_text()
    assert f"<tr><td>{later[0]}</td>" not in report, "no status counts for it"
    assert re.search(rf"<tr><td>alice</td><td>[\d.]+</td><td>{POINTS:g}</td><td>0</td>", report)

    released = subprocess.run(
        [sys.executable, "-m", "nbgrader", "release_assignment", later[0]],
        cwd=course.root, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert released.returncode == 0, released.stderr
    printed, rows, canvas = export()
    assert rows[(later[0], "alice")]["status"] == "missing"
    assert canvas[0][5:] == [ASSIGNMENT, later[0]]
    total = points(later[0]) + points(later[0], kind="markdown")
    assert float(canvas[1][6]) == total, "its points possible"
    assert f"Not released yet (no student has them): {', '.join(later[1:])}" in printed
