"""Benchmark: stock sequential nbgrader against `python -m course grade --workers N`.

Builds a synthetic class from the real four assignments (correct, wrong, empty and broken
submissions), grades the same class both ways in one run, checks that the grades are identical
and prints the times, the CPU seconds of each way's processes and the ratios (median of
--repeat runs). A benchmark, not a test: run it on demand on a quiet machine (the CPU seconds
are less sensitive to a busy one than the wall times).

Both ways use this course's config (`GradingExecute`), whose hidden tests compare against the
reference's records for each submission's draw. `grade` makes them for the whole class, a batch
to a kernel, inside its time; stock nbgrader, which has no batch, would start a reference kernel
for every submission: its records are made before its clock starts, so "stock" times nbgrader's
own grading.

    .venv/bin/python benchmarks/grading.py --students 20 --workers 2 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from course import release  # noqa: E402
from course.grading import (  # noqa: E402
    batch,
    draws,  # noqa: E402
    sandbox,
)
from course.grading.coursedir import CONFIG_FILE, Course  # noqa: E402
from course.grading.draws import course_secret  # noqa: E402
from course.submission import (  # noqa: E402
    answer_file,
    answer_names,
    build_submission,
    reference_answers,
    write_submission,
)

KINDS = ["correct", "correct", "wrong", "wrong", "empty", "broken"]  # cycled over the class


def build_class(root: Path, students: int) -> Course:
    """A released scratch course with ``students`` submissions for every assignment."""
    root.mkdir(parents=True)
    shutil.copy2(REPO / CONFIG_FILE, root / CONFIG_FILE)
    for folder in ("source", "fixtures"):
        shutil.copytree(REPO / folder, root / folder)
    course = Course.at(root)
    release.release(course, [])
    course_secret(root)  # made once: both copies draw the same hidden inputs
    for assignment in course.assignments:
        refs = reference_answers(course, assignment)
        wrong = {  # each exercise's first wrong answer (names sort "correct_" first)
            e: answer_file(course, assignment, e, n)
            for e in refs
            for n in [n for n in answer_names(course, assignment, e) if n.startswith("wrong_")][:1]
        }
        for i in range(students):
            kind = KINDS[i % len(KINDS)]
            answers = {"correct": refs, "wrong": {**refs, **wrong}}.get(kind, {})
            path = write_submission(
                course, f"s{i:03d}", assignment, build_submission(course, assignment, answers)
            )
            if kind == "broken":
                path.write_text(path.read_text()[:500])
    return course


def make_references(course: Course, workers: int) -> None:
    """The reference's records for every hand-in of the class that has a readable time."""
    wanted: dict[str, set[int]] = {}
    for assignment in course.assignments:
        for student in course.submitted_students(assignment):
            draw = draws.hand_in_draw(course.root, assignment, student)
            wanted.setdefault(assignment, set()).add(draw)
    batch.make_references(course, wanted, workers)


def cell_scores(course: Course) -> dict:
    scores = {}
    with course.api().gradebook as gb:
        for assignment in course.assignments:
            for sub in gb.assignment_submissions(assignment):
                for nb in sub.notebooks:
                    for g in nb.grades:
                        scores[(assignment, sub.student.id, g.name)] = g.auto_score
    return scores


def kernels_cpu() -> float:
    """CPU seconds used so far by the grading kernels' cgroups (`course.grading.sandbox`), 0
    where the machine gives kernels none."""
    homes = sandbox._cgroup_homes()  # the sandbox's own view of the cgroupfs
    if "cpuacct" in homes:
        path = Path(homes["cpuacct"], sandbox.CGROUP_PARENT, "cpuacct.usage")
        return int(path.read_text()) / 1e9 if path.exists() else 0.0
    if "unified" in homes:
        path = Path(homes["unified"], sandbox.CGROUP_PARENT, "cpu.stat")
        if path.exists():
            fields = dict(line.split() for line in path.read_text().splitlines())
            return int(fields["usage_usec"]) / 1e6
    return 0.0


def children_cpu() -> float:
    """CPU seconds of the processes this one started and waited for, and of theirs: on a
    shared machine it grows with the work, not with the load."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_stock(course: Course) -> tuple[float, float]:
    """Stock nbgrader: autograde then generate_feedback, one assignment after another;
    (wall seconds, CPU seconds)."""
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    start, cpu = time.perf_counter(), children_cpu()
    for assignment in course.assignments:
        for command in ("autograde", "generate_feedback"):
            subprocess.run(
                [sys.executable, "-m", "nbgrader", command, assignment],
                cwd=course.root,
                env=env,
                capture_output=True,
                check=False,
            )
    return time.perf_counter() - start, children_cpu() - cpu


def run_ours(course: Course, workers: int) -> tuple[float, float]:
    """`python -m course grade`: (wall seconds, CPU seconds). Its kernels fork from zygotes
    and nobody waits for them, so their CPU comes from their cgroups (a cold kernel, as stock
    nbgrader starts, is a child waited for: counted once, in `children_cpu`)."""
    start, cpu = time.perf_counter(), children_cpu() + kernels_cpu()
    done = subprocess.run(
        [sys.executable, "-m", "course", "grade", *course.assignments, "--workers", str(workers)],
        cwd=course.root,
        capture_output=True,
        text=True,
    )
    # 1: some submissions failed, as the class's broken ones must
    assert done.returncode in (0, 1), done.stdout + done.stderr
    return time.perf_counter() - start, children_cpu() + kernels_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=20)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    stock_times, our_times = [], []
    for run in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
            base = build_class(Path(tmp) / "stock", args.students)
            ours = Course.at(shutil.copytree(base.root, Path(tmp) / "ours"))
            make_references(base, args.workers)
            stock_times.append(run_stock(base))
            our_times.append(run_ours(ours, args.workers))
            stock, mine = cell_scores(base), cell_scores(ours)
            # Stock keeps an ungraded row for a submission it failed on; we keep none.
            graded = {k: v for k, v in stock.items() if v is not None}
            assert graded == {k: mine.get(k) for k in graded}, "the grades differ"
            assert set(mine) <= set(stock), "we graded something stock nbgrader did not"
            notebooks = args.students * len(base.assignments)
        print(
            f"run {run + 1}: {notebooks} notebooks; stock {stock_times[-1][0]:.1f} s "
            f"({stock_times[-1][1]:.0f} CPU s), ours ({args.workers} workers) "
            f"{our_times[-1][0]:.1f} s ({our_times[-1][1]:.0f} CPU s); grades identical"
        )

    print(f"\nmedian over {args.repeat} runs, {notebooks} notebooks:")
    medians = {}
    for name, runs in (("stock nbgrader (sequential)", stock_times), ("course grade", our_times)):
        wall, cpu = (statistics.median(r[i] for r in runs) for i in (0, 1))
        medians[name] = wall, cpu
        print(
            f"  {name:28} {wall:7.1f} s  {wall / notebooks:5.2f} s/notebook   "
            f"{cpu:7.1f} CPU s  {cpu / notebooks:5.2f} CPU s/notebook"
        )
    (stock_wall, stock_cpu), (our_wall, our_cpu) = medians.values()
    print(f"  throughput ratio ({args.workers} workers): {stock_wall / our_wall:.2f}x")
    print(f"  CPU ratio: {stock_cpu / our_cpu:.2f}x")


if __name__ == "__main__":
    main()
