"""JupyterLab on the course: `make lab` and the browser tests start it the same way.

Runs in: the grader (the instructor's `python -m course` process); it starts JupyterLab.

Lab's root is the course root, where formgrader finds nbgrader_config.py and the gradebook, and
it opens on the first student notebook. As root (a container, Binder's build) it needs
``--allow-root``; as a user that flag does nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from .grading import gradebook
from .grading.coursedir import Course, exchange_root


def first_notebook(course: Course) -> str:
    """The first assignment's notebook in release/, relative to the course root."""
    first = course.assignments[0]
    return f"release/{first}/{first}.ipynb"


def lab_command(course: Course, *options: str) -> list[str]:
    """The command line that serves ``course`` in JupyterLab (``options`` are added)."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={course.root}",
        f"--LabApp.default_url=/lab/tree/{first_notebook(course)}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
        *options,
    ]


def lab_environment() -> dict[str, str]:
    """This environment with the venv's bin/ first on PATH: formgrader's gradebook runs the
    ``alembic`` command it finds there."""
    bindir = str(Path(sys.executable).parent)
    return {**os.environ, "PATH": os.pathsep.join([bindir, os.environ.get("PATH", os.defpath)])}


def run_lab(course: Course, options: list[str]) -> None:
    """Become JupyterLab on the course, with JupyterLab's ``options``: the configured exchange
    made first (formgrader warns without it), and the course marked as served by a lab while
    it runs (`course.grading.gradebook.hold_for_lab`: restore waits for it to end)."""
    exchange_root(course.config()).mkdir(parents=True, exist_ok=True)
    gradebook.hold_for_lab(course)
    command = lab_command(course, *options)
    os.chdir(course.root)
    os.execve(command[0], command, lab_environment())
