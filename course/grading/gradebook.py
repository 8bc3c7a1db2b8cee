"""Keeping the gradebook safe: it is the only copy of every manual score and comment.

Runs in: the grader (the instructor's `python -m course` process).

- `check` refuses a gradebook that is empty, not SQLite, damaged, not nbgrader's, or emptied
  while graded work exists, with one line that says what is wrong and how to restore: nbgrader
  would silently replace an empty file with a new gradebook, and the grade files would follow.
- `backup` keeps a copy (SQLite's backup API, consistent even while another process reads it)
  in ``.course/backups/`` before every command that writes the gradebook, the last `KEEP` of them;
  `restore` puts one back, keeping the gradebook it replaces.
- `exclusive` lets one command at a time write a course's gradebook.
- `hold_for_lab` marks a JupyterLab serving the course, whose formgrader keeps the gradebook
  open: `restore` refuses to replace the file under it (what a grader entered next would go to
  the replaced file, and fail).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from .coursedir import Course, CourseTrouble, read_only, read_only_uri
from .words import counted

KEEP = 10  # rotating backups
TABLES = {"assignment", "notebook", "student", "submitted_assignment", "grade", "comment"}
RESTORE = "python -m course restore"


class GradebookDamaged(CourseTrouble):
    """The gradebook cannot be trusted: nothing was read from it or written."""


class CourseBusy(CourseTrouble):
    """Another command is writing this course's gradebook."""


def backups_dir(course: Course) -> Path:
    return course.root / ".course" / "backups"


def backups(course: Course) -> list[Path]:
    """The kept copies, newest first."""
    return sorted(backups_dir(course).glob("gradebook-*.db"), reverse=True)


def _advice(course: Course) -> str:
    kept = backups(course)
    if kept:
        return f"restore the newest good copy with `{RESTORE}` (copies in {backups_dir(course)})"
    return "restore it from your own backup (no copy is kept in .course/backups/ yet)"


def _problem(path: Path) -> str | None:
    """What is wrong with the SQLite gradebook at ``path``, or None."""
    if path.stat().st_size == 0:
        return "is empty (0 bytes)"
    with path.open("rb") as file:
        if file.read(16) != b"SQLite format 3\x00":
            return "is not an SQLite database"
    try:
        with read_only(path) as db:
            verdict = db.execute("PRAGMA quick_check").fetchall()
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master")}
    except sqlite3.DatabaseError as error:
        return f"is damaged (SQLite: {error})"
    if verdict != [("ok",)]:
        found = " ".join(str(row[0]) for row in verdict).split("\n")
        problems = [line for line in found if line.strip() and not line.startswith("***")]
        return f"is damaged (SQLite: {(problems or found)[0][:120]}, and {len(problems) - 1} more)"
    if missing := TABLES - tables:
        return f"is not an nbgrader gradebook (no table {', '.join(sorted(missing))})"
    return None


def _graded_work(course: Course) -> int:
    """How many submissions autograded/ holds (each was recorded in a gradebook)."""
    return sum(1 for _ in (course.root / "autograded").glob("*/*/*.ipynb"))


def _recorded(path: Path) -> int:
    with read_only(path) as db:
        return db.execute("SELECT count(*) FROM submitted_assignment").fetchone()[0]


def check(course: Course) -> None:
    """Raise `GradebookDamaged` (one line: what is wrong, how to restore) unless the gradebook
    is sound, or absent in a course that has graded nothing yet."""
    path, graded = course.gradebook, _graded_work(course)
    holds = f"autograded/ holds {counted(graded, 'graded notebook')}"
    if not path.exists():
        if graded:
            raise GradebookDamaged(
                f"{path} is missing, but {holds}: nbgrader would start an empty gradebook; "
                f"{_advice(course)} (or, to start afresh on purpose, move autograded/ away)"
            )
        return
    if problem := _problem(path):
        raise GradebookDamaged(f"{path} {problem}; nothing was changed; {_advice(course)}")
    if graded and not _recorded(path):
        raise GradebookDamaged(
            f"{path} has no submissions, but {holds} (was it replaced?); nothing was changed; "
            f"{_advice(course)} (or, to start afresh on purpose, move autograded/ away)"
        )


