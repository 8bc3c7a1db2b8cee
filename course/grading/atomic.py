"""Files written whole or not at all: a reader (a concurrent grader, a resumed run) finds the old
content or the new one, never a part, and an interrupted write leaves no stray file.

Runs in: the grader and its workers.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a uniquely named file beside it, then rename it in
    place (atomic within one file system)."""
    fd, partial = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(partial)
        raise
