"""Recording a finished job (`course.grading.record`): the automatic fields that the job's
autograde wrote reach the real gradebook, what a person entered stays, the autograded folder
holds what nbgrader would put there (not what a link points at), a job that does not match the
course, or returns a file outside its folder, changes nothing and is the grader's failure."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from nbgrader.api import Gradebook

from course.grading import batch, gradebook
from course.grading.jobs import JobResult
from course.grading.record import RecordError, record
from course.submission import build_submission, write_submission
from course_testing import copy_course

A = "03_grad_zeroing"


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    return copy_course(tmp_path_factory.mktemp("record") / "course", with_release=True)


def _rows(course, score: float) -> dict:
    """Rows for every cell the gradebook knows: ``score`` for each grade, no comment."""
    with course.api().gradebook as gb:
        return {
            nb.name: {
                "late_penalty": 0.0,
                "grades": {c.name: score for c in [*nb.grade_cells, *nb.task_cells]},
                "comments": {c.name: None for c in [*nb.solution_cells, *nb.task_cells]},
            }
            for nb in gb.find_assignment(A).notebooks
        }


def _job_done(course, student: str, rows: dict, feedback: dict | None = None) -> JobResult:
    """What a finished job returns: the notebook nbgrader wrote (read-only, as nbgrader makes
    it), its rows and its feedback pages."""
    notebook = (course.root / "release" / A / f"{A}.ipynb").read_bytes()
    pages = feedback if feedback is not None else {f"{A}.html": b"<html></html>"}
    return JobResult(A, student, True, "", pages, None, rows, {f"{A}.ipynb": notebook}, 0o444)


def _hand_in(course, student: str) -> None:
    write_submission(course, student, A, build_submission(course, A, {}))
    folder = course.root / "submitted" / student / A
    (folder / "notes.txt").write_text("the student's own file")
    (folder / "secret.txt").symlink_to(course.root / "source" / A / f"{A}.ipynb")


def test_the_autogrades_arrive_and_what_a_person_entered_stays(course):
    _hand_in(course, "ana")
    rows = _rows(course, 1.0)
    with course.api().gradebook as gb:
        gb.update_or_create_student("ana")
        submission = gb.add_submission(A, "ana", extension=timedelta(days=2))
        notebook = submission.notebooks[0]
        person, other = notebook.grades[0], notebook.grades[1]
        person.manual_score, person.extra_credit = 0.5, 0.25
        notebook.comments[0].manual_comment = "see me"
        notebook.flagged = True
        gb.db.commit()
        person_name, other_name = person.name, other.name
    record(course, course.api(), _job_done(course, "ana", rows))
    with course.api().gradebook as gb:
        submission = gb.find_submission(A, "ana")
        notebook = submission.notebooks[0]
        grades = {g.name: g for g in notebook.grades}
        assert all(g.auto_score == 1.0 for g in grades.values())
        assert (grades[person_name].manual_score, grades[person_name].extra_credit) == (0.5, 0.25)
        assert not grades[person_name].needs_manual_grade, "a person graded it"
        assert grades[other_name].manual_score is None
        assert notebook.comments[0].manual_comment == "see me" and notebook.flagged
        assert submission.extension == timedelta(days=2)
        assert submission.timestamp == datetime(2026, 1, 15, 12, 0)


def test_a_grade_the_tests_could_not_give_is_left_for_a_person(course):
    _hand_in(course, "ben")
    rows = _rows(course, 1.0)
    (notebook,) = rows.values()
    unscored = sorted(notebook["grades"])[0]
    notebook["grades"][unscored] = None
    record(course, course.api(), _job_done(course, "ben", rows))
    with course.api().gradebook as gb:
        grades = {g.name: g for g in gb.find_submission(A, "ben").notebooks[0].grades}
    assert grades[unscored].needs_manual_grade
    assert not any(g.needs_manual_grade for name, g in grades.items() if name != unscored)


def test_the_autograded_folder_holds_what_nbgrader_puts_there_and_no_more(course):
    _hand_in(course, "cleo")
    record(course, course.api(), _job_done(course, "cleo", _rows(course, 0.0)))
    folder = course.root / "autograded" / "cleo" / A
    assert sorted(p.name for p in folder.iterdir()) == [f"{A}.ipynb", "notes.txt", "timestamp.txt"]
    assert (folder / "notes.txt").read_text() == "the student's own file"
    assert all(p.stat().st_mode & 0o777 == 0o444 for p in folder.iterdir()), "as the job's"
    assert not (course.root / ".course" / "recording").exists() or not any(
        (course.root / ".course" / "recording").iterdir()
    ), "nothing half-made is left behind"


@pytest.mark.parametrize(
    "damage",
    ["a cell missing", "a notebook missing", "no notebook file", "a page outside its folder"],
)
def test_a_job_that_does_not_match_the_course_changes_nothing(course, damage):
    dan = "dan-" + damage.replace(" ", "-")
    _hand_in(course, dan)
    record(course, course.api(), _job_done(course, dan, _rows(course, 1.0)))
    before = (course.root / "autograded" / dan / A / f"{A}.ipynb").read_bytes()
    rows = _rows(course, 0.0)
    (notebook,) = rows.values()
    feedback = None
    if damage == "a cell missing":
        notebook["grades"].popitem()
    elif damage == "a notebook missing":
        rows = {}
    elif damage == "a page outside its folder":
        feedback = {f"../../other/{A}/{A}.html": b"forged"}
    result = _job_done(course, dan, rows, feedback)
    if damage == "no notebook file":
        result.autograded.clear()
    with pytest.raises(RecordError):
        record(course, course.api(), result)
    with course.api().gradebook as gb:
        assert all(g.auto_score == 1.0 for g in gb.find_submission(A, dan).notebooks[0].grades)
    assert (course.root / "autograded" / dan / A / f"{A}.ipynb").read_bytes() == before
    # and the grade run reports it as its own failure, the earlier grade kept
    outcome = batch._record(course, course.api(), result)
    assert outcome.status == batch.FAILED and outcome.grader_fault
    assert "could not be recorded" in outcome.detail and "previous grade kept" in outcome.detail
    assert not (course.root / "feedback" / "other").exists()


def test_a_jobs_gradebook_holds_its_own_student_as_people_left_it_and_no_other(course, tmp_path):
    """What a job carries (`gradebook.for_student`): the course's cells, and of the students
    only its own, with what people entered (an extension, a manual score, a comment) that
    nbgrader's late penalty and feedback page read."""
    for student in ("eve", "fay"):
        _hand_in(course, student)
        with course.api().gradebook as gb:
            gb.update_or_create_student(student)
            submission = gb.add_submission(A, student, extension=timedelta(hours=5))
            submission.notebooks[0].grades[0].manual_score = 0.75
            submission.notebooks[0].comments[0].manual_comment = f"well done, {student}"
            gb.db.commit()
    job = tmp_path / "job.db"
    job.write_bytes(gradebook.for_student(course, gradebook.class_free(course, tmp_path), "eve", A))
    with Gradebook(f"sqlite:///{job}") as gb:
        assert [s.id for s in gb.students] == ["eve"]
        (submission,) = gb.assignment_submissions(A)
        assert submission.extension == timedelta(hours=5)
        notebook = submission.notebooks[0]
        assert notebook.grades[0].manual_score == 0.75
        assert notebook.comments[0].manual_comment == "well done, eve"
        assert {nb.name for nb in gb.find_assignment(A).notebooks} == {A}
    assert b"fay" not in job.read_bytes(), "nothing of another student, not even a free page"
