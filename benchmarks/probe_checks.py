"""Benchmark: what the probes' tamper checks (`course.lesson.pristine`) cost per notebook.

Runs each source notebook's code (reference solutions included) in this process, then every hidden
block's probes, with the checks on and with them replaced by a no-op, and prints the medians of
--repeat runs. A benchmark, not a test: run it on demand on a quiet machine.

    .venv/bin/python benchmarks/probe_checks.py --repeat 5
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
import warnings
from pathlib import Path

import nbformat

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from course.grading.probes import split_hidden, test_cells  # noqa: E402
from course.lesson import probes  # noqa: E402


def _namespace(source: Path) -> dict:
    """The notebook's names after its code cells ran (hidden blocks left out, as in grading)."""
    nb = nbformat.read(source, as_version=4)
    namespace: dict = {"__name__": "__main__"}
    for cell in nb.cells:
        if cell.cell_type == "code":
            code = split_hidden(cell.source)[0]
            if not code.lstrip().startswith(("%", "!")):
                exec(compile(_without_magics(code), str(source), "exec"), namespace)
    return namespace


def _without_magics(code: str) -> str:
    return "\n".join(line for line in code.splitlines() if not line.lstrip().startswith("%"))


def _probe_seconds(blocks: list[str], namespace: dict) -> tuple[float, int]:
    calls = 0
    changed = probes._SNAPSHOT.changed

    def counting():
        nonlocal calls
        calls += 1
        return changed()

    probes._SNAPSHOT.changed = counting
    start = time.perf_counter()
    for hidden in blocks:
        probes.collect(hidden, namespace)
    seconds = time.perf_counter() - start
    del probes._SNAPSHOT.changed
    return seconds, calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        "notebook | probes, checks on (s) | checks off (s) | checks per run | cost per check (ms)"
    )
    for source in sorted((REPO / "source").glob("*/*.ipynb")):
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            namespace = _namespace(source)
        blocks = [hidden for _, hidden in test_cells(nbformat.read(source, as_version=4))]
        on, off = [], []
        for _ in range(args.repeat):
            seconds, calls = _probe_seconds(blocks, namespace)
            on.append(seconds)
            probes._SNAPSHOT.changed = list  # a no-op: returns []
            off.append(_probe_seconds(blocks, namespace)[0])  # and takes the no-op away
        with_checks, without = statistics.median(on), statistics.median(off)
        per_check = (with_checks - without) / calls * 1000
        print(f"{source.stem} | {with_checks:.3f} | {without:.3f} | {calls} | {per_check:.2f}")


if __name__ == "__main__":
    main()
