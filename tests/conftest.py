"""Shared fixtures: scratch copies of the course, so tests never touch the repository's state."""

from __future__ import annotations

import pytest

from course.grading import shell_wakeup
from course.grading.coursedir import Course
from course_testing import REPO, copy_course

shell_wakeup.install()  # the notebooks these tests run with nbclient (issue 38)


@pytest.fixture(scope="session")
def repo_course() -> Course:
    return Course.at(REPO)


@pytest.fixture(scope="session")
def released_course(tmp_path_factory) -> Course:
    """A scratch course released afresh by nbgrader (shared, read-only for tests)."""
    return copy_course(tmp_path_factory.mktemp("released"), with_release=True)
