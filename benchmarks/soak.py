"""Soak benchmark: grade a synthetic class again and again beside CPU hogs; count what went wrong.

Prints the notebooks graded, the spurious failures (a failure of a submission that is not broken,
or any failure the grader calls its own) and the submissions whose status or score differed
between rounds. The goal is 0 and 0 over at least 500 notebooks with two hogs on two cores.
A benchmark, not a test: it takes a while (about 3 s a notebook under that load).

    .venv/bin/python benchmarks/soak.py --students 25 --rounds 5 --hogs 2 --workers 2
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))
sys.path.insert(0, str(REPO / "tests"))

from grading import KINDS, build_class  # noqa: E402

from course.grading import batch  # noqa: E402
from course_testing import cpu_hogs  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--students", type=int, default=25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside the grader")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    seen: dict[tuple[str, str], set] = defaultdict(set)
    graded = spurious = 0
    with cpu_hogs(args.hogs):
        with tempfile.TemporaryDirectory(prefix="soak-") as tmp:
            course = build_class(Path(tmp) / "course", args.students)
            for round_ in range(1, args.rounds + 1):
                start = time.perf_counter()
                outcomes = batch.grade(course, course.assignments, workers=args.workers)
                for o in outcomes:
                    broken = KINDS[int(o.student[1:]) % len(KINDS)] == "broken"
                    graded += 1
                    if o.grader_fault or (o.status == batch.FAILED and not broken):
                        spurious += 1
                        print(f"  spurious: {o.assignment} {o.student}: {o.detail}")
                    seen[(o.assignment, o.student)].add((o.status, o.score))
                print(
                    f"round {round_}: {len(outcomes)} notebooks in "
                    f"{time.perf_counter() - start:.0f} s; {batch.summary(outcomes)}"
                )
    differing = sorted(key for key, values in seen.items() if len(values) > 1)
    print(
        f"\n{graded} notebooks graded beside {args.hogs} CPU hogs; "
        f"{spurious} spurious failures; {len(differing)} submissions graded differently"
    )
    for assignment, student in differing:
        print(f"  {assignment} {student}: {sorted(seen[(assignment, student)], key=str)}")


if __name__ == "__main__":
    main()
