"""A student's hand-in as the grader reads it: every file in ``submitted/`` is the student's.

Runs in: the grader.

A file there may be a link (to the source notebook, to a classmate's work, to the student's own
notebook where a time belongs), a FIFO, or huge. So none is followed, none is read past a bound,
and any trouble is that submission's own, said in plain words (`HandInError`), never a stop of
the whole run.
"""

from __future__ import annotations

import datetime
import os
import stat
from pathlib import Path

from nbgrader.utils import parse_utc

TIMESTAMP = "timestamp.txt"
SECRET = "submission_secret.txt"  # nbgrader's, for release_feedback
TIMESTAMP_LIMIT = 1024  # bytes: a time is a line, a secret too
NOTEBOOK_LIMIT = 64 * 1024 * 1024  # bytes: far more than a notebook a student writes
FOLDER_LIMIT = 4 * NOTEBOOK_LIMIT  # bytes in all files of a hand-in (nbgrader copies them all)
FOLDER_FILES = 1000


class HandInError(Exception):
    """Why a file of a submission cannot be read; the message starts "invalid submission"."""


def read_bytes(path: Path, limit: int) -> bytes:
    """The bytes of a regular file of the hand-in, at most ``limit`` of them; raise `HandInError`
    for a link, anything but a regular file, or a larger file."""
    name = Path(path).name
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as error:
        if Path(path).is_symlink():
            raise HandInError(f"invalid submission: {name} is a link, not a file") from None
        raise HandInError(f"invalid submission: {name} cannot be read ({error.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise HandInError(f"invalid submission: {name} is not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as handle:
            data = handle.read(limit + 1)
    finally:
        os.close(fd)
    if len(data) > limit:
        raise HandInError(f"invalid submission: {name} is larger than {limit // 1024} KiB")
    return data


def check_folder(folder: Path) -> None:
    """Raise `HandInError` when the hand-in holds more files, or more bytes, than a grader copies
    (autograde copies every file of it into autograded/). Links are counted, never followed."""
    count = size = 0
    for top, folders, files in os.walk(folder):
        for name in files + [f for f in folders if os.path.islink(os.path.join(top, f))]:
            count += 1
            size += os.lstat(os.path.join(top, name)).st_size
        if count > FOLDER_FILES or size > FOLDER_LIMIT:
            raise HandInError(
                f"invalid submission: more than {FOLDER_FILES} files or "
                f"{FOLDER_LIMIT // 2**20} MiB in the hand-in folder"
            )
    if os.path.lexists(Path(folder) / SECRET):
        read_bytes(Path(folder) / SECRET, TIMESTAMP_LIMIT)


def timestamp(folder: Path) -> datetime.datetime | None:
    """The hand-in time nbgrader wrote in ``folder``'s timestamp.txt, or None without one (or an
    empty one); raise `HandInError` when it is not a file holding a time."""
    path = Path(folder) / TIMESTAMP
    if not os.path.lexists(path):
        return None
    text = read_bytes(path, TIMESTAMP_LIMIT).decode("utf-8", "replace").strip()
    if not text:
        return None
    try:
        return parse_utc(text)
    except (ValueError, OverflowError):
        raise HandInError(f"invalid submission: {TIMESTAMP} does not hold a time") from None


def printable(text: str, limit: int) -> str:
    """``text`` as a terminal may show it: a character that is not printable (an escape code, a
    bell, a newline) written as its escape, and at most ``limit`` characters. File and folder
    names of a hand-in, and what an error says about its content, are the student's to choose."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= limit else shown[: limit - 3] + "..."
