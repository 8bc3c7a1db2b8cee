"""Benchmark: where grading one notebook spends its CPU, phase by phase, per assignment.

Grades a small class (correct, wrong and empty submissions: `grading.build_class`) in this one
process (``workers=1``: each job runs here, one at a time) and times with `time.process_time` the
job's nbgrader autograde (its kernel not counted), the feedback page (nbgrader's
generate_feedback) and the grader's recording of the result (`course.grading.batch._record`);
the kernel's CPU (the answer, its tests, the probes) is read from the kernels' cgroup, where the
machine gives one. Prints the median of the warm submissions (each assignment's first is left
out: it pays for imports). A benchmark, not a test; run it on a quiet machine.

    .venv/bin/python benchmarks/phases.py --students 6
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from grading import build_class, kernels_cpu  # noqa: E402
from nbgrader.apps import NbGraderAPI  # noqa: E402

from course.grading import batch  # noqa: E402

PHASES = ["autograde in the job", "the kernel", "feedback page", "recording"]


def grade_timed(course, assignment: str) -> dict[str, list[float]]:
    """Grade one assignment here, with each submission's phases timed."""
    samples: dict[str, list[float]] = defaultdict(list)
    autograde, feedback, record = (
        NbGraderAPI.autograde,
        NbGraderAPI.generate_feedback,
        batch._record,
    )
    recording = False  # an older grader's recording ran autograde again: not the job's

    def timed_autograde(api, *args, **kwargs):
        if recording:
            return autograde(api, *args, **kwargs)
        kernel, start = kernels_cpu(), time.process_time()
        try:
            return autograde(api, *args, **kwargs)
        finally:
            samples["autograde in the job"].append(time.process_time() - start)
            samples["the kernel"].append(kernels_cpu() - kernel)

    def timed_feedback(api, *args, **kwargs):
        start = time.process_time()
        try:
            return feedback(api, *args, **kwargs)
        finally:
            samples["feedback page"].append(time.process_time() - start)

    def timed_record(*args, **kwargs):
        nonlocal recording
        recording, start = True, time.process_time()
        try:
            return record(*args, **kwargs)
        finally:
            recording = False
            samples["recording"].append(time.process_time() - start)

    NbGraderAPI.autograde, NbGraderAPI.generate_feedback = timed_autograde, timed_feedback
    batch._record = timed_record
    try:
        batch.grade(course, [assignment], workers=1)
    finally:
        NbGraderAPI.autograde, NbGraderAPI.generate_feedback = autograde, feedback
        batch._record = record
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=6)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="phases-") as tmp:
        course = build_class(Path(tmp) / "course", args.students)
        batch.check_references(course, course.assignments)
        table = {a: grade_timed(course, a) for a in course.assignments}
    print("CPU seconds per notebook: median of the submissions graded after each one's first")
    print(f"{'phase':22}" + "".join(f"{a:>18}" for a in table))
    totals = dict.fromkeys(table, 0.0)
    for phase in PHASES:
        row = f"{phase:22}"
        for assignment, samples in table.items():
            warm = samples[phase][1:]
            median = statistics.median(warm) if warm else 0.0
            totals[assignment] += median
            row += f"{median:18.2f}"
        print(row)
    print(f"{'total':22}" + "".join(f"{totals[a]:18.2f}" for a in table))


if __name__ == "__main__":
    main()
