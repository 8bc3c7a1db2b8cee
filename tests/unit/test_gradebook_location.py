"""A course folder may be named as people name folders: the gradebook nbgrader writes, and the one
`course` reads, is the folder's own `gradebook.db`, whatever characters its path holds."""

from __future__ import annotations

import shutil
import sqlite3

import pytest
from nbgrader.coursedir import CourseDirectory
from sqlalchemy.engine import make_url

from course.grading.coursedir import CONFIG_FILE, Course, read_only
from course_testing import REPO

PLAIN = ["course", "CS 101 #2 (term 2)", "Kurs Übung; a+b=c & d"]
URL_CHARACTERS = ["CS 101 ?50%", "done %41", "what?"]


@pytest.mark.parametrize("name", PLAIN + URL_CHARACTERS)
def test_nbgrader_writes_the_gradebook_in_the_course_folder(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    shutil.copy(REPO / CONFIG_FILE, folder / CONFIG_FILE)
    (folder / "source").mkdir()
    url = CourseDirectory(config=Course.at(folder).config()).db_url
    gradebook = str(folder / "gradebook.db")
    assert make_url(url).database == gradebook  # the file nbgrader's Gradebook opens
    if name in PLAIN:  # nbgrader's own URL, which `nbgrader db upgrade` reads as a path
        assert url == f"sqlite:///{gradebook}"


@pytest.mark.parametrize("name", PLAIN + URL_CHARACTERS)
def test_the_gradebook_is_read_in_the_course_folder(tmp_path, name):
    folder = tmp_path / name
    folder.mkdir()
    with sqlite3.connect(folder / "gradebook.db") as db:
        db.execute("CREATE TABLE student (id TEXT)")
    with read_only(folder / "gradebook.db") as db:
        assert db.execute("SELECT count(*) FROM student").fetchone() == (0,)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name], "nothing made beside it"
