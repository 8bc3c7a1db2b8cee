"""Regenerate release/ (the student version) from source/ with nbgrader's generate_assignment.

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from .grading.batch import check_references
from .grading.coursedir import Course, CourseError, nbgrader_reason


def release(course: Course, assignments: list[str]) -> list[str]:
    """Regenerate ``release/<id>`` for each assignment (all of them when empty).

    nbgrader strips solutions, hidden tests, mark schemes and outputs and records the cells in the
    gradebook; its output depends only on source/, so CI can regenerate it and compare. When
    nbgrader refuses (e.g. cells added after students submitted), the release folder is left as
    it was and nbgrader's reason is shown. Then the reference solutions run their own hidden
    tests once (`course.grading.reference`), in parallel: a reference that fails them is refused
    here, not on grading day, and the records are kept for grading.
    """
    chosen = course.check_assignments(assignments)
    if not assignments:
        # A whole-course release also drops folders whose source is gone.
        for stale in (course.root / "release").glob("*/"):
            if stale.name not in chosen:
                shutil.rmtree(stale)
    api = course.api()
    for assignment in chosen:
        target = course.root / "release" / assignment
        with tempfile.TemporaryDirectory(prefix="release-") as keep:
            kept = Path(keep) / assignment
            if target.exists():  # nbgrader empties it first, even when it then fails
                shutil.copytree(target, kept)
            result = api.generate_assignment(assignment, force=True, create=True)
            if not result["success"]:
                if kept.exists():
                    shutil.rmtree(target, ignore_errors=True)
                    shutil.copytree(kept, target)
                raise CourseError(
                    f"nbgrader could not generate {assignment} (release/{assignment} is "
                    f"unchanged): {nbgrader_reason(result.get('log') or '') or result.get('error')}"
                )
    check_references(course, chosen)
    return chosen
