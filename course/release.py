"""Regenerate release/ (the student version) from source/ with nbgrader's generate_assignment."""

from __future__ import annotations

import shutil

from .grading.coursedir import Course, CourseError


def release(course: Course, assignments: list[str]) -> list[str]:
    """Regenerate ``release/<id>`` for each assignment (all of them when empty).

    nbgrader strips solutions, hidden tests, mark schemes and outputs and records the cells in the
    gradebook; its output depends only on source/, so CI can regenerate it and compare.
    """
    chosen = course.check_assignments(assignments)
    if not assignments:
        # A whole-course release also drops folders whose source is gone.
        for stale in (course.root / "release").glob("*/"):
            if stale.name not in chosen:
                shutil.rmtree(stale)
    api = course.api()
    for assignment in chosen:
        result = api.generate_assignment(assignment, force=True, create=True)
        if not result["success"]:
            raise CourseError(
                f"nbgrader could not generate {assignment}:\n"
                f"{result.get('error') or result.get('log')}"
            )
    return chosen
