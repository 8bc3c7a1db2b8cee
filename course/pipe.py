"""Printing to a reader that may go away: `python -m course export | head` ends quietly with all
its work done. (Python would stop at the first print after `head` exits, with a BrokenPipeError
traceback, or complain when it flushes at exit.)

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator


class _ReaderMayGo:
    """A text stream that sends what is left to /dev/null once its reader has gone."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            self._reader_gone()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            self._reader_gone()

    def _reader_gone(self) -> None:
        os.dup2(os.open(os.devnull, os.O_WRONLY), self._stream.fileno())

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


@contextlib.contextmanager
def stdout_reader_may_go() -> Iterator[None]:
    """Run the block with a `sys.stdout` whose reader may go away, flushed at the end."""
    original = sys.stdout
    sys.stdout = _ReaderMayGo(original)
    try:
        yield
        sys.stdout.flush()
    finally:
        sys.stdout = original
