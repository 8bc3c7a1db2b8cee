"""Record a finished job in the real course: its gradebook rows and its autograded notebooks.

Runs in: the grader (the instructor's `python -m course` process), the one step that writes the
course's gradebook.

A job ran nbgrader's own autograde (its preprocessors, scoring and late penalty) in a scratch
course whose gradebook holds the course's assignments and no student but its own. What
autograde writes for a submission is a few automatic fields: each grade's ``auto_score``, each
comment's ``auto_comment``, each notebook's ``late_submission_penalty``, the submission's
timestamp. The job reads them back, with the autograded notebooks and feedback pages, as plain
data (`course.grading.jobs.job_rows`); the grader's one process copies exactly those into
the real gradebook (`record`), one submission at a time, and leaves every field a person enters
(manual scores and comments, extra credit, flags, extensions) as the real gradebook has it.
Running nbgrader's whole autograde a second time here, as the grader used to, cost half a second
of CPU per submission in one serial process: a cap on any number of workers.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from nbgrader.utils import find_all_files

from . import handin
from .coursedir import Course
from .jobs import JobResult


class RecordError(Exception):
    """The job's rows or notebooks do not match the course: nothing is guessed, nothing kept."""


def record(course: Course, api, result: JobResult) -> None:
    """Put a finished job's autograded notebooks in the course and its rows in the gradebook.
    Raises `RecordError`, with nothing changed, when they do not match the course."""
    rows = result.rows or {}
    _check_paths(result.feedback or {})
    submitted = course.root / "submitted" / result.student / result.assignment
    timestamp = handin.timestamp(submitted)  # checked before the job: a link or junk fails it
    with api.gradebook as gb:
        cells = {
            notebook.name: (
                {cell.name for cell in [*notebook.grade_cells, *notebook.task_cells]},
                {cell.name for cell in [*notebook.solution_cells, *notebook.task_cells]},
            )
            for notebook in gb.find_assignment(result.assignment).notebooks
        }
        graded = {name: (set(got["grades"]), set(got["comments"])) for name, got in rows.items()}
        if graded != cells:  # e.g. the source was released again while this run graded
            raise RecordError("the job's notebooks and cells are not the gradebook's")
        _install_notebooks(course, api, result)
        # nbgrader's own calls, as its autograde makes them: they create a new student's rows
        gb.update_or_create_student(result.student)
        submission = gb.update_or_create_submission(
            result.assignment, result.student, **({"timestamp": timestamp} if timestamp else {})
        )
        for notebook in submission.notebooks:
            got = rows[notebook.name]
            notebook.late_submission_penalty = got["late_penalty"]
            for grade in notebook.grades:
                grade.auto_score = got["grades"][grade.name]
                # autograde flags a grade for review when a person scored it or the tests could
                # not; one a person has scored is graded, so only a grade nobody gave needs one
                grade.needs_manual_grade = grade.manual_score is None and grade.auto_score is None
            for comment in notebook.comments:
                comment.auto_comment = got["comments"][comment.name]
        gb.db.commit()


def _install_notebooks(course: Course, api, result: JobResult) -> None:
    """Make ``autograded/<student>/<assignment>/`` what nbgrader's autograde would: the job's
    autograded notebooks, beside the submission's other files and then the source's (which
    win), with the permissions the job's nbgrader gave its notebooks. Links are never
    followed: one could point at the source or at a classmate's work."""
    dest = course.root / "autograded" / result.student / result.assignment
    staging = course.root / ".course" / "recording" / f"{result.assignment}--{result.student}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    source = course.root / "source" / result.assignment
    made = result.autograded or {}
    for name in sorted(path.name for path in source.glob("*.ipynb")):
        if name not in made:
            shutil.rmtree(staging)
            raise RecordError(f"the job left no autograded {name}")
        (staging / name).write_bytes(made[name])
        os.chmod(staging / name, result.mode)
    ignore = list(api.coursedir.ignore) + ["*.ipynb"]
    kept = api.config.Autograde.get("exclude_overwriting", {}).get(result.assignment, [])
    submitted = course.root / "submitted" / result.student / result.assignment
    for folder, skip in ((submitted, []), (source, kept)):
        for found in find_all_files(str(folder), ignore):
            path, relative = Path(found), Path(found).relative_to(folder)
            if path.is_symlink() or not path.is_file() or str(relative) in skip:
                continue
            target = staging / relative
            target.parent.mkdir(parents=True, exist_ok=True)
            target.unlink(missing_ok=True)
            shutil.copyfile(path, target)
            os.chmod(target, result.mode)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)


def _check_paths(files: dict[str, bytes]) -> None:
    """Refuse a job's file whose path would leave the folder it is written in."""
    for relative in files:
        parts = Path(relative).parts
        if not parts or Path(relative).is_absolute() or ".." in parts:
            raise RecordError(f"the job returned a file outside its folder: {relative[:100]!r}")


def install_files(files: dict[str, bytes], dest: Path) -> None:
    """Write a recorded job's ``files`` (relative path -> content) as the folder ``dest``,
    replacing it."""
    staging = dest.with_name(f".{dest.name}.recording")
    shutil.rmtree(staging, ignore_errors=True)
    for relative, data in files.items():
        (staging / relative).parent.mkdir(parents=True, exist_ok=True)
        (staging / relative).write_bytes(data)
    staging.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        shutil.rmtree(dest)
    os.replace(staging, dest)
