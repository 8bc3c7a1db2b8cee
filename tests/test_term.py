"""nbgrader's exchange round trip in a temporary directory, for two students, with our grading."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import nbformat

from course.submission import build_submission, reference_answers
from course_testing import copy_course

ASSIGNMENT = "01_requires_grad"


def nbgrader(*args, cwd: Path, home: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    if home:
        env["HOME"] = str(home)
    run = subprocess.run(
        [sys.executable, "-m", "nbgrader", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{run.stdout}\n{run.stderr}"
    return run


def test_release_fetch_submit_collect_grade_feedback_round_trip(tmp_path):
    course = copy_course(tmp_path / "course")
    exchange = course.root / "exchange"
    run = subprocess.run(
        [sys.executable, "-m", "course", "release", ASSIGNMENT],
        cwd=course.root,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr
    nbgrader("release_assignment", ASSIGNMENT, cwd=course.root)

    answers = {"alice": reference_answers(course, ASSIGNMENT), "bob": {}}

    def student_opts(s):
        return [
            "--course",
            "autograd-course",
            f"--Exchange.root={exchange}",
            f"--Exchange.cache={tmp_path / s / '.cache'}",
        ]

    for student, answer in answers.items():
        home = tmp_path / student
        home.mkdir()
        nbgrader("fetch_assignment", ASSIGNMENT, *student_opts(student), cwd=home, home=home)
        fetched = home / ASSIGNMENT / f"{ASSIGNMENT}.ipynb"
        assert fetched.is_file()
        nbformat.write(build_submission(course, ASSIGNMENT, answer), fetched)
        nbgrader(
            "submit", ASSIGNMENT, "--student", student, *student_opts(student), cwd=home, home=home
        )

    nbgrader("collect", ASSIGNMENT, cwd=course.root)
    assert {p.name for p in (course.root / "submitted").iterdir()} == {"alice", "bob"}

    run = subprocess.run(
        [sys.executable, "-m", "course", "grade", ASSIGNMENT],
        cwd=course.root,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr
    rows = {
        line.split()[1]: line.split()
        for line in run.stdout.splitlines()
        if line.startswith(ASSIGNMENT)
    }
    earned, available = rows["alice"][3].split("/")
    assert rows["alice"][2] == "graded" and earned == available
    assert rows["bob"][2] == "graded" and rows["bob"][3].startswith("0/")

    nbgrader("release_feedback", ASSIGNMENT, cwd=course.root)
    for student in answers:
        home = tmp_path / student
        nbgrader(
            "fetch_feedback",
            ASSIGNMENT,
            "--student",
            student,
            *student_opts(student),
            cwd=home,
            home=home,
        )
        pages = list((home / ASSIGNMENT / "feedback").glob(f"*/{ASSIGNMENT}.html"))
        assert len(pages) == 1, f"{student} got no feedback"
        assert "BEGIN HIDDEN TESTS" not in pages[0].read_text()
