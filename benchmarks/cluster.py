"""Benchmark: one class graded on this machine (`grade --workers N`) and on a dask cluster of N
workers started as a user starts them (`dask scheduler`, `dask worker`, each worker unprivileged
in a mount namespace of its own where the course does not exist: `course_testing.dask_processes`),
in one run, for each N asked: the class's wall time, and CPU seconds per notebook; and what
starting one worker's zygotes costs (once per worker and run).

CPU is read from a cgroup per process tree (run as root): the local `grade` command (its kernels'
cgroups lie inside it), each dask worker (its zygotes and kernels included: it is unprivileged,
so they get no cgroup of their own) and the `grade` command that drives the cluster. A worker's
CPU counts from just before the run (its dask start-up is not counted; the zygotes it starts for
the run are). The grades must be identical both ways.

    .venv/bin/python benchmarks/cluster.py --students 8 --workers 1 2
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "tests"), str(REPO / "benchmarks")]

from distributed import Client  # noqa: E402
from grading import build_class, cell_scores, make_references  # noqa: E402

from course.grading import batch, cluster, sandbox  # noqa: E402
from course.grading.coursedir import Course  # noqa: E402
from course.grading.warm import prefix_texts  # noqa: E402
from course_testing import dask_processes, venv_env  # noqa: E402


class CpuGroup:
    """A cgroup of the CPU accounting hierarchy that a process tree joins before it execs."""

    def __init__(self, name: str):
        homes = sandbox._cgroup_homes()  # the sandbox's own view of the cgroupfs
        if "cpuacct" not in homes and "unified" not in homes:
            raise SystemExit("needs root and a cgroupfs with CPU accounting")
        self.v1 = "cpuacct" in homes
        self.path = Path(homes["cpuacct" if self.v1 else "unified"]) / f"course-bench-{name}"
        self.path.mkdir(exist_ok=True)
        self.start = self._usage()  # a leftover of an interrupted run counts from here

    def join(self) -> None:
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _usage(self) -> float:
        if self.v1:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    def seconds(self) -> float:
        """CPU seconds of the processes in it since it was made here."""
        return self._usage() - self.start

    def remove(self) -> None:
        with contextlib.suppress(OSError):  # a child cgroup of a kernel not swept yet
            for child in sorted(self.path.rglob("*"), reverse=True):
                if child.is_dir():
                    child.rmdir()
            self.path.rmdir()


def grade(course: Course, group: CpuGroup, *options: str) -> float:
    """`python -m course grade` on the whole class, in ``group``: wall seconds."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "course", "grade", *course.assignments, *options],
        cwd=course.root,
        env=venv_env(),
        capture_output=True,
        text=True,
        preexec_fn=group.join,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: the broken hand-ins
    return time.perf_counter() - start


def zygote_start(address: str, course: Course, groups: list[CpuGroup]) -> float:
    """CPU seconds one worker spends starting the zygotes of every notebook (`cluster.Zygotes`),
    the median over ``groups``' workers."""
    prefixes = prefix_texts(batch.check_references(course, course.assignments))
    before = [g.seconds() for g in groups]
    with Client(address) as client:
        client.register_plugin(cluster.Zygotes(prefixes), name=cluster.PLUGIN)
        client.run(lambda dask_worker: dask_worker.plugins[cluster.PLUGIN].warm_up.wait())
        used = [g.seconds() - b for g, b in zip(groups, before)]
        cluster.release(client)
    return statistics.median(used)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()

    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
        base = build_class(Path(tmp) / "base", args.students)
        make_references(base, 2)
        notebooks = sum(len(base.submitted_students(a)) for a in base.assignments)
        for workers in args.workers:
            local = Course.at(shutil.copytree(base.root, Path(tmp) / f"local{workers}"))
            remote = Course.at(shutil.copytree(base.root, Path(tmp) / f"remote{workers}"))
            mine = CpuGroup(f"local{workers}")
            wall = grade(local, mine, "--workers", str(workers))
            rows.append((f"local, {workers} workers", wall, mine.seconds(), 0.0))
            groups = [CpuGroup(f"w{workers}-{i}") for i in range(workers)]
            driver = CpuGroup(f"driver{workers}")
            with dask_processes(workers, [Path(tmp)], before=lambda i: groups[i].join) as (
                address,
                _,
            ):
                if workers == max(args.workers):
                    zygotes = zygote_start(address, remote, groups)
                started = sum(g.seconds() for g in groups)
                wall = grade(remote, driver, "--scheduler", address)
                used = sum(g.seconds() for g in groups) - started
            rows.append((f"cluster, {workers} workers", wall, used, driver.seconds()))
            assert cell_scores(local) == cell_scores(remote), "the grades differ"
            for group in [mine, driver, *groups]:
                group.remove()

    print(f"{notebooks} notebooks ({args.students} students x 4 assignments, a broken hand-in's")
    print("notebook counted too); grades identical both ways\n")
    print("| run | wall s | workers' CPU s / notebook | grader's CPU s / notebook | total |")
    print("| --- | --- | --- | --- | --- |")
    for name, wall, work, drive in rows:
        total = (work + drive) / notebooks
        worker = f"{work / notebooks:.2f}" if drive else "-"
        grader = f"{drive / notebooks:.2f}" if drive else "-"
        print(f"| {name} | {wall:.1f} | {worker} | {grader} | {total:.2f} |")
    print(f"\nstarting one worker's zygotes (4 notebooks): {zygotes:.1f} CPU s (median)")


if __name__ == "__main__":
    main()
