"""Files the grader shares between runs (the reference's records, a zygote's prefix, the resume
state) are written whole or not at all (course.grading.atomic)."""

from __future__ import annotations

import pytest

from course.grading import atomic


def test_a_write_replaces_the_file_whole_and_leaves_nothing_beside_it(tmp_path):
    path = tmp_path / "records.json"
    atomic.write_text(path, "old")
    atomic.write_text(path, "new")
    assert path.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["records.json"]


def test_a_write_that_fails_keeps_the_old_content_and_leaves_no_partial_file(tmp_path):
    path = tmp_path / "records.json"
    atomic.write_text(path, "old")
    with pytest.raises(TypeError):
        atomic.write_text(path, b"not text")  # fails while writing, after the file was made
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["records.json"]
