"""Picking up an interrupted grading run where it stopped.

Runs in: the grader (the instructor's `python -m course` process).

A run stopped by Ctrl-C or a stop signal (`course.grading.batch.Interrupted`) leaves
``.course/interrupted.json``: the submissions it recorded, each with a digest of its files and
of the assignment's source. The next run of the same command keeps those (their grades are in
the gradebook already) and grades the rest; a submission or source changed since is graded
again. A run that finishes removes it.
"""

from __future__ import annotations

import hashlib
import json
import signal
from pathlib import Path

from . import atomic
from .coursedir import Course

# A stop asked for by `kill`, a closed terminal or a job scheduler is handled as Ctrl-C is (the
# command line makes them raise KeyboardInterrupt): zygotes, workers and kernels end with the run.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _path(course: Course) -> Path:
    return course.root / ".course" / "interrupted.json"


def digest(course: Course, assignment: str, student: str) -> str:
    """What a grade depends on: the submission's files and the assignment's source notebooks."""
    sha = hashlib.sha256()
    for folder in (
        course.root / "submitted" / student / assignment,
        course.root / "source" / assignment,
    ):
        for path in sorted(folder.glob("*")):
            if path.is_file() and not path.is_symlink():
                sha.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return sha.hexdigest()


def _selection(assignments: list[str], students: list[str] | None) -> list:
    return [sorted(assignments), sorted(students) if students is not None else None]


def recorded(course: Course, assignments: list[str], students: list[str] | None) -> set:
    """(assignment, student) pairs an interrupted run of the same selection recorded, whose
    files have not changed since."""
    try:
        state = json.loads(_path(course).read_text())
    except (OSError, ValueError):
        return set()
    if state.get("selection") != _selection(assignments, students):
        return set()
    return {
        (a, s)
        for key, value in state.get("recorded", {}).items()
        for a, _, s in [key.partition("/")]
        if value == digest(course, a, s)
    }


def interrupted(
    course: Course, assignments: list[str], students: list[str] | None, done: set
) -> None:
    """Note what an interrupted run recorded (``done``: (assignment, student) pairs)."""
    path = _path(course)
    path.parent.mkdir(parents=True, exist_ok=True)
    state = {
        "selection": _selection(assignments, students),
        "recorded": {f"{a}/{s}": digest(course, a, s) for a, s in sorted(done)},
    }
    atomic.write_text(path, json.dumps(state, indent=1))


def finished(course: Course) -> None:
    _path(course).unlink(missing_ok=True)
