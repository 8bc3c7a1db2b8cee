"""Why a submission failed, named from nbgrader's log in words an instructor can act on."""

from course.grading.batch import classify_failure


def test_known_failures_are_named():
    assert classify_failure("nbclient.exceptions.CellTimeoutError: A cell timed out").startswith(
        "timeout:"
    )
    assert classify_failure("raise DeadKernelError('Kernel died')").startswith("kernel died")
    assert classify_failure("UnresponsiveKernelError\nCellTimeoutError") == (
        "timeout: the kernel did not answer and could not be interrupted"
    )


def test_an_unknown_failure_names_its_exception_not_nbgraders_summary():
    log = (
        "Traceback (most recent call last):\n  File x\n"
        "sqlite3.IntegrityError: UNIQUE constraint failed\n"
        "nbgrader.converters.base.NbGraderException: Please see the above traceback\n"
    )
    assert classify_failure(log) == "error: sqlite3.IntegrityError: UNIQUE constraint failed"
    assert classify_failure("") == "error: nbgrader gave no reason"


def test_time_limits_are_told_apart():
    """A stuck cell, a kernel whose output never came, and a notebook past its total time each
    say which limit it was."""
    stuck = "course.grading.execute.CellTimeLimit: the cell used more than 60 s of CPU time"
    assert "ignored the interrupt" in classify_failure(stuck)
    iopub = (
        "CellTimeoutError: A cell timed out while it was being executed, after 120 seconds.\n"
        "The message was: Timeout waiting for IOPub output."
    )
    assert classify_failure(iopub) == "timeout: the kernel's output stopped before the cell ended"
    assert "total time limit" in classify_failure("course.grading.execute.SubmissionTimeout: ...")