def _copy(source: Path, dest: Path) -> None:
    """A consistent copy of an SQLite database, written beside ``dest`` and renamed into place."""
    partial = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    with (
        read_only(source) as src,
        contextlib.closing(sqlite3.connect(partial)) as out,
    ):
        src.backup(out)
    os.replace(partial, dest)


STUDENT_TABLES = ("comment", "grade", "submitted_notebook", "submitted_assignment", "student")
# One student's rows of one assignment, children last, each a query of the course's gradebook
# (attached as "course") with the parameters :student and :assignment.
_THEIR_SUBMISSION = (
    "SELECT id FROM course.submitted_assignment WHERE student_id = :student AND assignment_id = "
    "(SELECT id FROM course.assignment WHERE name = :assignment)"
)
_THEIR_NOTEBOOKS = (
    f"SELECT id FROM course.submitted_notebook WHERE assignment_id IN ({_THEIR_SUBMISSION})"
)
_THEIR_ROWS = {
    "student": "SELECT * FROM course.student WHERE id = :student",
    "submitted_assignment": f"SELECT * FROM course.submitted_assignment WHERE id IN "
    f"({_THEIR_SUBMISSION})",
    "submitted_notebook": f"SELECT * FROM course.submitted_notebook WHERE id IN "
    f"({_THEIR_NOTEBOOKS})",
    "grade": f"SELECT * FROM course.grade WHERE notebook_id IN ({_THEIR_NOTEBOOKS})",
    "comment": f"SELECT * FROM course.comment WHERE notebook_id IN ({_THEIR_NOTEBOOKS})",
}


def class_free(course: Course, folder: Path) -> bytes:
    """The course's gradebook with every student's rows deleted and the file rebuilt (VACUUM:
    no deleted row stays in a free page): assignments, notebooks and cells only. Made once per
    run; each job's gradebook is this with its own student's rows (`for_student`)."""
    path = folder / "class-free.db"
    _copy(course.gradebook, path)
    with contextlib.closing(sqlite3.connect(path)) as db:
        for table in STUDENT_TABLES:  # children first
            db.execute(f"DELETE FROM {table}")
        db.commit()
        db.execute("VACUUM")
    return path.read_bytes()


def for_student(course: Course, empty: bytes, student: str, assignment: str) -> bytes:
    """The gradebook a grading job carries (`course.grading.jobs`): ``empty`` (`class_free`)
    with ``student``'s own rows of ``assignment`` copied from the course's gradebook (their
    submission as people left it: an extension, manual scores and comments, which nbgrader's
    late penalty and feedback page read). Nothing of any other student."""
    # In memory; a URI connection, or SQLite would take the attached URI for a file's name.
    with contextlib.closing(sqlite3.connect("file::memory:", uri=True)) as db:
        db.deserialize(empty)
        db.execute("ATTACH DATABASE ? AS course", (read_only_uri(course.gradebook),))
        asked = {"student": student, "assignment": assignment}
        for table, query in _THEIR_ROWS.items():
            db.execute(f"INSERT INTO main.{table} {query}", asked)
        db.commit()
        return db.serialize()


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def backup(course: Course, reason: str) -> Path | None:
    """Keep a copy of the (checked) gradebook before ``reason`` (a command) writes it; None when
    there is none yet or the newest copy already holds the same."""
    if not course.gradebook.exists():
        return None
    folder = backups_dir(course)
    folder.mkdir(parents=True, exist_ok=True)
    now = time.time()  # names sort by time: the microseconds keep copies of one second apart
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now)) + f".{int(now * 1e6) % 10**6:06d}"
    dest = folder / f"gradebook-{stamp}-{reason}.db"
    _copy(course.gradebook, dest)
    kept = backups(course)
    if len(kept) > 1 and kept[0] == dest and _digest(kept[1]) == _digest(dest):
        dest.unlink()  # nothing changed since the last copy: keep the older ones instead
        return None
    for old in kept[KEEP:]:
        old.unlink()
    return dest


