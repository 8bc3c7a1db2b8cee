"""Grading one submission as a self-contained job, so many can run at once, here or on other
machines that share no folder with the course.

Runs in: the grader (`pack`) and a worker (`run_job`): what passes between them is plain data.

The grader packs a job (`Parcel`): the course's config, one assignment's source, a gradebook that
holds no student but this one (`course.grading.gradebook.for_student`), that one student's
hand-in, and the reference's records for that submission's draw alone. A worker lays them out as
a scratch course in a folder of its own, runs nbgrader's own autograde and feedback there, and
returns what they wrote as data (`JobResult`): the rows autograde wrote, the autograded
notebooks, the feedback pages. The grader then records them in the one real course
(`course.grading.record`), so the gradebook is only ever written from one process. No path of
the instructor's crosses: a worker needs no view of the course folder.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

from . import handin, reference, warm
from .coursedir import CONFIG_FILE, Course
from .execute import GraderTrouble

GRADEBOOK = "gradebook.db"


@dataclass(frozen=True)
class Job:
    """One submission to grade, as the grader decides it (the parcel carries its data)."""

    assignment: str
    student: str
    draw: int = 0  # the submission's hidden inputs (`course.grading.draws`); 0: the instructor's
    warm: bool = True  # fork its kernels from the worker's zygotes (`course.grading.warm`)


@dataclass(frozen=True)
class Parcel:
    """A job with everything a worker needs to grade it, as data."""

    job: Job
    files: dict[str, bytes]  # the scratch course's files by relative path
    expected: dict[str, dict[str, list]]  # notebook -> grade id -> the reference's records


@dataclass(frozen=True)
class JobResult:
    assignment: str
    student: str
    ok: bool
    log: str  # nbgrader's log and traceback, for the failure reason
    feedback: dict[str, bytes] | None  # the feedback folder's files by relative path, if written
    failure: str | None = None  # the grader's own trouble, not the submission's: retried
    rows: dict | None = None  # what autograde wrote in the scratch gradebook (`job_rows`)
    autograded: dict[str, bytes] | None = None  # notebook file name -> what autograde wrote
    mode: int = 0o444  # the permissions nbgrader gave the autograded notebooks


def _folder_files(folder: Path, prefix: str = "") -> dict[str, bytes]:
    """Every regular file under ``folder`` (no link followed), by ``prefix`` + its path there."""
    return {
        prefix + path.relative_to(folder).as_posix(): path.read_bytes()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink()
    }


def pack(course: Course, job: Job, gradebook: bytes) -> Parcel:
    """The parcel of ``job``: read in the grader, from the course folder."""
    sources = course.root / "source" / job.assignment
    files = {CONFIG_FILE: (course.root / CONFIG_FILE).read_bytes(), GRADEBOOK: gradebook}
    files |= _folder_files(sources, f"source/{job.assignment}/")
    # Only the assignment's notebooks and nbgrader's own files (the submission time, the secret
    # release_feedback checks): a student's torch.py (or any other file) never lands beside the
    # notebook, where the kernel would import it instead of the real one.
    notebooks = sorted(sources.glob("*.ipynb"))
    wanted = [p.name for p in notebooks] + [handin.TIMESTAMP, handin.SECRET]
    submitted = course.root / "submitted" / job.student / job.assignment
    for name in wanted:  # checked by the grader before the job (`handin.check`)
        path = submitted / name
        if path.is_file() and not path.is_symlink():  # a link could point at anything
            data = handin.read_bytes(path, handin.NOTEBOOK_LIMIT)
            files[f"submitted/{job.student}/{job.assignment}/{name}"] = data
    cache = reference.cache_dir(course.root, job.assignment)
    expected = {p.stem: reference.records(p, cache, [job.draw])[job.draw] for p in notebooks}
    return Parcel(job, files, expected)


def job_rows(api, assignment: str, student: str) -> dict:
    """What autograde wrote for one submission in a (scratch) gradebook, as plain data:
    ``{notebook: {"late_penalty": float|None, "grades": {cell: score|None},
    "comments": {cell: text|None}}}``."""
    with api.gradebook as gb:
        submission = gb.find_submission(assignment, student)
        return {
            notebook.name: {
                "late_penalty": notebook.late_submission_penalty,
                "grades": {grade.name: grade.auto_score for grade in notebook.grades},
                "comments": {comment.name: comment.auto_comment for comment in notebook.comments},
            }
            for notebook in submission.notebooks
        }


def _lay_out(parcel: Parcel, root: Path) -> Course:
    """Write the parcel's files as a scratch course at ``root``."""
    for relative, data in parcel.files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return Course.at(root)


def run_job(parcel: Parcel) -> JobResult:
    """Autograde and write feedback for one submission in a scratch course of its own."""
    job = parcel.job
    with tempfile.TemporaryDirectory(prefix="course-job-") as folder:
        course = _lay_out(parcel, Path(folder) / "course")
        zygotes = warm.zygote_dir() if job.warm else None
        api = course.api(
            course_root=str(course.root),
            draw=job.draw,
            expected=parcel.expected,
            **({"warm_dir": str(zygotes)} if zygotes else {}),
        )
        result = api.autograde(job.assignment, job.student, force=True, create=True)
        log = f"{result.get('log', '')}\n{result.get('error') or ''}"
        if not result["success"]:
            # Only the grader's own steps raise it, for trouble that is not the submission's.
            found = re.search(rf"{GraderTrouble.__name__}: (.+)", log)
            trouble = f"the grading kernel: {found[1][:200]}" if found else None
            return JobResult(job.assignment, job.student, False, log, None, trouble)
        rows = job_rows(api, job.assignment, job.student)
        made = course.root / "autograded" / job.student / job.assignment
        notebooks = {p.name: p.read_bytes() for p in sorted(made.glob("*.ipynb"))}
        mode = min((p.stat().st_mode & 0o777 for p in made.glob("*.ipynb")), default=0o444)
        feedback = api.generate_feedback(job.assignment, job.student, force=True)
        pages = course.root / "feedback" / job.student / job.assignment
        written = _folder_files(pages) if feedback["success"] else None
        return JobResult(
            job.assignment, job.student, True, log, written, None, rows, notebooks, mode
        )
