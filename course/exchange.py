"""What the exchange holds for the gradebook's rows: work submitted but not collected yet, and the
score each released feedback page shows (what the student sees when fetching feedback).

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
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


def handed_out(course: Course) -> set[str]:
    """Assignments students can have: released to the exchange (its outbound folder) or handed
    in by someone (in its inbound folder, or in submitted/)."""
    folder = _course_folder(course)
    found = {p.name for p in (folder / "outbound").glob("*") if p.is_dir()}
    found |= {entry.name.split("+")[1] for entry in (folder / "inbound").glob("*+*+*")}
    return found | {a for a in course.assignments if course.submitted_students(a)}


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


@dataclass(frozen=True)
class Released:
    """The feedback a student fetches for an assignment: the score its page shows (as rounded
    there), and whether it is the page of an earlier submission than the graded one."""

    score: float
    earlier: bool


def _page_score(course: Course, secret: str, notebooks: list[str]) -> float | None:
    """The total of the released pages of a submission (its secret, its notebooks' names), or
    None when none is released."""
    pages = [
        _course_folder(course) / "feedback" / f"{notebook_hash(secret=secret, notebook_id=nb)}.html"
        for nb in notebooks
    ]
    scores = [_PAGE_SCORE.search(p.read_text(encoding="utf-8")) for p in pages if p.is_file()]
    return sum(float(m[1]) for m in scores if m) if scores else None


def released(course: Course, assignment: str, student: str) -> Released | None:
    """What `nbgrader fetch_feedback` gives the student: the page of the graded submission
    when it is released, else the newest page released for one of their earlier submissions
    (the inbound folder keeps each), else None."""
    graded = course.root / "feedback" / student / assignment
    secret = graded / "submission_secret.txt"
    graded_secret = secret.read_text() if secret.is_file() else None
    if graded_secret is not None:
        notebooks = [page.stem for page in sorted(graded.glob("*.html"))]
        if (score := _page_score(course, graded_secret, notebooks)) is not None:
            return Released(score, earlier=False)
    inbound = _course_folder(course) / "inbound"
    submissions = inbound.glob(f"{glob.escape(student)}+{glob.escape(assignment)}+*")
    for folder in sorted(submissions, key=lambda f: parse_utc(f.name.split("+")[2]), reverse=True):
        secret = folder / "submission_secret.txt"
        if not secret.is_file() or secret.read_text() == graded_secret:
            continue
        notebooks = [nb.stem for nb in sorted(folder.glob("*.ipynb"))]
        if (score := _page_score(course, secret.read_text(), notebooks)) is not None:
            return Released(score, earlier=True)
    return None