def restore(course: Course, name: str | None = None) -> tuple[Path, Path | None]:
    """Put back the backup named ``name`` (default: the newest sound one); the gradebook it
    replaces is kept as ``.course/backups/replaced-*.db``. Returns (restored, kept)."""
    kept = backups(course)
    if name is not None:
        chosen = [p for p in kept if p.name == name or p.stem == name]
        if not chosen:
            names = ", ".join(p.name for p in kept) or "none"
            raise GradebookDamaged(f"no backup named {name} (there are: {names})")
    else:
        chosen = [p for p in kept if _problem(p) is None]
        if not chosen:
            raise GradebookDamaged(f"no sound backup in {backups_dir(course)} to restore")
    source = chosen[0]
    if problem := _problem(source):
        raise GradebookDamaged(f"the backup {source.name} {problem}; choose another")
    with _no_lab(course):
        replaced = None
        if course.gradebook.exists():
            replaced = backups_dir(course) / f"replaced-{time.strftime('%Y%m%d-%H%M%S')}.db"
            os.replace(course.gradebook, replaced)
        _copy(source, course.gradebook)
    return source, replaced


def _labs(course: Course) -> Path:
    folder = course.root / ".course" / "labs"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def hold_for_lab(course: Course) -> None:
    """Mark this process as a lab serving the course until it ends, also after it execs into
    JupyterLab: a shared lock on the labs' gate (waiting while a restore runs) and an exclusive
    one on a file named by its pid, which tells `restore` which process to stop."""
    folder = _labs(course)
    gate = os.open(folder / "gate", os.O_RDWR | os.O_CREAT, 0o644)
    fcntl.flock(gate, fcntl.LOCK_SH)
    mine = os.open(folder / str(os.getpid()), os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
    fcntl.flock(mine, fcntl.LOCK_EX)
    os.write(mine, time.strftime("%H:%M:%S").encode())
    for fd in (gate, mine):  # the locks go with the open files into the exec'd JupyterLab
        os.set_inheritable(fd, True)


def _serving(folder: Path) -> list[tuple[str, str]]:
    """(pid, since) of every lab that holds its file's lock."""
    found = []
    for path in sorted(folder.glob("[0-9]*")):
        with path.open() as mark:
            try:
                fcntl.flock(mark, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                found.append((path.name, mark.read().strip()))
    return found


@contextlib.contextmanager
def _no_lab(course: Course) -> Iterator[None]:
    """Run the block while no lab serves the course (none can start meanwhile); raise
    `CourseBusy`, naming the labs and how to stop them, while one does."""
    folder = _labs(course)
    with (folder / "gate").open("a") as gate:
        try:
            fcntl.flock(gate, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            labs = _serving(folder)
            which = "".join(f", pid {pid} since {since}" for pid, since in labs)
            kill = f", or `kill {' '.join(pid for pid, _ in labs)}`" if labs else ""
            raise CourseBusy(
                f"JupyterLab is serving this course (`make lab`{which}), and its formgrader keeps "
                "the gradebook open: after a restore, what you enter there would be lost. Stop it "
                f"(Ctrl-C twice in its terminal{kill}), run restore again, then start it again "
                "with `make lab`"
            ) from None
        for ended in folder.glob("[0-9]*"):
            ended.unlink()
        yield


@contextlib.contextmanager
def exclusive(course: Course, command: str) -> Iterator[None]:
    """Hold the course's lock while ``command`` runs; raise `CourseBusy` if another command
    holds it. The operating system releases it when the holder exits, however it ends."""
    path = course.root / ".course" / "lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            raise CourseBusy(
                f"another run is in progress on this course ({holder}): wait for it to end, "
                "or stop it, then run this command again"
            ) from None
        lock.seek(0)
        lock.truncate()
        lock.write(f"`{command}`, pid {os.getpid()}, since {time.strftime('%H:%M:%S')}")
        lock.flush()
        try:
            yield
        finally:
            lock.truncate(0)
