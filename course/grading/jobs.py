"""Grading one submission as a self-contained job, so many can run at once (or on other machines).

Runs in: a worker (a job is built by the grader, as plain data).

A job gets the course's config, one assignment's source, a snapshot of the gradebook and one
student's submission, and runs nbgrader's own autograde and feedback on them in a private scratch
course. It leaves the autograded notebooks there and returns the rows autograde wrote (plain
data) and where the feedback pages are. The caller then records them in the one real course
(`course.grading.record`), so the gradebook is only ever written from one process.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from . import handin
from .coursedir import CONFIG_FILE, Course
from .execute import GraderTrouble


@dataclass(frozen=True)
class Job:
    course_root: Path
    assignment: str
    student: str
    gradebook: Path  # a snapshot of the course gradebook, copied, never written
    workdir: Path  # the job's own scratch course is made under it
    warm_dir: Path | None = None  # zygotes to fork kernels from (`course.grading.warm`); None: cold
    draw: int = 0  # the submission's hidden inputs (`course.grading.draws`); 0: the instructor's


@dataclass(frozen=True)
class JobResult:
    assignment: str
    student: str
    ok: bool
    log: str  # nbgrader's log and traceback, for the failure reason
    feedback: Path | None  # <scratch>/feedback/<student>/<assignment>, None if not written
    failure: str | None = None  # the grader's own trouble, not the submission's: retried
    rows: dict | None = None  # what autograde wrote in the scratch gradebook (`job_rows`)


def scratch_dir(workdir: Path, assignment: str, student: str) -> Path:
    """The private course in which one submission is graded."""
    return Path(workdir) / f"{assignment}--{student}"


def prepare(job: Job) -> Course:
    """Lay out the job's scratch course: config, source, gradebook snapshot, the submission."""
    scratch = scratch_dir(job.workdir, job.assignment, job.student)
    if scratch.exists():
        shutil.rmtree(scratch)
    (scratch / "source").mkdir(parents=True)
    shutil.copy2(job.course_root / CONFIG_FILE, scratch / CONFIG_FILE)
    shutil.copytree(
        job.course_root / "source" / job.assignment, scratch / "source" / job.assignment
    )
    course = Course.at(scratch)
    shutil.copy2(job.gradebook, course.gradebook)
    # Only the assignment's notebooks and nbgrader's own files (the submission time, the secret
    # release_feedback checks): a student's torch.py (or any other file) never lands beside the
    # notebook, where the kernel would import it instead of the real one.
    wanted = {p.name for p in (scratch / "source" / job.assignment).glob("*.ipynb")}
    wanted |= {handin.TIMESTAMP, handin.SECRET}
    submitted = job.course_root / "submitted" / job.student / job.assignment
    copy = scratch / "submitted" / job.student / job.assignment
    copy.mkdir(parents=True)
    for name in sorted(wanted):  # checked by the grader before the job (`handin.check`)
        path = submitted / name
        if path.is_file() and not path.is_symlink():  # a link could point at anything
            (copy / name).write_bytes(handin.read_bytes(path, handin.NOTEBOOK_LIMIT))
    return course


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


def run_job(job: Job) -> JobResult:
    """Autograde and write feedback for one submission in its scratch course."""
    course = prepare(job)
    warm = {"warm_dir": str(job.warm_dir)} if job.warm_dir else {}
    api = course.api(course_root=str(job.course_root), draw=job.draw, **warm)
    result = api.autograde(job.assignment, job.student, force=True, create=True)
    log = f"{result.get('log', '')}\n{result.get('error') or ''}"
    if not result["success"]:
        # Only the grader's own steps raise it, for trouble that is not the submission's.
        found = re.search(rf"{GraderTrouble.__name__}: (.+)", log)
        trouble = f"the grading kernel: {found[1][:200]}" if found else None
        return JobResult(job.assignment, job.student, False, log, None, trouble)
    rows = job_rows(api, job.assignment, job.student)
    feedback = api.generate_feedback(job.assignment, job.student, force=True)
    pages = course.root / "feedback" / job.student / job.assignment
    done = pages if feedback["success"] else None
    return JobResult(job.assignment, job.student, True, log, done, rows=rows)
