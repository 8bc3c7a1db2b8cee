"""How our commands count things in words.

Runs in: the grader and its workers.
"""

from __future__ import annotations


def counted(n: int, noun: str) -> str:
    """``n`` and ``noun``, plural unless one: "1 submission", "3 submissions"."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"
