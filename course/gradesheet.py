"""The grade sheet: one row per student and assignment, with nbgrader's numbers and our status.

Runs in: the grader (the instructor's `python -m course` process).

The numbers are read from the gradebook every time the sheet is written, so they are the ones
nbgrader's own export, formgrader and the feedback show: written answers are in the maximum,
manual scores and extra credit are in the score, late penalties are taken off. What our grading
adds is the status and its detail (`course.grading.batch.Outcome`), kept beside the gradebook
(`STATUS_FILE`), not in the sheet: the sheet is a function of the two, so a row of an assignment
or student removed from the gradebook goes with it. A run for some students updates only their
statuses: the others keep the status of their last run, with fresh numbers, while the gradebook
still holds the submission that run graded.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from nbgrader.api import Gradebook, MissingEntry

from .grading.batch import GRADED, MISSING, Outcome
from .grading.handin import printable
from .grading.words import counted

# No student can have handed it in: not in the exchange, and nobody handed it in.
UNRELEASED = "unreleased"
NOT_RELEASED = "not released: not in the exchange, and nobody handed it in"

STATUS_FILE = "gradebook-status.json"  # beside gradebook.db: the last grading run's statuses

FIELDS = [
    "assignment",
    "student_id",
    "status",
    "score",
    "max_score",
    "auto_score",
    "manual_score",
    "late_penalty",
    "late",
    "to_grade",
    "detail",
    "notes",
]


@dataclass
class Row:
    assignment: str
    student_id: str
    status: str
    detail: str = ""
    score: float | None = None  # nbgrader's: raw score less the late penalty, at least 0
    max_score: float | None = None  # every graded cell's points, written answers included
    auto_score: float | None = None  # points from the autograder, where no person overrode them
    manual_score: float | None = None  # points a person gave in formgrader, extra credit included
    late_penalty: float | None = None
    late: str = ""  # how late, e.g. "2h 05m"; empty when on time or without a due date
    to_grade: list[str] = field(default_factory=list)  # written answers with no manual score
    notes: list[str] = field(default_factory=list)  # what to do about it now, e.g. collect it


def _late(seconds: float) -> str:
    if seconds <= 0:
        return ""
    if seconds < 60:  # "0h 00m" would read as on time, with a penalty
        return f"{math.ceil(seconds)}s"
    minutes = int(seconds // 60)
    days, minutes = divmod(minutes, 24 * 60)
    hours, minutes = divmod(minutes, 60)
    return (f"{days}d " if days else "") + f"{hours}h {minutes:02d}m"


def fill_numbers(row: Row, gb: Gradebook) -> Row:
    """Put the gradebook's numbers for the row's submission into it (none if never graded)."""
    try:
        assignment = gb.find_assignment(row.assignment)
    except MissingEntry:
        return row
    row.max_score = assignment.max_score
    try:
        submission = gb.find_submission(row.assignment, row.student_id)
    except MissingEntry:
        return row
    auto = manual = 0.0
    for notebook in submission.notebooks:
        for grade in notebook.grades:
            if grade.manual_score is not None:
                manual += grade.manual_score
            elif grade.auto_score is not None:
                auto += grade.auto_score
            else:  # a written answer, or a cell the autograder could not score
                row.to_grade.append(f"{notebook.name}: {grade.name}")
            manual += grade.extra_credit or 0.0
    row.auto_score, row.manual_score = auto, manual
    row.late_penalty = submission.late_submission_penalty or 0.0
    row.score = max(0.0, submission.score - row.late_penalty)
    row.late = _late(submission.total_seconds_late or 0)
    return row


def _fingerprint(gb: Gradebook, assignment: str, student: str) -> list:
    """What a grading run saw of a submission: while the gradebook still has it, the run's
    status stands; a new submission, an autograde elsewhere or a restored gradebook end it."""
    try:
        sub = gb.find_submission(assignment, student)
    except MissingEntry:
        return []
    return [sub.id, str(sub.timestamp), sub.code_score, sub.max_code_score]


def _status_path(gradebook: Path) -> Path:
    return gradebook.with_name(STATUS_FILE)


def read_statuses(gradebook: Path) -> dict[tuple[str, str], dict]:
    """The kept statuses, by (assignment, student); none when the file is missing or unreadable."""
    try:
        kept = json.loads(_status_path(gradebook).read_text())
        return {(k["assignment"], k["student"]): k for k in kept}
    except (OSError, ValueError, KeyError, TypeError):
        return {}


def rows_for(
    outcomes: list[Outcome], gb: Gradebook, gradebook: Path, handed_out: set[str]
) -> list[Row]:
    """The sheet: a row for every student and assignment of the gradebook (as nbgrader's export
    has), with the status of ``outcomes`` where they graded, else the kept status of an earlier
    run while it still describes the gradebook's submission, else what the gradebook says (graded
    or missing); every row's numbers from the gradebook. No submission of an assignment that
    is neither in ``handed_out`` nor in the gradebook's submissions is `UNRELEASED`, not
    missing. The statuses are kept again."""
    chosen = {}
    for a in gb.assignments:
        for s in gb.students:
            found = _fingerprint(gb, a.name, s.id)
            chosen[(a.name, s.id)] = {"status": GRADED if found else MISSING, "detail": ""}
    for key, kept in read_statuses(gradebook).items():
        if key in chosen and kept.get("seen") == _fingerprint(gb, *key):
            chosen[key] = kept
    for o in outcomes:
        chosen[(o.assignment, o.student)] = {"status": o.status, "detail": o.detail}
    nobody_has = {
        a.name for a in gb.assignments if a.name not in handed_out and not a.num_submissions
    }
    for (assignment, _), kept in chosen.items():
        if kept["status"] == MISSING and assignment in nobody_has:
            kept.update(status=UNRELEASED, detail=NOT_RELEASED)
    rows = [
        fill_numbers(Row(assignment, student, kept["status"], kept["detail"]), gb)
        for (assignment, student), kept in sorted(chosen.items())
    ]
    # A failure of the grader's own says nothing about the work: only this run's sheet shows it;
    # nor is "unreleased" a run's finding: it ends when the assignment is released.
    faults = {(o.assignment, o.student) for o in outcomes if o.grader_fault}
    keep = [
        {"assignment": r.assignment, "student": r.student_id, "status": r.status,
         "detail": r.detail, "seen": _fingerprint(gb, r.assignment, r.student_id)}
        for r in rows
        if (r.assignment, r.student_id) not in faults and r.status != UNRELEASED
    ]  # fmt: skip
    _status_path(gradebook).write_text(json.dumps(keep, indent=1))
    return rows


def released_rows(rows: list[Row]) -> list[Row]:
    """The rows of assignments students can have (what a grade file or a total counts)."""
    return [r for r in rows if r.status != UNRELEASED]


def _number(value: float | None) -> str:
    return "" if value is None else f"{value:g}"


def write_csv(rows: list[Row], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        for r in rows:
            writer.writerow(
                {
                    "assignment": r.assignment,
                    "student_id": r.student_id,
                    "status": r.status,
                    "score": _number(r.score),
                    "max_score": _number(r.max_score),
                    "auto_score": _number(r.auto_score),
                    "manual_score": _number(r.manual_score),
                    "late_penalty": _number(r.late_penalty),
                    "late": r.late,
                    "to_grade": "; ".join(r.to_grade),
                    "detail": r.detail,
                    "notes": "; ".join(r.notes),
                }
            )
    return path


def format_table(rows: list[Row]) -> str:
    """A plain-text table, one line per student and assignment, each field `printable`."""
    lines = [("assignment", "student", "status", "score", "detail")]
    for r in rows:
        score = "-" if r.score is None else f"{r.score:g}/{r.max_score:g}"
        notes = [r.detail, *r.notes]
        if r.late:
            notes.append(f"late by {r.late} (penalty {r.late_penalty:g})")
        if r.to_grade:
            notes.append(f"{counted(len(r.to_grade), 'written answer')} to grade by hand")
        fields = (r.assignment, r.student_id, r.status, score, "; ".join(filter(None, notes)))
        lines.append(tuple(printable(field, 400) for field in fields))
    widths = [max(len(line[i]) for line in lines) for i in range(4)]
    return "\n".join(
        ("  ".join(c.ljust(w) for c, w in zip(line[:4], widths)) + "  " + line[4]).rstrip()
        for line in lines
    )


def write_canvas_csv(rows: list[Row], gb: Gradebook, path: Path) -> Path:
    """Canvas's gradebook-import CSV: a student per line (matched on SIS User ID / SIS Login
    ID, here the nbgrader student id), a column per released assignment, a "Points Possible"
    line."""
    rows = released_rows(rows)
    assignments = sorted({r.assignment for r in rows})
    scores = {(r.assignment, r.student_id): r.score for r in rows}
    maxima = {r.assignment: r.max_score for r in rows}
    head = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section"]
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(head + assignments)
        points = [_number(maxima[a]) for a in assignments]
        writer.writerow(["Points Possible", "", "", "", ""] + points)
        for student in sorted({r.student_id for r in rows}):
            try:
                person = gb.find_student(student)
                name = ", ".join(filter(None, [person.last_name, person.first_name])) or student
            except MissingEntry:
                name = student
            marks = [_number(scores.get((a, student))) for a in assignments]
            writer.writerow([name, "", student, student, ""] + marks)
    return path


def write_moodle_csvs(rows: list[Row], folder: Path) -> Path:
    """Moodle's grade import takes one grade item per file: ``<assignment>.csv`` per assignment
    in ``folder``, a student per line matched on "Username" (here the nbgrader student id), the
    points in a column named after the assignment. Only released assignments have one: the
    files of others (unreleased, or no longer in the gradebook) are removed."""
    rows = released_rows(rows)
    folder.mkdir(parents=True, exist_ok=True)
    assignments = sorted({r.assignment for r in rows})
    for old in folder.glob("*.csv"):
        if old.stem not in assignments:
            old.unlink()
    for assignment in assignments:
        with (folder / f"{assignment}.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["Username", assignment])
            writer.writerows(
                [r.student_id, _number(r.score)] for r in rows if r.assignment == assignment
            )
    return folder
