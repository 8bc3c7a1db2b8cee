"""Grading on a dask cluster: warm kernels on every worker, and no run on workers whose kernels
would not be sandboxed.

Runs in: the grader (`prepare`) and each dask worker (`Zygotes`, `sandbox_report`).

Jobs carry their data (`course.grading.jobs`), so a worker needs the course's environment and
nothing of the course's folder. Each worker starts its own zygotes, one per notebook to grade,
from the prefixes the grader recorded (`Zygotes`, a dask worker plugin: a worker that joins
later gets them too), and they end with it. Before any job, every worker says what its sandbox
enforces (`course.grading.sandbox.protections`); where a worker could not give a kernel
namespaces of its own, its kernels could read what the worker holds, so the run is refused
unless the instructor allows it (``--allow-unsandboxed``).
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from distributed.diagnostics.plugin import WorkerPlugin

from . import sandbox, warm
from .coursedir import CourseError

PLUGIN = "course-zygotes"


class Zygotes(WorkerPlugin):
    """Start zygotes on a worker for ``prefixes`` (`course.grading.warm.WarmUp`)."""

    def __init__(self, prefixes: dict[tuple[str, str], str]):
        self.prefixes = prefixes

    def setup(self, worker=None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="course-zygotes-"))
        self.warm_up = warm.WarmUp(self.prefixes, self.folder)
        warm.set_zygote_dir(self.folder)

    def teardown(self, worker=None) -> None:
        warm.set_zygote_dir(None)
        self.warm_up.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def sandbox_report() -> tuple[str | None, str]:
    """Run on a worker: why its kernels get no namespaces (None: they do), and what they get."""
    return sandbox.unavailable(), sandbox.protections()


def check_workers(reports: dict[str, tuple[str | None, str]], allow_unsandboxed: bool) -> str:
    """What the workers' sandboxes enforce, as one line per kind of worker; raises `CourseError`
    when a worker's kernels would run unsandboxed and that was not allowed."""
    if not reports:
        raise CourseError("the dask cluster has no worker")
    bare = sorted(address for address, (reason, _) in reports.items() if reason)
    if bare and not allow_unsandboxed:
        reason = reports[bare[0]][0]
        raise CourseError(
            f"{len(bare)} of {len(reports)} dask workers cannot sandbox a kernel ({reason}), so "
            "student code there could read everything the worker holds, the hidden tests' "
            "expected values included; run the workers where user namespaces are allowed (or as "
            "root with CAP_SYS_ADMIN), or pass --allow-unsandboxed to grade there anyway"
        )
    lines: dict[str, list[str]] = {}
    for address, (_, line) in sorted(reports.items()):
        lines.setdefault(line, []).append(address)
    return "\n".join(
        f"sandbox on {len(addresses)} of {len(reports)} dask workers: {line}"
        for line, addresses in lines.items()
    )


def prepare(client, prefixes: dict[tuple[str, str], str], allow_unsandboxed: bool) -> str:
    """Check every worker's sandbox (`check_workers`), then start zygotes on each: what the
    workers enforce, to say once."""
    said = check_workers(client.run(sandbox_report), allow_unsandboxed)
    if prefixes:
        client.register_plugin(Zygotes(prefixes), name=PLUGIN)
    return said


def release(client) -> None:
    """Stop the workers' zygotes (a worker that is gone took its own with it)."""
    try:
        client.unregister_worker_plugin(PLUGIN)
    except (ValueError, KeyError):  # never registered (no prefix to warm)
        pass
