"""Run grading jobs in parallel, so that a submission fails only for something in the submission.

Runs in: the grader (the instructor's `python -m course` process).

A job that fails for the grader's own reasons (its worker process died, its kernel could not
start) runs again, cold, up to `ATTEMPTS` times; only a failure that repeats is reported, and it
says that it is the grader's. A worker that dies breaks Python's process pool for every job in
it: the pool is replaced and the jobs that were in it run again; at most ``workers`` jobs are in
a pool at once, so a death costs only those.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Executor, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import replace
from pathlib import Path

from . import warm
from .jobs import Job, JobResult, run_job

ATTEMPTS = 3  # a job that failed for the grader's reasons runs at most this many times


def grader_failure(job: Job, error: BaseException) -> JobResult:
    """The result of a job whose worker failed (died, or raised outside nbgrader)."""
    reason = f"grading worker failed: {type(error).__name__}: {error}".splitlines()[0][:300]
    return JobResult(job.assignment, job.student, False, reason, None, reason)


def _settle(result: JobResult, job: Job, attempt: int, queue: deque) -> JobResult | None:
    """The final result, or None when the job is queued to run again (cold)."""
    if result.failure is None:
        return result
    if attempt < ATTEMPTS:
        queue.append((replace(job, warm=False), attempt + 1))
        return None
    return replace(result, failure=f"{result.failure} (the grader's fault, {attempt} attempts)")


def _start_worker(zygotes: Path | None) -> None:
    """A pool worker leads a session of its own, so a Ctrl-C at the terminal reaches only the
    grader, which stops it (`_stop_now`), never in the middle of a job; its jobs fork their
    kernels from the grader's ``zygotes``."""
    os.setsid()
    warm.set_zygote_dir(zygotes)


def _local_pool(workers: int, zygotes: Path | None) -> ProcessPoolExecutor:
    # spawn: workers start clean, never inheriting the parent's open gradebook connections.
    return ProcessPoolExecutor(
        workers,
        mp_context=multiprocessing.get_context("spawn"),
        initializer=_start_worker,
        initargs=(zygotes,),
    )


def _stop_now(pool: ProcessPoolExecutor) -> None:
    """End the pool's workers at once: their kernels end with them (`course.grading.sandbox`),
    and what they were grading was never recorded."""
    for process in list((pool._processes or {}).values()):  # no public way before Python 3.14
        process.kill()


def run_jobs(
    jobs: list[Job],
    workers: int,
    executor: Executor | None = None,
    run: Callable = run_job,
    pack: Callable = lambda job: job,
    zygotes: Path | None = None,
) -> Iterator[JobResult]:
    """Run ``run(pack(job))`` for each of ``jobs`` on ``executor`` (kept as it is), or
    ``workers`` at a time in a local pool of processes (replaced when a worker dies), or here
    when ``workers`` is 1; yield each job's final result as soon as it is known. A job's data
    is packed only when it is sent, so a class of thousands is never in memory at once. Local
    jobs fork their kernels from the ``zygotes`` served in that folder."""
    queue: deque[tuple[Job, int]] = deque((job, 1) for job in jobs)
    if executor is None and workers <= 1:
        warm.set_zygote_dir(zygotes)
        try:
            while queue:
                job, attempt = queue.popleft()
                try:
                    result = run(pack(job))
                except Exception as error:
                    result = grader_failure(job, error)
                if (final := _settle(result, job, attempt, queue)) is not None:
                    yield final
        finally:
            warm.set_zygote_dir(None)
        return
    own = executor is None
    pool = _local_pool(workers, zygotes) if own else executor
    limit = workers if own else max(1, len(jobs))
    running: dict[Future, tuple[Job, int, Executor]] = {}

    def fill() -> None:
        while queue and len(running) < limit:
            job, attempt = queue.popleft()
            try:
                future = pool.submit(run, pack(job))
            except Exception as error:  # packing failed: settled as a worker's failure is
                future = Future()
                future.set_exception(error)
            running[future] = (job, attempt, pool)

    try:
        while queue or running:
            fill()
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            finals = []
            for future in finished:
                job, attempt, ran_on = running.pop(future)
                try:
                    result = future.result()
                except Exception as error:
                    result = grader_failure(job, error)
                    if own and isinstance(error, BrokenProcessPool) and ran_on is pool:
                        pool.shutdown(wait=False, cancel_futures=True)
                        pool = _local_pool(workers, zygotes)
                if (final := _settle(result, job, attempt, queue)) is not None:
                    finals.append(final)
            fill()  # before the caller records these: no worker waits for that
            yield from finals
    except BaseException:  # interrupted, or the caller stopped early (GeneratorExit)
        for future in running:
            future.cancel()
        if own:
            _stop_now(pool)
        raise
    finally:
        if own:
            pool.shutdown(wait=True, cancel_futures=True)
