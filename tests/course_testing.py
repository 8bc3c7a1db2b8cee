"""What the tests share: the repository's path, the exercise contract, scratch course copies.

(A module of its own, not conftest.py: tests/browser has a conftest of its own, and two modules
named `conftest` cannot both be imported by name.)
"""
from __future__ import annotations

import shutil
from pathlib import Path

from course import release
from course.grading.coursedir import CONFIG_FILE, Course

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
