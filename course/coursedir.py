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
    """An nbgrader course directory: `nbgrader_config.py`, `source/`, `release/`, `submitted/`, ..."""

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
        return sorted(p.name for p in (self.root / "source").iterdir() if p.is_dir()
                      and not p.name.startswith("."))

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

    def api(self, replay_from: Path | None = None, **execute):
        """An ``NbGraderAPI`` configured from this course's nbgrader_config.py.

        With ``replay_from``, its autograde runs no kernel: it records the outputs that grading
        jobs left in that folder (see `course.replay`). ``execute`` sets options of the grading
        kernel (`course.execute.GradingExecute`: warm_dir, course_root, ...).
        """
        from nbgrader.apps import NbGraderAPI
        from nbgrader.coursedir import CourseDirectory
        from sqlalchemy.exc import SAWarning
        from traitlets.config.loader import PyFileConfigLoader

        _expose_venv_tools()
        cache_validators()
        # nbgrader's own session handling warns on every autograde; nothing for an instructor to do.
        warnings.filterwarnings("ignore", category=SAWarning)
        config = PyFileConfigLoader(CONFIG_FILE, path=str(self.root)).load_config()
        config.CourseDirectory.root = str(self.root)
        # nbgrader only warns when the course-local exchange is missing; make it, as release would.
        Path(config.Exchange.get("root", self.root / "exchange")).mkdir(parents=True, exist_ok=True)
        if replay_from is not None:
            from .replay import replay_preprocessors

            configured = config.Autograde.get("autograde_preprocessors")
            config.Autograde.autograde_preprocessors = replay_preprocessors(configured)
            config.ReplayOutputs.workdir = str(replay_from)
        for name, value in execute.items():
            setattr(config.GradingExecute, name, value)
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir=coursedir, config=config)
