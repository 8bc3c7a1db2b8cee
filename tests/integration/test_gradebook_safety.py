"""The gradebook is the only copy of every manual score and comment: a damaged one is refused with
one line (and nothing is written from it), a copy is kept before every command that writes it,
`restore` puts one back, and one command at a time writes it."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from course.grading import gradebook
from course.grading.coursedir import Course
from course_testing import venv_env

SHEET = "assignment,student,score\n01_requires_grad,ada,17\n"  # what grades/ held before


@pytest.fixture
def course(released_course, tmp_path) -> Course:
    """A copy of a released course (its gradebook knows the assignments), with an earlier grade
    sheet in grades/ and a graded notebook in autograded/."""
    root = tmp_path / "course"
    shutil.copytree(released_course.root, root, symlinks=True)
    (root / "grades").mkdir(exist_ok=True)
    (root / "grades" / "grades.csv").write_text(SHEET)
    return Course.at(root)


def _cli(course: Course, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        cwd=course.root,
        env=venv_env(),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _graded_once(course: Course) -> None:
    folder = course.root / "autograded" / "ada" / "01_requires_grad"
    folder.mkdir(parents=True)
    (folder / "01_requires_grad.ipynb").write_text("{}")


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _truncated(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 3])


def _pages_overwritten(path: Path) -> None:
    data = bytearray(path.read_bytes())
    page = 4096
    for start in range(2 * page, min(len(data), 6 * page), page):
        data[start + 8 : start + page] = b"\xff" * (page - 8)
    path.write_bytes(bytes(data))


def _not_sqlite(path: Path) -> None:
    path.write_text("id,score\nada,17\n")


def _foreign(path: Path) -> None:
    path.unlink()
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text)")


@pytest.mark.parametrize(
    "damage, says",
    [
        (_empty, "is empty (0 bytes)"),
        (_truncated, "is damaged (SQLite:"),
        (_pages_overwritten, "is damaged (SQLite:"),
        (_not_sqlite, "is not an SQLite database"),
        (_foreign, "is not an nbgrader gradebook"),
    ],
    ids=["empty", "truncated", "partly damaged", "not sqlite", "not nbgrader's"],
)
@pytest.mark.parametrize("command", ["export", "grade 01_requires_grad", "feedback 02_backward"])
def test_a_damaged_gradebook_is_refused_with_one_line_and_nothing_written(
    course, damage, says, command
):
    damage(course.gradebook)
    before = course.gradebook.read_bytes()
    done = _cli(course, *command.split())
    assert done.returncode == 3, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert says in line and "restore" in line, line
    assert "Traceback" not in done.stdout + done.stderr
    assert course.gradebook.read_bytes() == before
    assert (course.root / "grades" / "grades.csv").read_text() == SHEET
    assert sorted(p.name for p in (course.root / "grades").iterdir()) == ["grades.csv"]


def test_a_sound_gradebook_passes_the_check(course):
    gradebook.check(course)  # the known-good case of the checks above
    assert _cli(course, "export").returncode == 0


def test_a_missing_or_replaced_gradebook_is_refused_once_work_was_graded(course, tmp_path):
    shutil.copy2(course.gradebook, tmp_path / "released.db")
    gradebook.check(course)  # no graded work yet: a new gradebook is normal
    _graded_once(course)
    with pytest.raises(gradebook.GradebookDamaged, match="has no submissions"):
        gradebook.check(course)  # a gradebook with no submissions beside graded work
    course.gradebook.unlink()
    done = _cli(course, "export")
    assert done.returncode == 3 and "is missing, but autograded/ holds 1" in done.stderr
    assert not course.gradebook.exists()  # nbgrader was not let to make an empty one


def test_every_writing_command_keeps_a_backup_and_restore_puts_it_back(course):
    with sqlite3.connect(course.gradebook) as db:
        db.execute("INSERT INTO student (id) VALUES ('kept_student')")
    done = _cli(course, "export")
    assert done.returncode == 0, done.stdout + done.stderr
    (copy,) = gradebook.backups(course)
    assert copy.name.endswith("-export.db")
    assert _cli(course, "export").returncode == 0
    assert gradebook.backups(course) == [copy]  # nothing changed: no second copy of the same
    _empty(course.gradebook)
    listed = _cli(course, "restore", "--list")
    assert listed.returncode == 0 and listed.stdout.split() == [copy.name]
    done = _cli(course, "restore")
    assert done.returncode == 0, done.stdout + done.stderr
    with sqlite3.connect(course.gradebook) as db:
        assert db.execute("SELECT id FROM student WHERE id = 'kept_student'").fetchall()
    (replaced,) = (course.root / ".course" / "backups").glob("replaced-*.db")
    assert replaced.stat().st_size == 0  # the gradebook it replaced is kept, never lost
    assert _cli(course, "export").returncode == 0


def test_backups_rotate_and_a_named_one_can_be_restored(course, monkeypatch):
    monkeypatch.setattr(gradebook, "KEEP", 3)
    made = []
    for n in range(5):
        with sqlite3.connect(course.gradebook) as db:
            db.execute(f"INSERT INTO student (id) VALUES ('s{n}')")
        made.append(gradebook.backup(course, "test"))
    assert gradebook.backups(course) == made[:1:-1]  # the newest three
    gradebook.restore(course, made[2].name)
    with sqlite3.connect(course.gradebook) as db:
        ids = {row[0] for row in db.execute("SELECT id FROM student")}
    assert {"s0", "s1", "s2"} <= ids and "s3" not in ids
    with pytest.raises(gradebook.GradebookDamaged, match="no backup named nope"):
        gradebook.restore(course, "nope")


def test_a_second_run_on_the_same_course_is_refused_while_the_first_holds_it(course):
    with gradebook.exclusive(course, "grade"):
        done = _cli(course, "grade", "01_requires_grad")
        assert done.returncode == 3, done.stdout + done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert f"another run is in progress on this course (`grade`, pid {os.getpid()}" in line
        assert (course.root / "grades" / "grades.csv").read_text() == SHEET
    assert _cli(course, "export").returncode == 0  # released when the holder ends


def test_restore_list_only_reads_so_it_answers_during_a_run(course):
    kept = gradebook.backup(course, "test")
    with gradebook.exclusive(course, "grade"):
        listed = _cli(course, "restore", "--list")
        assert listed.returncode == 0, listed.stdout + listed.stderr
        assert listed.stdout.split() == [kept.name]
        refused = _cli(course, "restore")  # the known-bad case: restoring writes
        assert refused.returncode == 3 and "another run is in progress" in refused.stderr
