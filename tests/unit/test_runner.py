"""Grading never fails for the grader's own reasons: a job whose worker died runs again, cold; a
dead worker costs only the jobs in its pool; only a failure that repeats is reported, as the
grader's; the exit status tells a script what happened."""

from __future__ import annotations

import os
import signal
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from course.grading import batch, runner, warm
from course.grading.jobs import Job, JobResult


def _job(student: str, warm: bool = True) -> Job:
    return Job("01_requires_grad", student, warm=warm)


def _ok(job: Job) -> JobResult:
    return JobResult(job.assignment, job.student, True, "", None)


def kill_own_worker_once(parcel: tuple[Job, Path]) -> JobResult:
    """Runs in a pool worker: the first run of a job named "victim..." kills its own process,
    as the out-of-memory killer would; the marker file makes the second run succeed."""
    job, folder = parcel
    marker = folder / f"{job.student}.died"
    if job.student.startswith("victim") and not marker.exists():
        marker.write_text("")
        os.kill(os.getpid(), signal.SIGKILL)
    return JobResult(job.assignment, job.student, True, f"warm={job.warm}", None)


def always_die(job: Job) -> JobResult:
    if job.student == "doomed":
        os.kill(os.getpid(), signal.SIGKILL)
    return _ok(job)


def where_zygotes_are(job: Job) -> JobResult:
    """Runs in a pool worker: where its jobs find zygotes."""
    return JobResult(job.assignment, job.student, True, str(warm.zygote_dir()), None)


def test_a_worker_killed_mid_batch_costs_nothing(tmp_path):
    jobs = [_job(f"s{i}") for i in range(6)] + [_job("victim")]
    results = {
        r.student: r
        for r in runner.run_jobs(jobs, 2, run=kill_own_worker_once, pack=lambda j: (j, tmp_path))
    }
    assert set(results) == {j.student for j in jobs}
    assert all(r.ok and r.failure is None for r in results.values()), results
    assert results["victim"].log == "warm=False", "a job that ran again runs cold"


def test_a_failure_that_repeats_is_reported_once_as_the_graders():
    jobs = [_job("doomed"), *(_job(f"s{i}") for i in range(4))]
    results = {r.student: r for r in runner.run_jobs(jobs, 2, run=always_die)}
    assert set(results) == {j.student for j in jobs}
    doomed = results.pop("doomed")
    assert not doomed.ok and "BrokenProcessPool" in doomed.failure
    assert f"the grader's fault, {runner.ATTEMPTS} attempts" in doomed.failure
    assert all(r.ok for r in results.values()), "the others must not pay for it"


@pytest.mark.parametrize("workers,executor", [(1, None), (2, ThreadPoolExecutor(2))])
def test_an_exception_outside_nbgrader_is_retried_here_and_on_any_executor(workers, executor):
    calls: list[bool] = []

    def flaky(job: Job) -> JobResult:
        calls.append(job.warm)
        if len(calls) == 1:
            raise ConnectionError("the zygote went away")
        return _ok(job)

    (result,) = runner.run_jobs([_job("a")], workers, executor, run=flaky)
    assert result.ok and calls == [True, False]


@pytest.mark.parametrize("workers", [1, 2])
def test_a_job_that_cannot_be_packed_is_retried_then_the_graders(workers):
    packed: list[str] = []

    def pack(job: Job) -> Job:
        packed.append(job.student)
        if job.student == "gone":
            raise OSError("the submission could not be read")
        return job

    jobs = [_job("gone"), _job("fine")]
    results = {r.student: r for r in runner.run_jobs(jobs, workers, run=_ok, pack=pack)}
    assert results["fine"].ok
    assert not results["gone"].ok and "could not be read" in results["gone"].failure
    assert packed.count("gone") == runner.ATTEMPTS and packed.count("fine") == 1


@pytest.mark.parametrize("workers", [1, 2])
def test_local_jobs_find_the_graders_zygotes(tmp_path, workers):
    jobs = [_job("a"), _job("b")]
    results = runner.run_jobs(jobs, workers, run=where_zygotes_are, zygotes=tmp_path)
    assert {r.log for r in results} == {str(tmp_path)}
    assert warm.zygote_dir() is None, "the grader's own process is left as it was"


def test_a_submissions_own_failure_is_not_retried():
    calls = []

    def broken(job: Job) -> JobResult:
        calls.append(job)
        return JobResult(job.assignment, job.student, False, "NotJSONError", None)

    (result,) = runner.run_jobs([_job("a")], 1, run=broken)
    assert not result.ok and result.failure is None and len(calls) == 1


def _outcome(status: str, fault: bool = False) -> batch.Outcome:
    return batch.Outcome("a", "s", status, grader_fault=fault)


@pytest.mark.parametrize(
    "statuses,code,line",
    [
        ([batch.GRADED, batch.MISSING, batch.PARTIAL], 0, "graded 1, partial 1, missing 1"),
        ([batch.GRADED, batch.FAILED], 1, "graded 1, failed 1"),
        ([batch.FAILED, (batch.FAILED, True)], 3, "failed 2 (1 the grader's)"),
        ([], 0, "nothing to grade"),
    ],
)
def test_exit_status_and_summary(statuses, code, line):
    outcomes = [_outcome(*s) if isinstance(s, tuple) else _outcome(s) for s in statuses]
    assert batch.exit_status(outcomes) == code
    assert batch.summary(outcomes) == line
