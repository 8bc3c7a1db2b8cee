"""What the exchange holds for the gradebook's rows: work submitted but not collected yet, and the
score each released feedback page shows (what the student sees when fetching feedback)."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from nbgrader.utils import notebook_hash, parse_utc

from .grading.coursedir import Course, exchange_root

_PAGE_SCORE = re.compile(r"\(Score: (-?[\d.]+) / [\d.]+\)</h4>")  # nbgrader's feedback header


@cache  # read once per course: it is asked for every row of the sheet
def _course_folder(course: Course) -> Path:
    config = course.config()
    return exchange_root(config) / config.CourseDirectory.get("course_id", "")


def _stamp(folder: Path):
    path = folder / "timestamp.txt"
    return parse_utc(path.read_text().strip()) if path.is_file() else None


def uncollected(course: Course) -> dict[tuple[str, str], str]:
    """(assignment, student) -> the command that collects the work waiting in the inbound folder
    for it: never collected, or submitted again after the collected version."""
    waiting: dict[tuple[str, str], str] = {}
    inbound = _course_folder(course) / "inbound"
    for entry in sorted(inbound.glob("*+*+*")) if inbound.is_dir() else []:
        student, assignment, stamp = entry.name.split("+")[:3]
        collected = course.root / "submitted" / student / assignment
        if not collected.is_dir():
            waiting[(assignment, student)] = f"nbgrader collect {assignment}"
        elif (old := _stamp(collected)) is not None and parse_utc(stamp) > old:
            waiting[(assignment, student)] = f"nbgrader collect --update {assignment}"
    return waiting


def released_score(course: Course, assignment: str, student: str) -> float | None:
    """The total of the feedback pages released for the student's current submission (as
    rounded on the page), or None when none is."""
    feedback = course.root / "feedback" / student / assignment
    secret = feedback / "submission_secret.txt"
    if not secret.is_file():
        return None
    pages = [
        _course_folder(course)
        / "feedback"
        / f"{notebook_hash(secret=secret.read_text(), notebook_id=page.stem)}.html"
        for page in sorted(feedback.glob("*.html"))
    ]
    scores = [_PAGE_SCORE.search(p.read_text(encoding="utf-8")) for p in pages if p.is_file()]
    return sum(float(m[1]) for m in scores if m) if scores else None
