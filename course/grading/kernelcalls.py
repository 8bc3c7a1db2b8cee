"""The code the grader runs in a grading kernel, as strings, built in one place.

Runs in: the grader; the strings run in the grading kernel (or the reference's). Each names a
function of the `course` package the kernel imports (`TARGETS`: a test resolves every one).
"""

from __future__ import annotations

TARGETS = (("course.lesson.probes", "send"), ("course.lesson.testnames", "watch"))


def _call(module: str, function: str, *arguments) -> str:
    assert (module, function) in TARGETS, (module, function)
    called = f"__import__({module!r}).{module.partition('.')[2]}.{function}"
    return f"{called}({', '.join(map(repr, arguments))})"


def send_records(hidden: str, draw: int) -> str:
    """Run a hidden block's probes on the inputs of ``draw`` and send their records
    (`course.lesson.probes.send`)."""
    return _call("course.lesson.probes", "send", hidden, draw)


def watch_test_cells(sources: list[str]) -> str:
    """Put back the names each of these cells rebinds (`course.lesson.testnames.watch`)."""
    return _call("course.lesson.testnames", "watch", sorted(set(sources)))
