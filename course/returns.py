"""After manual grading: feedback pages with the manual scores and comments, back to students.

`python -m course grade` writes feedback right after autograding, before anyone has graded the
written answers; nbgrader's ``generate_feedback`` then skips students who have feedback. This
regenerates it from the gradebook as it is now and releases it through the exchange.
"""

from __future__ import annotations

from .grading.coursedir import Course, CourseError


def return_feedback(course: Course, assignments: list[str], students: list[str] | None) -> list:
    """Regenerate and release feedback for every graded submission of ``assignments`` (of
    ``students`` only, when given); return the (assignment, student) pairs done."""
    api = course.api()
    done = []
    for assignment in course.check_assignments(assignments):
        with api.gradebook as gb:
            graded = sorted(s.student.id for s in gb.assignment_submissions(assignment))
        for student in graded if students is None else [s for s in graded if s in students]:
            for step in (api.generate_feedback, api.release_feedback):  # the first forces
                result = step(assignment, student)
                if not result["success"]:
                    raise CourseError(
                        f"nbgrader could not {step.__name__.replace('_', ' ')} for {student}'s "
                        f"{assignment}:\n{result.get('error') or result.get('log')}"
                    )
            done.append((assignment, student))
    return done
