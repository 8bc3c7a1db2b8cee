"""The reference's records: what the reference solutions' probes record on each submission's
hidden inputs, made in a kernel no student code runs in.

Runs in: the grader (a worker too, when plain `nbgrader autograde` meets a draw not made yet).

A trusted kernel runs the source notebook, reference solutions included, as the grader runs a
submission (``NBGRADER_EXECUTION``: the lesson's widgets draw nothing), then every hidden block's
probes once for each draw asked for (`course.grading.draws`): one kernel serves a whole batch of
submissions, so the reference costs probes, not kernel starts. The records are kept in the course
folder, which no grading kernel can see (`course.grading.sandbox`), under the source's version:
``.course/expected/<assignment>/<notebook>-<version>/draw-<n>.json``, with what the notebook's
leading locked cells printed (`course.grading.warm.Prefix`) beside them for warm kernels.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient

from . import atomic, kernelcalls
from .hidden import split_hidden, test_cells
from .judging import read_records
from .kernelenv import ONE_THREAD
from .warm import Prefix, leading_code, prefix_sources, widget_buffer_lists

CACHE_VERSION = "6"  # bump when the record format or the way records are made changes
CHUNK = 64  # draws one reference kernel makes at most: a big class's run spreads over workers


class ReferenceError(Exception):
    """The reference solution does not pass its own probes: the source notebook needs fixing."""


def cache_dir(course_root: Path, assignment: str) -> Path:
    """Where the reference's records of an assignment are kept: in the course folder."""
    return Path(course_root) / ".course" / "expected" / assignment


def version_dir(source: Path, cache: Path) -> Path:
    """The records of this version of ``source``: named by its content, torch's version and
    `CACHE_VERSION`."""
    digest = hashlib.sha256(
        source.read_bytes() + torch.__version__.encode() + CACHE_VERSION.encode()
    ).hexdigest()[:16]
    return cache / f"{source.stem}-{digest}"


def _draw_file(folder: Path, draw: int) -> Path:
    return folder / f"draw-{draw}.json"


def _run(source: Path, draws: list[int], with_prefix: bool) -> tuple[dict, Prefix | None]:
    """Run ``source`` with its reference solutions, then every hidden block's probes for each
    of ``draws``: {draw: {grade id: records}}, and what its leading locked cells printed
    (``with_prefix``; None if it has none)."""
    nb = nbformat.read(source, as_version=4)
    lead = prefix_sources(nb)
    leading = leading_code(nb, len(lead)) if with_prefix else []
    blocks = test_cells(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = split_hidden(cell.source)[0]
    first = len(nb.cells)
    for draw in draws:
        for _, hidden in blocks:
            nb.cells.append(nbformat.v4.new_code_cell(kernelcalls.send_records(hidden, draw)))
    widgets: list = []

    def after(cell, cell_index, execute_reply) -> None:
        if leading and cell_index == leading[-1]:  # the widget models the prefix made
            widgets[:] = [copy.deepcopy(client.widget_state), widget_buffer_lists(client)]

    with tempfile.TemporaryDirectory(prefix="course-reference-") as folder:
        shutil.copytree(source.parent, folder, dirs_exist_ok=True)
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no TCP warning on every run
            on_cell_executed=after,
        )
        # CellExecutionError: the source notebook itself fails
        client.execute(env={**os.environ, **ONE_THREAD, "NBGRADER_EXECUTION": "autograde"})
    made: dict[int, dict[str, list]] = {}
    cells = iter(nb.cells[first:])
    for draw in draws:
        for grade_id, _ in blocks:
            found = read_records(next(cells).outputs)
            bad = [r.get("title") for r in found or [] if "record" not in r]
            if found is None or bad:
                raise ReferenceError(
                    f"{source}: the reference fails the probes of {grade_id} on draw {draw}: {bad}"
                )
            made.setdefault(draw, {})[grade_id] = found
    prefix = None
    if widgets:
        ran = [nb.cells[i] for i in leading]
        outputs, counts = [c.outputs for c in ran], [c.execution_count for c in ran]
        prefix = Prefix(lead, outputs, counts, *widgets)
    return made, prefix


def prefix(source: Path, cache: Path) -> Path | None:
    """The file of what ``source``'s leading locked cells printed in the reference's kernel (for
    kernels forked warm, `course.grading.warm`), made once per version with the records of draw
    0 (which show that the reference passes its own probes); None if it has no such cells."""
    folder = version_dir(source, cache)
    path = folder / "prefix.json"
    if not _draw_file(folder, 0).is_file():
        made, recorded = _run(source, [0], with_prefix=True)
        folder.mkdir(parents=True, exist_ok=True)
        if recorded is not None:  # before the records: a reader that finds them finds it too
            recorded.save(path)
        atomic.write_text(_draw_file(folder, 0), json.dumps(made[0]))
    return path if path.is_file() else None


def records(source: Path, cache: Path, draws: Iterable[int]) -> dict[int, dict[str, list]]:
    """The reference's records of ``source`` for each of ``draws``, by grade id: read where they
    were made before, else made now, `CHUNK` draws to a kernel."""
    folder = version_dir(source, cache)
    wanted = sorted(set(draws))
    found = {d: json.loads(p.read_text()) for d in wanted if (p := _draw_file(folder, d)).is_file()}
    missing = [d for d in wanted if d not in found]
    for start in range(0, len(missing), CHUNK):
        made, _ = _run(source, missing[start : start + CHUNK], with_prefix=False)
        folder.mkdir(parents=True, exist_ok=True)
        for draw, by_cell in made.items():  # a concurrent grader reads all of a file or none
            atomic.write_text(_draw_file(folder, draw), json.dumps(by_cell))
        found.update(made)
    return found


def missing_chunks(source: Path, cache: Path, draws: Iterable[int]) -> list[list[int]]:
    """The draws of ``source`` not made yet, in chunks of at most `CHUNK`: one kernel each."""
    folder = version_dir(source, cache)
    missing = sorted(d for d in set(draws) if not _draw_file(folder, d).is_file())
    return [missing[i : i + CHUNK] for i in range(0, len(missing), CHUNK)]
