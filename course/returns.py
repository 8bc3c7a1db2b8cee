"""After manual grading: feedback pages with the manual scores and comments, back to students.

Runs in: the grader (the instructor's `python -m course` process).

`python -m course grade` writes feedback right after autograding, before anyone has graded the
written answers; nbgrader's ``generate_feedback`` then skips students who have feedback. This
regenerates it from the gradebook as it is now (late penalties recomputed first) and releases it
through the exchange. Work handed in by hand (copied into submitted/ without nbgrader's submit)
has no submission secret, so the exchange cannot deliver its page: it is written to feedback/ for
the instructor to pass on.
"""

from __future__ import annotations

from .grading import late
from .grading.coursedir import Course, CourseError
from .grading.words import counted

# How lateness is judged without nbgrader's timestamp (a hand-in).
NO_TIMESTAMP = (
    "handed in without timestamp.txt: judged on time (write the hand-in time into "
    "submitted/<student>/<assignment>/timestamp.txt, e.g. 2027-01-15 23:59:00 UTC, then grade)"
)


def return_feedback(
    course: Course, assignments: list[str], students: list[str] | None
) -> tuple[list, list]:
    """Regenerate feedback for every graded submission of ``assignments`` (of ``students`` only,
    when given) and release it; return the (assignment, student) pairs released and those
    handed in by hand (their pages stay in feedback/)."""
    api = course.api()
    chosen = course.check_assignments(assignments)
    late.reassess(course, chosen)
    released, by_hand = [], []
    for assignment in chosen:
        with api.gradebook as gb:
            graded = sorted(s.student.id for s in gb.assignment_submissions(assignment))
        for student in graded if students is None else [s for s in graded if s in students]:
            secret = course.root / "submitted" / student / assignment / "submission_secret.txt"
            steps = [api.generate_feedback]  # it forces: the page is made afresh
            steps += [api.release_feedback] if secret.is_file() else []
            for step in steps:
                result = step(assignment, student)
                if not result["success"]:
                    raise CourseError(
                        f"nbgrader could not {step.__name__.replace('_', ' ')} for {student}'s "
                        f"{assignment}:\n{result.get('error') or result.get('log')}"
                    )
            (released if secret.is_file() else by_hand).append((assignment, student))
    return released, by_hand


def summary(course: Course, released: list, by_hand: list) -> str:
    """What `feedback` did, and where the pages of hand-ins are to pass on."""
    lines = [f"feedback regenerated and released for {counted(len(released), 'submission')}"]
    lines += [
        f"{student}'s {assignment} was handed in by hand: give them "
        f"{course.root / 'feedback' / student / assignment}/ (the exchange cannot deliver it)"
        for assignment, student in by_hand
    ]
    return "\n".join(lines)
