"""Benchmark: how long each notebook takes to run top to bottom, as a student runs it.

Executes what a student who has finished runs, the release notebook with the reference answers in
its answer cells (``--source``: the source notebook, hidden tests included, which students never
run), with nbclient in a fresh kernel, with ``NBGRADER_EXECUTION`` unset so the widgets draw as
they do in Jupyter, and prints the median over ``--repeat`` runs of: the time the cells took
(what "Run All" costs a student once the kernel is up), the slowest cell, the wall time including
starting and stopping the kernel, and the CPU time the kernel process used from its start to the
end of the last cell (on a busy machine the wall times grow with the load; the CPU time much
less, so it tells what a quiet machine would take). A benchmark, not a test.

    .venv/bin/python benchmarks/notebook_times.py --repeat 3
    .venv/bin/python benchmarks/notebook_times.py 01_requires_grad --cells   # per-cell medians
    .venv/bin/python benchmarks/notebook_times.py --source                   # hidden tests too
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.util import run_sync

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from course.grading import shell_wakeup  # noqa: E402
from course.grading.coursedir import Course  # noqa: E402
from course.submission import build_submission, reference_answers  # noqa: E402
from course_testing import student_kernel_env  # noqa: E402


def notebook(assignment: str, source: bool) -> nbformat.NotebookNode:
    """The source notebook, or the release notebook with the reference answers filled in."""
    if source:
        return nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    course = Course.at(REPO)
    return build_submission(course, assignment, reference_answers(course, assignment))


class TimedClient(NotebookClient):
    """A NotebookClient that records how long each code cell took."""

    def __init__(self, nb, **kwargs):
        super().__init__(nb, **kwargs)
        self.cell_times: dict[int, float] = {}

    async def async_execute_cell(self, cell, cell_index, *args, **kwargs):
        start = time.perf_counter()
        try:
            return await super().async_execute_cell(cell, cell_index, *args, **kwargs)
        finally:
            if cell.cell_type == "code":
                self.cell_times[cell_index] = time.perf_counter() - start

    execute_cell = run_sync(async_execute_cell)


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far, from /proc (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_once(nb: nbformat.NotebookNode) -> tuple[float, float, float | None, dict[int, float]]:
    """(wall seconds with kernel start and stop, seconds of the cells, CPU seconds the kernel
    used from its start to the last cell's end or None where /proc cannot tell, seconds of each
    cell). Runs a copy: ``nb`` keeps no outputs."""
    nb = copy.deepcopy(nb)
    cpu = None
    with tempfile.TemporaryDirectory() as scratch:
        client = TimedClient(
            nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": scratch}}
        )
        start = time.perf_counter()
        with client.setup_kernel(env=student_kernel_env()):
            for index, cell in enumerate(nb.cells):
                client.execute_cell(cell, index)
            pid = getattr(client.km.provisioner, "pid", None)
            with contextlib.suppress(OSError, ValueError, IndexError, TypeError):
                cpu = _cpu_seconds(pid)
        wall = time.perf_counter() - start
    return wall, sum(client.cell_times.values()), cpu, client.cell_times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("assignments", nargs="*", help="assignment ids (default: every one)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per notebook (default 3)")
    parser.add_argument("--cells", action="store_true", help="also print each cell's median")
    parser.add_argument(
        "--source", action="store_true", help="run the source notebooks, hidden tests included"
    )
    args = parser.parse_args(argv)
    shell_wakeup.install()  # a widget cell's missed reply would cost its whole timeout (issue 38)
    chosen = args.assignments or sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
    what = "source notebooks" if args.source else "release notebooks with the reference answers"
    print(f"{what}, median of {args.repeat} run(s); NBGRADER_EXECUTION unset (widgets draw)")
    print(
        f"{'notebook':20} {'cells s':>8} {'slowest cell':>16} {'with kernel s':>14} "
        f"{'kernel cpu s':>13}"
    )
    for assignment in chosen:
        nb = notebook(assignment, args.source)
        runs = [run_once(nb) for _ in range(args.repeat)]
        walls = [r[0] for r in runs]
        cells = [r[1] for r in runs]
        cpus = [r[2] for r in runs if r[2] is not None]
        per_cell = {i: statistics.median(r[3][i] for r in runs) for i in runs[0][3]}
        slowest = max(per_cell, key=per_cell.get)
        cpu = f"{statistics.median(cpus):13.2f}" if cpus else f"{'?':>13}"
        print(
            f"{assignment:20} {statistics.median(cells):8.2f} "
            f"{f'#{slowest} {per_cell[slowest]:.2f}s':>16} {statistics.median(walls):14.2f} {cpu}"
        )
        if args.cells:
            for i, seconds in per_cell.items():
                grade_id = nb.cells[i].metadata.get("nbgrader", {}).get("grade_id", "")
                print(f"    cell {i:3} {seconds:6.3f}s  {grade_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
