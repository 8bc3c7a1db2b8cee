"""The grade sheet's own pieces: reading an earlier sheet back, the table, lateness in words.
(Its numbers against nbgrader's export: tests/test_term.py.)"""

from __future__ import annotations

from course.gradesheet import FIELDS, Row, _late, format_table, read_csv, write_csv


def test_a_sheet_reads_back_the_status_and_detail_of_each_row(tmp_path):
    rows = [
        Row("01", "ada", "graded", "", 16.0, 18.0, 16.0, 0.0, 0.0, "", ["01: essay"]),
        Row("01", "ben", "failed", "invalid notebook: not JSON; previous grade kept", 4.0, 18.0),
    ]
    path = write_csv(rows, tmp_path / "grades" / "grades.csv")
    back = read_csv(path)
    assert [(r.assignment, r.student_id, r.status, r.detail) for r in back] == [
        (r.assignment, r.student_id, r.status, r.detail) for r in rows
    ]
    assert path.read_text().splitlines()[0] == ",".join(FIELDS)


def test_a_sheet_that_is_not_ours_is_not_read(tmp_path):
    """nbgrader's export (another layout) or a missing file: no earlier rows, never a crash."""
    other = tmp_path / "grades.csv"
    other.write_text(
        "assignment,duedate,timestamp,student_id,raw_score,score,max_score\n01,,,ada,1,1,2\n"
    )
    assert read_csv(other) == []
    assert read_csv(tmp_path / "nothing.csv") == []


def test_lateness_in_words():
    assert _late(0) == "" and _late(-5) == ""
    assert _late(59) == "0h 00m"
    assert _late(2 * 3600 + 5 * 60) == "2h 05m"
    assert _late(86400 + 2 * 3600) == "1d 2h 00m"


def test_the_table_shows_the_total_and_what_a_person_still_has_to_do():
    rows = [
        Row("01", "ada", "graded", "", 16.0, 18.0, 16.0, 0.0, 0.0, "", ["01: essay"]),
        Row("01", "cara", "graded", "", 12.8, 18.0, 16.0, 0.0, 3.2, "1d 2h 00m"),
        Row("01", "eva", "failed", "invalid notebook: not JSON", None, 18.0),
    ]
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["assignment", "student", "status", "score", "detail"]
    assert "16/18" in lines[1] and "1 written answer(s) to grade by hand" in lines[1]
    assert "12.8/18" in lines[2] and "late by 1d 2h 00m (penalty 3.2)" in lines[2]
    assert lines[3].split()[3] == "-" and "invalid notebook" in lines[3]
