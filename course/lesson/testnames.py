"""A test cell's own names never replace a student's.

Runs in: the grading kernel (the grader calls `watch` once, before the first cell a student
could have written).

The hidden tests run after the last cell and call the student's functions, which read the
notebook's names when they run: a test cell that binds a name the student's code also uses
(``first = ...``, ``model = ...``) would hand them the test's value. So before each test cell
every name is noted, and after it each name the cell rebound or deleted is put back; names it
added stay, for the cells below. IPython's own (``_``, ``_i``, ...) are IPython's.
"""

from __future__ import annotations

IPYTHON_OWN = frozenset({"_", "__", "___", "_i", "_ii", "_iii"})
_UNBOUND = object()


class _Watch:
    def __init__(self, shell, sources: set[str]):
        self.shell, self.sources = shell, sources
        self.before: dict | None = None

    def pre_run_cell(self, info) -> None:
        tested = info.raw_cell in self.sources
        self.before = dict(self.shell.user_ns) if tested else None

    def post_run_cell(self, result) -> None:
        if self.before is None:
            return
        namespace = self.shell.user_ns
        for name, value in self.before.items():
            if name not in IPYTHON_OWN and namespace.get(name, _UNBOUND) is not value:
                namespace[name] = value
        self.before = None


def watch(sources: list[str]) -> None:
    """From now on, put back after each cell whose code is one of ``sources`` (the test cells, as
    the grader runs them) every name it rebound."""
    from IPython import get_ipython

    shell = get_ipython()
    watcher = _Watch(shell, set(sources))
    shell.events.register("pre_run_cell", watcher.pre_run_cell)
    shell.events.register("post_run_cell", watcher.post_run_cell)
