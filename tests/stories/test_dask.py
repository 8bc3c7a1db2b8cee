"""Grading jobs run on an existing distributed engine: `grade(client=...)` on a local
dask.distributed cluster gives every student the right status, grades and feedback, the jobs
really run on the dask workers, each with zygotes of its own while the run lasts. A worker that
fails (on any executor) fails only its own student's job. (tests/stories/test_cluster.py runs
the same on a scheduler and workers started as a user starts them, that share no folder.)"""

from __future__ import annotations

from concurrent.futures import Executor, Future, ThreadPoolExecutor

import distributed
import pytest

from course.grading import batch, warm
from course.grading.coursedir import Course
from course.submission import build_submission, reference_answers, write_submission
from course_testing import copy_course

ASSIGNMENT = "01_requires_grad"
EXERCISE = "make_trainable"
WRONG = "def make_trainable(values):\n    return torch.as_tensor(values)"


def _class(course: Course, wrong: bool = True) -> None:
    """right: the reference answers; wrong: the same but make_trainable; broken: not JSON."""
    refs = reference_answers(course, ASSIGNMENT)
    write_submission(course, "right", ASSIGNMENT, build_submission(course, ASSIGNMENT, refs))
    if wrong:
        answers = {**refs, EXERCISE: WRONG}
        write_submission(course, "wrong", ASSIGNMENT, build_submission(course, ASSIGNMENT, answers))
    broken = write_submission(
        course, "broken", ASSIGNMENT, build_submission(course, ASSIGNMENT, refs)
    )
    broken.write_text('{"cells": [')


def _cell_scores(course: Course) -> dict[str, dict[str, tuple[float | None, float]]]:
    """(auto score, max score) of every graded cell, by student and grade id."""
    scores = {}
    with course.api().gradebook as gb:
        for submission in gb.assignment_submissions(ASSIGNMENT):
            scores[submission.student.id] = {
                g.name: (g.auto_score, g.max_score)
                for nb in submission.notebooks
                for g in nb.grades
            }
    return scores


@pytest.fixture(scope="module")
def dask_client():
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    )
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


@pytest.fixture(scope="module")
def graded_on_dask(tmp_path_factory, dask_client):
    course = copy_course(tmp_path_factory.mktemp("dask") / "course", with_release=True)
    _class(course)
    zygotes: list[dict] = []

    def phase(doing: str) -> None:
        if doing.startswith("grading"):
            zygotes.append(dask_client.run(warm.zygote_dir))

    with distributed.get_task_stream(dask_client) as stream:
        outcomes = batch.grade(course, [ASSIGNMENT], client=dask_client, on_phase=phase)
    zygotes.append(dask_client.run(warm.zygote_dir))
    return course, {o.student: o for o in outcomes}, stream.data, zygotes


def test_every_student_has_an_outcome_with_its_status(graded_on_dask):
    _, outcomes, _, _ = graded_on_dask
    assert sorted(outcomes) == ["broken", "right", "wrong"]
    assert outcomes["right"].status == batch.GRADED, outcomes["right"].detail
    assert outcomes["wrong"].status == batch.GRADED, outcomes["wrong"].detail
    assert outcomes["broken"].status == batch.FAILED
    assert outcomes["broken"].detail.startswith("invalid notebook"), outcomes["broken"].detail


def test_scores_match_the_gradebook(graded_on_dask):
    course, outcomes, _, _ = graded_on_dask
    right, wrong = outcomes["right"], outcomes["wrong"]
    with course.api().gradebook as gb:
        available = gb.find_assignment(ASSIGNMENT).max_code_score
    assert available > 0
    assert right.max_score == wrong.max_score == available
    assert right.score == right.max_score
    assert wrong.score < right.score

    cells = _cell_scores(course)
    assert "broken" not in cells  # a failed submission leaves no grades behind
    exercise_cells = sorted(name for name in cells["right"] if name.startswith(f"test_{EXERCISE}"))
    assert exercise_cells, f"no test cells for {EXERCISE} in the gradebook"
    for name in exercise_cells:
        score, points = cells["right"][name]
        assert points > 0 and score == points, (name, cells["right"][name])
        assert cells["wrong"][name] == (0, points), (name, cells["wrong"][name])
    lost = sum(cells["right"][name][1] for name in exercise_cells)
    assert wrong.score == right.score - lost  # wrong loses make_trainable's points, no more


def test_feedback_is_written_for_the_graded_students(graded_on_dask):
    course, _, _, _ = graded_on_dask
    for student in ("right", "wrong"):
        page = course.root / "feedback" / student / ASSIGNMENT / f"{ASSIGNMENT}.html"
        assert page.is_file() and page.stat().st_size > 0, page
    assert not (course.root / "feedback" / "broken").exists()


def test_the_jobs_ran_on_the_dask_workers(graded_on_dask, dask_client):
    _, _, tasks, _ = graded_on_dask
    workers = set(dask_client.scheduler_info()["workers"])
    jobs = [t for t in tasks if str(t["key"]).startswith("run_job-")]
    # One task per submission that reached grading (the broken notebook is caught before).
    assert len(jobs) == 2, tasks
    assert all(t["status"] == "OK" for t in jobs), jobs
    assert {t["worker"] for t in jobs} <= workers


def test_every_worker_had_zygotes_while_grading_and_none_after(graded_on_dask, dask_client):
    *_, (during, after) = graded_on_dask
    assert set(during) == set(dask_client.scheduler_info()["workers"])
    assert all(folder is not None for folder in during.values()), during
    assert set(after.values()) == {None}, "the zygotes end with the run"


class FailsFor(Executor):
    """Runs jobs on a thread pool, except ``student``'s: its future fails as a lost worker's
    would."""

    def __init__(self, student: str):
        self.student = student
        self.pool = ThreadPoolExecutor(max_workers=1)

    def submit(self, fn, /, *args, **kwargs):
        parcel = args[0]
        if parcel.job.student == self.student:
            future = Future()
            future.set_exception(RuntimeError("the worker went away"))
            return future
        return self.pool.submit(fn, *args, **kwargs)

    def shutdown(self, wait=True, **kwargs):
        self.pool.shutdown(wait=wait, **kwargs)


@pytest.fixture(scope="module")
def worker_failure(tmp_path_factory):
    course = copy_course(tmp_path_factory.mktemp("worker-failure") / "course", with_release=True)
    _class(course, wrong=False)
    refs = reference_answers(course, ASSIGNMENT)
    write_submission(course, "unlucky", ASSIGNMENT, build_submission(course, ASSIGNMENT, refs))
    executor = FailsFor("unlucky")
    try:
        outcomes = batch.grade(course, [ASSIGNMENT], executor=executor)
    finally:
        executor.shutdown()
    return course, {o.student: o for o in outcomes}


def test_a_failed_worker_fails_its_student_and_the_batch_goes_on(worker_failure):
    course, outcomes = worker_failure
    assert outcomes["unlucky"].status == batch.FAILED
    assert outcomes["unlucky"].score is None
    assert outcomes["right"].status == batch.GRADED
    assert outcomes["right"].score == outcomes["right"].max_score
    assert outcomes["broken"].status == batch.FAILED
    assert "unlucky" not in _cell_scores(course)
    assert (course.root / "feedback" / "right" / ASSIGNMENT / f"{ASSIGNMENT}.html").is_file()


def test_a_failed_worker_is_named_in_the_detail(worker_failure):
    _, outcomes = worker_failure
    assert "grading worker failed" in outcomes["unlucky"].detail, outcomes["unlucky"].detail
