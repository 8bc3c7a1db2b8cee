"""Finding the course directory and talking to nbgrader about it."""

from __future__ import annotations

import os
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from .speedups import cache_validators

CONFIG_FILE = "nbgrader_config.py"


class CourseError(Exception):
    """A problem an instructor must fix (wrong directory, unknown assignment, ...)."""


def _expose_venv_tools() -> None:
    # nbgrader runs the `alembic` executable when it creates a gradebook; it lives beside python.
    bindir = str(Path(sys.executable).parent)
    if bindir not in os.environ.get("PATH", "").split(os.pathsep):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")


@dataclass(frozen=True)
class Course:
    """An nbgrader course directory: `nbgrader_config.py`, `source/`, `release/`, `submitted/`."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> "Course":
        path = Path(root).resolve()
        if not (path / CONFIG_FILE).is_file():
            raise CourseError(f"{path} is not a course directory: it has no {CONFIG_FILE}.")
        if not (path / "source").is_dir():
            raise CourseError(f"{path} is not a course directory: it has no source/ folder.")
        return cls(path)

    @property
    def gradebook(self) -> Path:
        """nbgrader's default SQLite gradebook (our config keeps the default location)."""
        return self.root / "gradebook.db"

    @property
    def assignments(self) -> list[str]:
        """Assignment ids, from the folders in source/."""
        return sorted(
            p.name
            for p in (self.root / "source").iterdir()
            if p.is_dir() and not p.name.startswith(".")
        )

    def check_assignments(self, requested: list[str]) -> list[str]:
        """Return ``requested`` (all assignments when empty); raise on an unknown id."""
        known = self.assignments
        unknown = [a for a in requested if a not in known]
        if unknown:
            raise CourseError(
                f"unknown assignment {', '.join(unknown)}; this course has: {', '.join(known)}."
            )
        return requested or known

    def submitted_students(self, assignment: str) -> list[str]:
        """Students with a folder for ``assignment`` under submitted/."""
        base = self.root / "submitted"
        if not base.is_dir():
            return []
        return sorted(p.name for p in base.iterdir() if (p / assignment).is_dir())

    def config(self):
        """This course's nbgrader_config.py, loaded, with the course root set."""
        from traitlets.config.loader import PyFileConfigLoader

        config = PyFileConfigLoader(CONFIG_FILE, path=str(self.root)).load_config()
        config.CourseDirectory.root = str(self.root)
        return config

    def api(self, config=None, **execute):
        """An ``NbGraderAPI`` for this course, from ``config`` (default: `config()`).

        ``execute`` sets options of the grading kernel (`course.grading.execute.GradingExecute`:
        warm_dir, course_root, ...).
        """
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from sqlalchemy.exc import SAWarning

        _expose_venv_tools()
        cache_validators()
        # nbgrader's own session handling warns on every autograde; nothing for an instructor to do.
        warnings.filterwarnings("ignore", category=SAWarning)
        config = config or self.config()
        # nbgrader only warns when the course-local exchange is missing; make it, as release would.
        Path(config.Exchange.get("root", self.root / "exchange")).mkdir(parents=True, exist_ok=True)
        for name, value in execute.items():
            setattr(config.GradingExecute, name, value)
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir=coursedir, config=config)
