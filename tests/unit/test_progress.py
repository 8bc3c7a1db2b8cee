"""The grading progress bar: counts, failures and ETA on a terminal, nothing when piped."""

import io

from course.progress import Progress


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


def test_progress_shows_done_failed_and_eta():
    now = [0.0]
    stream = FakeTTY()
    bar = Progress(4, stream=stream, clock=lambda: now[0])
    assert bar.line().endswith("0/4 graded, 0 failed, ETA --:--")
    now[0] = 10.0
    bar.update(failed=False)
    now[0] = 20.0
    bar.update(failed=True)
    assert bar.line() == "[############............] 2/4 graded, 1 failed, ETA 00:20"
    bar.close()
    assert stream.getvalue().count("\r") == 2 and stream.getvalue().endswith("\n")


def test_progress_is_quiet_when_not_a_tty():
    stream = io.StringIO()
    bar = Progress(2, stream=stream)
    bar.update(failed=False)
    bar.close()
    assert stream.getvalue() == ""


def test_progress_says_what_it_does_before_the_first_submission():
    stream = FakeTTY()
    bar = Progress(stream=stream)
    bar.phase("checking the reference records")
    assert stream.getvalue().endswith(
        "0/0 graded, 0 failed, ETA --:-- (checking the reference records)"
    )
    bar.start(3)
    bar.phase("grading, kernels warming up")
    assert bar.line().endswith("0/3 graded, 0 failed, ETA --:-- (grading, kernels warming up)")
    bar.update(failed=False)
    assert "(" not in bar.line()
