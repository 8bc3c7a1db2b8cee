"""Hidden inputs drawn per submission: the number that seeds one submission's probes.

Runs in: the grader (a worker too, for plain `nbgrader autograde`).

Every probe draws its inputs from `course.lesson.probes.seeded`, mixed with the submission's
draw: a hash of a secret of the course's, the student's id, the assignment, the hand-in's
notebooks (their bytes) and the time of the hand-in. A regrade of the same submission draws the
same inputs (the same score); another student, another assignment or any change to the notebooks
gets others, so a feedback page ("expected ...") is no answer key, not even for the same
student's next hand-in with its answers pasted in. The secret, kept in the course folder and
never released, makes the draw unpredictable to whoever knows the rest.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import secrets
from pathlib import Path

from . import handin

SECRET = Path(".course") / "secret"


def course_secret(course_root: Path) -> bytes:
    """The course's secret, made on first use (readable by its owner only)."""
    path = Path(course_root) / SECRET
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".secret.{os.getpid()}")
        partial.write_text(secrets.token_hex(32))
        partial.chmod(0o600)
        try:  # the first of two graders at once wins: both then use the same secret
            os.link(partial, path)
        except FileExistsError:
            pass
        finally:
            partial.unlink()
    return path.read_bytes().strip()


def canonical(timestamp: datetime.datetime | None) -> str:
    """A hand-in time as nbgrader stores it (naive UTC), as text; '' when there is none."""
    if timestamp is None:
        return ""
    if timestamp.tzinfo is not None:
        timestamp = timestamp.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    return timestamp.isoformat()


def submission_draw(
    secret: bytes,
    student: str,
    assignment: str,
    notebooks: dict[str, bytes],
    timestamp: datetime.datetime | None,
) -> int:
    """The draw of a submission: a positive 63-bit number (0 is the instructor's own inputs)."""
    handed_in = hashlib.sha256()
    for name in sorted(notebooks):
        handed_in.update(name.encode() + b"\0" + hashlib.sha256(notebooks[name]).digest())
    parts = [secret, student.encode(), assignment.encode(), canonical(timestamp).encode()]
    text = b"\0".join([*parts, handed_in.digest()])
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1 or 1


def hand_in_draw(course_root: Path, assignment: str, student: str) -> int:
    """The draw of the hand-in in ``submitted/<student>/<assignment>/``: its notebooks are those
    the source has; raises `course.grading.handin.HandInError` for a file that is not what it
    claims. `grade` and plain `nbgrader autograde` both draw here."""
    folder = Path(course_root) / "submitted" / student / assignment
    names = [p.name for p in (Path(course_root) / "source" / assignment).glob("*.ipynb")]
    notebooks = {
        name: handin.read_bytes(folder / name, handin.NOTEBOOK_LIMIT)
        for name in names
        if os.path.lexists(folder / name)
    }
    stamp = handin.timestamp(folder)
    return submission_draw(course_secret(course_root), student, assignment, notebooks, stamp)
