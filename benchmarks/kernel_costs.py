"""Benchmark: where the time of grading one notebook goes, with a cold kernel and a warm one.

For each assignment, runs the source notebook (solutions and hidden tests) through the grading
Execute step (`course.grading.execute.GradingExecute`) twice: cold (a new Python, imports, the whole
lesson) and warm (forked from a zygote that ran the lesson's locked cells), and prints the median
seconds of launching the kernel, the first cell (imports), the rest of the lesson before the first
exercise, the exercises and tests, and waiting for the kernel to answer plus stopping it. A
benchmark, not a test.

    .venv/bin/python benchmarks/kernel_costs.py --repeat 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import nbformat
from nbclient.util import run_sync

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from course.grading.batch import check_references  # noqa: E402
from course.grading.coursedir import Course  # noqa: E402
from course.grading.execute import GradingExecute  # noqa: E402
from course.grading.warm import WarmUp, prefix_sources, prefix_texts  # noqa: E402

# "ready+shutdown": waiting for the started kernel's first answer, and stopping it.
PHASES = ["launch", "first cell", "rest of lesson", "exercises+tests", "ready+shutdown"]


class TimedExecute(GradingExecute):
    """GradingExecute that adds up where its time goes."""

    def preprocess(self, nb, resources=None, km=None):
        self.times = defaultdict(float)
        self._lesson = len(prefix_sources(nb))
        self._code_seen = 0
        start = time.perf_counter()
        result = super().preprocess(nb, resources, km)
        self.times["ready+shutdown"] = time.perf_counter() - start - sum(self.times.values())
        return result

    async def async_start_new_kernel(self, **kwargs):
        start = time.perf_counter()
        await super().async_start_new_kernel(**kwargs)
        await self.async_start_new_kernel_client()  # until the kernel answers
        self.times["launch"] += time.perf_counter() - start

    start_new_kernel = run_sync(async_start_new_kernel)

    async def async_start_new_kernel_client(self):
        if self.kc is None:
            return await super().async_start_new_kernel_client()
        return self.kc

    start_new_kernel_client = run_sync(async_start_new_kernel_client)

    def preprocess_cell(self, cell, resources, index):
        start = time.perf_counter()
        result = super().preprocess_cell(cell, resources, index)
        if cell.cell_type == "code" and cell.source.strip():
            self._code_seen += 1
            phase = (
                "first cell"
                if self._code_seen == 1
                else "rest of lesson"
                if self._code_seen <= self._lesson
                else "exercises+tests"
            )
            self.times[phase] += time.perf_counter() - start
        return result


def run(notebook: Path, warm_dir: str) -> dict[str, float]:
    nb = nbformat.read(notebook, as_version=4)
    with tempfile.TemporaryDirectory(prefix="costs-") as workdir:
        execute = TimedExecute(warm_dir=warm_dir, course_root=str(REPO), timeout=120)
        info = {"assignment": notebook.parent.name, "notebook": notebook.stem, "student": "bench"}
        execute.preprocess(nb, {"metadata": {"path": workdir}, "nbgrader": info})
    return execute.times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    os.chdir(REPO)  # GradingExecute finds the trusted cells in source/, as under nbgrader
    os.environ["NBGRADER_EXECUTION"] = "autograde"
    with tempfile.TemporaryDirectory(prefix="warm-") as warm_dir:
        print(f"{'notebook':18} {'kernel':5} " + " ".join(f"{p:>15}" for p in PHASES) + "  total")
        for assignment in sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir()):
            prefixes = check_references(Course.at(REPO), [assignment])
            warm_up = WarmUp(prefix_texts(prefixes), Path(warm_dir))
            warm_up.wait()
            notebook = REPO / "source" / assignment / f"{assignment}.ipynb"
            try:
                for kind, folder in (("cold", ""), ("warm", warm_dir)):
                    runs = [run(notebook, folder) for _ in range(args.repeat)]
                    medians = [statistics.median(r[p] for r in runs) for p in PHASES]
                    print(
                        f"{assignment:18} {kind:5} "
                        + " ".join(f"{m:15.2f}" for m in medians)
                        + f"  {sum(medians):5.2f}"
                    )
            finally:
                warm_up.close()


if __name__ == "__main__":
    main()
