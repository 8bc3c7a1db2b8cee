"""Hidden inputs drawn per submission (course.grading.draws): the same for a regrade of the same
hand-in, others for another student, assignment, notebook or hand-in time, and unknown to
whoever lacks the course's secret."""

from __future__ import annotations

import datetime

from course.grading import draws

WHEN = datetime.datetime(2027, 1, 15, 12, 0)
NOTEBOOKS = {"a.ipynb": b'{"cells": []}'}


def _draw(**changes) -> int:
    parts = dict(secret=b"s", student="ada", assignment="01", notebooks=NOTEBOOKS, timestamp=WHEN)
    return draws.submission_draw(**{**parts, **changes})


def test_a_regrade_draws_the_same_inputs_and_anything_else_others():
    first = _draw()
    assert first == _draw() and first > 0
    others = [
        _draw(secret=b"t"),
        _draw(student="ben"),
        _draw(assignment="02"),
        _draw(notebooks={"a.ipynb": b'{"cells": [1]}'}),  # answers pasted into the same hand-in
        _draw(timestamp=WHEN + datetime.timedelta(seconds=1)),
        _draw(timestamp=None),
    ]
    assert len({first, *others}) == len(others) + 1


def test_a_hand_in_time_means_the_same_whatever_its_time_zone():
    aware = WHEN.replace(tzinfo=datetime.timezone.utc)
    assert _draw(timestamp=aware) == _draw()
    east = aware.astimezone(datetime.timezone(datetime.timedelta(hours=2)))
    assert _draw(timestamp=east) == _draw()


def test_the_secret_is_made_once_and_kept(tmp_path):
    secret = draws.course_secret(tmp_path)
    assert len(secret) == 64 and draws.course_secret(tmp_path) == secret
    assert (tmp_path / draws.SECRET).stat().st_mode & 0o077 == 0, "readable by its owner only"
