"""Before a cluster grades anything, every worker says what its sandbox enforces: the run says it
once, grouped, and is refused where a worker's kernels would get no namespaces at all, unless the
instructor allows it (`course.grading.cluster.check_workers`). A scheduler that is not one is
said plainly."""

from __future__ import annotations

import pytest

from course.grading.cluster import check_workers
from course.grading.coursedir import CourseError

USER_NS = "own file view, processes, network and IPC (a user namespace: ...)"
ROOT = "own file view, processes, network and IPC, a uid of its own; a cgroup"
BARE = ("namespaces are not allowed here (No space left on device)", "limits only: ...")


def test_workers_that_sandbox_are_said_once_per_kind():
    said = check_workers({"tcp://a": (None, USER_NS), "tcp://b": (None, USER_NS)}, False)
    assert said == f"sandbox on 2 of 2 dask workers: {USER_NS}"
    mixed = check_workers({"tcp://a": (None, USER_NS), "tcp://b": (None, ROOT)}, False)
    assert mixed.splitlines() == [
        f"sandbox on 1 of 2 dask workers: {USER_NS}",
        f"sandbox on 1 of 2 dask workers: {ROOT}",
    ]


def test_one_worker_without_a_sandbox_refuses_the_run():
    with pytest.raises(CourseError) as refused:
        check_workers({"tcp://a": (None, ROOT), "tcp://b": BARE}, False)
    message = str(refused.value)
    assert "1 of 2 dask workers cannot sandbox a kernel" in message
    assert "No space left on device" in message and "--allow-unsandboxed" in message


def test_allowed_the_run_goes_on_and_says_what_holds():
    said = check_workers({"tcp://a": BARE}, True)
    assert said == "sandbox on 1 of 1 dask workers: limits only: ..."


def test_a_cluster_without_workers_is_refused():
    with pytest.raises(CourseError, match="no worker"):
        check_workers({}, True)


def test_a_scheduler_address_that_is_none_is_said_plainly():
    from course.cli import _dask_client

    with pytest.raises(CourseError, match="no dask scheduler answers at no-such-scheduler"):
        _dask_client("no-such-scheduler")
