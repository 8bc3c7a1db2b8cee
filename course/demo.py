"""The main job: release, autograde, feedback and export for a fictional class, in a scratch
copy.

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from . import release, report
from .grading import batch
from .grading.coursedir import CONFIG_FILE, Course
from .progress import Progress
from .submission import (
    answer_file,
    answer_names,
    build_submission,
    reference_answers,
    write_submission,
)

# Who is in the demo class and what each one hands in.
DEMO_CLASS = {
    "ada": "perfect: the reference solution everywhere",
    "ben": "typical mistakes: a known misconception for every exercise",
    "cleo": "alternative solutions: correct, but written differently from the reference",
    "dan": "empty: handed in the release notebooks untouched",
    "eva": "broken: a notebook that is no longer valid JSON",
    "finn": "absent: handed in only the first assignment",
}


def _answers(course: Course, assignment: str, prefix: str) -> dict[str, str]:
    """For each exercise with answer files, the first one whose name starts with ``prefix``."""
    chosen = {}
    for exercise in reference_answers(course, assignment):
        names = [n for n in answer_names(course, assignment, exercise) if n.startswith(prefix)]
        if names:
            chosen[exercise] = answer_file(course, assignment, exercise, names[0])
    return chosen


def hand_in(course: Course, student: str, assignment: str) -> None:
    """Write what ``student`` of the demo class submits for ``assignment`` (maybe nothing)."""
    if student == "finn" and assignment != course.assignments[0]:
        return
    if student in ("ada", "finn"):
        answers = reference_answers(course, assignment)
    elif student == "ben":
        answers = _answers(course, assignment, "wrong_")
    elif student == "cleo":
        answers = {
            **reference_answers(course, assignment),
            **_answers(course, assignment, "correct_"),
        }
    else:
        answers = {}
    path = write_submission(
        course, student, assignment, build_submission(course, assignment, answers)
    )
    if student == "eva":
        text = path.read_text()
        path.write_text(text[: len(text) // 2])  # cut mid-file, as a crashed save would


def make_scratch_course(repo: Course, scratch: Path) -> Course:
    """Copy the course's source and answer fixtures into an empty scratch directory."""
    if scratch.exists():
        shutil.rmtree(scratch)
    scratch.mkdir(parents=True)
    shutil.copy2(repo.root / CONFIG_FILE, scratch / CONFIG_FILE)
    shutil.copytree(repo.root / "source", scratch / "source")
    shutil.copytree(repo.root / "fixtures", scratch / "fixtures")
    return Course.at(scratch)


def run_demo(
    repo: Course, scratch: Path, log=print, bar: Progress | None = None
) -> list[batch.Outcome]:
    """Release, hand in for the demo class, grade (with `grade`'s progress bar, ``bar``), and
    report where everything went; the last line counts the statuses, as `grade` does."""
    course = make_scratch_course(repo, scratch)
    log(f"Scratch course: {course.root}")
    log("Releasing the assignments (each reference solution runs its hidden tests once)")
    assignments = release.release(course, [])
    log(f"Released {len(assignments)} assignments to {course.root / 'release'}")
    for student, what in DEMO_CLASS.items():
        log(f"  {student:5} {what}")
        for assignment in assignments:
            hand_in(course, student, assignment)
    bar = bar or Progress()
    outcomes = batch.grade(  # the demo's hand-ins are the course's own answers: no sandbox needed
        course,
        assignments,
        DEMO_CLASS,
        workers=os.cpu_count() or 1,
        allow_unsandboxed=True,
        **bar.callbacks(),
    )
    bar.close()
    log("")
    report.publish(course, outcomes, course.root / "grades", log)
    log(batch.summary(outcomes))
    return outcomes
