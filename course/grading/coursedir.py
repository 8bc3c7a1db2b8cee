"""Finding the course directory and talking to nbgrader about it.

Runs in: the grader and its workers.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import re
import sqlite3
import sys
import urllib.parse
import warnings
from dataclasses import dataclass
from pathlib import Path

# nbgrader (and what it imports) is imported where it is used: a command refused for a typo
# answers at once.

CONFIG_FILE = "nbgrader_config.py"


class CourseError(Exception):
    """A problem an instructor must fix (wrong directory, unknown assignment, ...)."""


class CourseTrouble(CourseError):
    """A problem with the course's own state (a damaged gradebook, another run in progress),
    not with the request or a submission."""


def nbgrader_reason(log: str) -> str | None:
    """The last exception an nbgrader log names (``RuntimeError: Cannot add or remove cells
    ...``), skipping nbgrader's own "see the above traceback" summary; None if it names none."""
    errors = [
        m[1].strip()
        for m in re.finditer(r"^\s*([\w.]+(?:Error|Exception): .+)$", log, re.M)
        if "NbGraderException" not in m[1]
    ]
    return errors[-1] if errors else None


def read_only_uri(path: Path) -> str:
    """SQLite's URI that opens ``path`` read-only, never creating or changing it. Quoted: a
    course in a folder named ``CS 101 #2`` is not read as the file ``CS 101 `` (``#``, ``?``
    and ``%`` are a URI's own)."""
    return f"file:{urllib.parse.quote(str(path))}?mode=ro"


def read_only(path: Path) -> contextlib.closing:
    """A read-only connection to the SQLite database at ``path``, closed when the ``with``
    block ends."""
    return contextlib.closing(sqlite3.connect(read_only_uri(path), uri=True))


def exchange_root(config) -> Path:
    """The exchange folder ``config`` sets (nbgrader's default without one)."""
    return Path(config.Exchange.get("root", "/srv/nbgrader/exchange"))


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

    def check_students(self, requested: list[str]) -> list[str]:
        """Return ``requested``; raise on a student who is neither in the gradebook nor has a
        folder in submitted/ (a typo must not add a phantom student)."""
        known = set()
        if self.gradebook.exists():  # read directly: no need to start nbgrader to refuse a typo
            with read_only(self.gradebook) as db:
                known = {row[0] for row in db.execute("SELECT id FROM student")}
        if (self.root / "submitted").is_dir():
            known |= {p.name for p in (self.root / "submitted").iterdir() if p.is_dir()}
        for student in requested:
            if student not in known:
                close = difflib.get_close_matches(student, sorted(known), n=1)
                hint = f"; did you mean {close[0]}?" if close else ""
                raise CourseError(
                    f"unknown student {student}: not in the gradebook and no folder in "
                    f"submitted/{hint}"
                )
        return requested

    def check_released(self, assignment: str) -> None:
        """Raise unless the gradebook knows ``assignment``'s graded cells exactly as source/ has
        them: grading against other cells fails every submission, so say what to do first."""
        from nbformat import read
        from nbgrader.api import MissingEntry

        source = {}
        for path in sorted((self.root / "source" / assignment).glob("*.ipynb")):
            for cell in read(path, as_version=4).cells:
                meta = cell.metadata.get("nbgrader", {})
                if meta.get("grade"):
                    source[(path.stem, meta.get("grade_id"))] = float(meta.get("points", 0))
        with self.api().gradebook as gb:
            try:
                known = gb.find_assignment(assignment)
            except MissingEntry:
                raise CourseError(
                    f"{assignment} was never released in this gradebook: run "
                    f"`python -m course release {assignment}` first."
                ) from None
            recorded = {
                (nb.name, g.name): g.max_score for nb in known.notebooks for g in nb.grade_cells
            }
            submissions = known.num_submissions
        if recorded == source:
            return
        added = sorted(cell for _, cell in source.keys() - recorded.keys())
        removed = sorted(cell for _, cell in recorded.keys() - source.keys())
        common = source.keys() & recorded.keys()
        points = sorted(key[1] for key in common if source[key] != recorded[key])
        changes = "; ".join(
            f"{what}: {', '.join(cells)}"
            for what, cells in (("added", added), ("removed", removed), ("new points", points))
            if cells
        )
        advice = (
            f"run `python -m course release {assignment}` first"
            if not submissions
            else "nbgrader cannot change the graded cells of an assignment that has submissions:"
            f" undo the change (e.g. `git checkout source/{assignment}`), or publish it as a new "
            "assignment"
        )
        raise CourseError(
            f"source/{assignment} no longer matches the version graded so far ({changes}). "
            f"Nothing was graded; {advice}."
        )

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

        from .render_cache import memoize_rendering
        from .speedups import cache_validators

        _expose_venv_tools()
        cache_validators()
        memoize_rendering()
        # nbgrader's own session handling warns on every autograde; nothing for an instructor to do.
        warnings.filterwarnings("ignore", category=SAWarning)
        config = config or self.config()
        # nbgrader only warns when the course-local exchange is missing; make it, as release would.
        exchange_root(config).mkdir(parents=True, exist_ok=True)
        for name, value in execute.items():
            setattr(config.GradingExecute, name, value)
        coursedir = CourseDirectory(config=config)
        return NbGraderAPI(coursedir=coursedir, config=config)
