"""An extension a person gave reaches the job that grades the hand-in: a job's gradebook holds its
own student's rows and no other's (`course.grading.gradebook.for_student`), so nbgrader's late
penalty there counts from the due date plus the extension, as it does in the course's
gradebook."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from course.grading import batch
from course.submission import build_submission, reference_answers, write_submission
from course_testing import copy_course

A = "04_no_grad"
DUE = datetime(2026, 1, 14, 12, 0)  # a day before every hand-in's time (`write_submission`)


def test_a_late_hand_in_is_penalised_unless_a_person_extended_its_due_date(tmp_path):
    course = copy_course(tmp_path / "course", with_release=True)
    refs = reference_answers(course, A)
    for student in ("late", "excused"):
        write_submission(course, student, A, build_submission(course, A, refs))
    with course.api().gradebook as gb:
        gb.update_or_create_assignment(A, duedate=DUE)
        gb.update_or_create_student("excused")
        gb.add_submission(A, "excused", extension=timedelta(days=2))
    outcomes = {o.student: o for o in batch.grade(course, [A], workers=2)}
    assert {o.status for o in outcomes.values()} == {batch.GRADED}, outcomes
    with course.api().gradebook as gb:
        late, excused = (gb.find_submission(A, s) for s in ("late", "excused"))
        assert late.late_submission_penalty > 0, "a day late, no extension"
        assert late.late_submission_penalty == pytest.approx(0.1 * late.code_score), "10% a day"
        assert excused.late_submission_penalty == 0, "within the extension"
        assert excused.extension == timedelta(days=2), "the person's extension stays"
