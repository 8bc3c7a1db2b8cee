"""Record a job's grades in the real gradebook by running nbgrader's autograde without a kernel.

`ReplayOutputs` takes the place of nbgrader's `Execute` preprocessor: instead of running the
notebook, it copies the outputs that the job's kernel produced. Everything else (sanitizing,
restoring locked cells, scoring, late penalties, the gradebook rows) is nbgrader's own code, so
the gradebook ends up exactly as a sequential `nbgrader autograde` would leave it.
"""

from __future__ import annotations

from pathlib import Path

import nbformat
from nbgrader.converters import Autograde
from nbgrader.preprocessors import Execute, NbGraderPreprocessor
from traitlets import Unicode
from traitlets.utils.importstring import import_item

from .coursedir import Course
from .jobs import scratch_dir


def executed_notebook(workdir: Path, assignment: str, student: str, notebook: str) -> Path:
    """Where a job (see `course.grading.jobs`) leaves the executed copy of one notebook."""
    return (
        scratch_dir(workdir, assignment, student)
        / "autograded"
        / student
        / assignment
        / f"{notebook}.ipynb"
    )


class ReplayError(Exception):
    """The executed notebook does not match the one nbgrader prepared: never guess, fail."""


class ReplayOutputs(NbGraderPreprocessor):
    workdir = Unicode(help="the folder holding the jobs' scratch courses").tag(config=True)

    def preprocess(self, nb, resources):
        info = resources["nbgrader"]
        path = executed_notebook(
            Path(self.workdir), info["assignment"], info["student"], info["notebook"]
        )
        executed = nbformat.read(path, as_version=nbformat.NO_CONVERT)
        if [c.source for c in executed.cells] != [c.source for c in nb.cells]:
            raise ReplayError(f"{path} does not match the prepared notebook")
        for cell, done in zip(nb.cells, executed.cells):
            if cell.cell_type == "code":
                cell.outputs = done.outputs
                cell.execution_count = done.execution_count
        for key in ("language_info", "course"):
            if key in executed.metadata:
                nb.metadata[key] = executed.metadata[key]
        return nb, resources


def replay_preprocessors(configured: list | None = None) -> list:
    """The autograde preprocessors (as configured, else nbgrader's), with every executing one
    swapped for ReplayOutputs."""
    steps = configured or Autograde.class_traits()["autograde_preprocessors"].default()
    classes = [import_item(pp) if isinstance(pp, str) else pp for pp in steps]
    return [ReplayOutputs if issubclass(pp, Execute) else pp for pp in classes]


def replay_api(course: Course, workdir: Path):
    """An ``NbGraderAPI`` whose autograde runs no kernel: it records the outputs that grading
    jobs left under ``workdir``."""
    config = course.config()
    configured = config.Autograde.get("autograde_preprocessors")
    config.Autograde.autograde_preprocessors = replay_preprocessors(configured)
    config.ReplayOutputs.workdir = str(workdir)
    return course.api(config)
