"""Hidden inputs drawn per submission: the number that seeds one submission's probes.

Runs in: the grader (a worker too, for plain `nbgrader autograde`).

Every probe draws its inputs from `course.lesson.probes.seeded`, mixed with the submission's
draw: a hash of a secret of the course's, the student's id and the time of the hand-in. A regrade
of the same submission draws the same inputs (the same score); another student, or the same
student's next hand-in, gets others, so a feedback page ("expected ...") is no answer key for
anyone's next submission. The secret, kept in the course folder and never released, makes the
draw unpredictable to whoever knows an id and a time.
"""

from __future__ import annotations

import datetime
import hashlib
import os
import secrets
from pathlib import Path

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


def submission_draw(secret: bytes, student: str, timestamp: datetime.datetime | None) -> int:
    """The draw of a submission: a positive 63-bit number (0 is the instructor's own inputs)."""
    text = b"\0".join([secret, student.encode(), canonical(timestamp).encode()])
    return int.from_bytes(hashlib.sha256(text).digest()[:8], "big") >> 1 or 1
