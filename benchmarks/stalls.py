"""Benchmark: how often a headless run of a notebook stalls on a busy machine (issue 38).

Runs each notebook ``--runs`` times, each in a fresh kernel, as ``jupyter nbconvert --execute`` and
papermill do (nbclient, errors kept as outputs, the widgets drawing: `course_testing.run_headless`),
beside ``--hogs`` processes that only burn CPU. Prints each run's wall time (kernel start and stop
included) and every cell that waited more than 20 s, then for each notebook the median wall time
and the runs that stalled: a cell whose reply was taken only when its ``--timeout`` ran out.
``--unpatched`` leaves out the course's patch of jupyter_client (`course.grading.shell_wakeup`),
for the rate without it; ``--timeout 60`` makes each stall cost a minute instead of five.
A benchmark, not a test.

    .venv/bin/python benchmarks/stalls.py --runs 20 --hogs 2              # the release notebooks
    .venv/bin/python benchmarks/stalls.py 03_grad_zeroing --source --runs 100
    .venv/bin/python benchmarks/stalls.py --unpatched --timeout 60 --runs 20
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from course.grading import shell_wakeup  # noqa: E402
from course_testing import cpu_hogs, run_headless, stalled_cells  # noqa: E402

SLOW_CELL = 20.0  # seconds: a cell that waited longer is printed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="assignment ids (default: every one)")
    parser.add_argument("--runs", type=int, default=10, help="runs per notebook (default 10)")
    parser.add_argument("--hogs", type=int, default=2, help="busy processes beside (default 2)")
    parser.add_argument("--timeout", type=int, default=300, help="cell timeout, s (default 300)")
    parser.add_argument(
        "--source", action="store_true", help="the source notebooks (default: the release ones)"
    )
    parser.add_argument(
        "--unpatched", action="store_true", help="jupyter_client as released, without the patch"
    )
    args = parser.parse_args(argv)
    if not args.unpatched:
        shell_wakeup.install()
    kind = "source" if args.source else "release"
    chosen = args.assignments or sorted(p.name for p in (REPO / kind).iterdir() if p.is_dir())
    print(
        f"{kind} notebooks, {args.runs} run(s) each beside {args.hogs} CPU hog(s), cell timeout "
        f"{args.timeout} s, {'without' if args.unpatched else 'with'} the course's patch of "
        "jupyter_client"
    )
    totals = []
    with cpu_hogs(args.hogs):
        for assignment in chosen:
            path = REPO / kind / assignment / f"{assignment}.ipynb"
            walls, stalled = [], 0
            for run in range(1, args.runs + 1):
                nb = nbformat.read(path, as_version=4)
                with tempfile.TemporaryDirectory() as scratch:
                    start = time.perf_counter()
                    waited = run_headless(nb, args.timeout, Path(scratch))
                    walls.append(time.perf_counter() - start)
                stalls = stalled_cells(waited, args.timeout)
                stalled += bool(stalls)
                slow = [
                    f"cell {i} waited {s:.0f} s{' (stalled)' if i in stalls else ''}: "
                    f"{nb.cells[i].source.splitlines()[0][:50]}"
                    for i, s in waited.items()
                    if s > SLOW_CELL
                ]
                print(
                    f"  {assignment} run {run}: {walls[-1]:.1f} s", *slow, sep="\n    ", flush=True
                )
            totals.append((assignment, statistics.median(walls), stalled))
    print(f"\n{'notebook':20} {'median s':>9} {'stalled runs':>13}")
    for assignment, median, stalled in totals:
        print(f"{assignment:20} {median:9.1f} {f'{stalled}/{args.runs}':>13}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
