"""Shared fixtures: scratch copies of the course, so tests never touch the repository's state."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from course.coursedir import CONFIG_FILE, Course
from course import release

REPO = Path(__file__).resolve().parents[1]

# The graded exercises fixed by ../shared/exercise-contract.md (a public API).
CONTRACT = {
    "01_requires_grad": ["make_trainable", "leaf_inputs", "freeze_all_but"],
    "02_backward": ["derivative_at", "vjp", "second_derivative"],
    "03_grad_zeroing": ["grad_history", "train_step", "accumulation_step", "zero_grads",
                        "grad_report"],
    "04_no_grad": ["predict", "sgd_update", "evaluate"],
}


def copy_course(dest: Path, with_release: bool = False) -> Course:
    """A scratch course directory with the repo's config, sources and answer fixtures, released
    when asked."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / CONFIG_FILE, dest / CONFIG_FILE)
    shutil.copytree(REPO / "source", dest / "source")
    shutil.copytree(REPO / "fixtures", dest / "fixtures")
    course = Course.at(dest)
    if with_release:  # regenerated, so the scratch gradebook knows the assignments' cells
        release.release(course, [])
    return course


@pytest.fixture(scope="session")
def repo_course() -> Course:
    return Course.at(REPO)


@pytest.fixture(scope="session")
def released_course(tmp_path_factory) -> Course:
    """A scratch course released afresh by nbgrader (shared, read-only for tests)."""
    return copy_course(tmp_path_factory.mktemp("released"), with_release=True)
