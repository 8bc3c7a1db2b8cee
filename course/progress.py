"""A one-line progress bar for grading on a terminal; silent when output is not a TTY.

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import sys
import time
from typing import TextIO


class Progress:
    """Shown at once: ``phase(text)`` says what grading is doing before the first submission
    (checking the reference records, starting warm kernels), ``start(total)`` once the class
    is known, ``update(failed)`` once per graded submission; ``close()`` ends the line."""

    def __init__(self, total: int = 0, stream: TextIO = sys.stderr, clock=time.monotonic):
        self.total, self.done, self.failures = total, 0, 0
        self.stream, self.clock = stream, clock
        self.started = clock()
        self.enabled = stream.isatty()
        self.doing = ""

    def line(self) -> str:
        elapsed = self.clock() - self.started
        eta = elapsed / self.done * (self.total - self.done) if self.done else None
        width = 24
        filled = width * self.done // max(self.total, 1)
        eta_text = "--:--" if eta is None else f"{int(eta) // 60:02d}:{int(eta) % 60:02d}"
        doing = f" ({self.doing})" if self.doing and not self.done else ""
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} graded, "
            f"{self.failures} failed, ETA {eta_text}{doing}"
        )

    def _show(self) -> None:
        if self.enabled:
            self.stream.write("\r\033[K" + self.line())
            self.stream.flush()

    def phase(self, doing: str) -> None:
        self.doing = doing
        self._show()

    def start(self, total: int) -> None:
        self.total, self.started = total, self.clock()
        self._show()

    def update(self, failed: bool) -> None:
        self.done += 1
        self.failures += int(failed)
        self._show()

    def callbacks(self) -> dict:
        """The keyword arguments of `course.grading.batch.grade` that drive this bar."""
        from .grading.batch import FAILED

        return {
            "on_start": self.start,
            "on_phase": self.phase,
            "on_outcome": lambda outcome: self.update(outcome.status == FAILED),
        }

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()
