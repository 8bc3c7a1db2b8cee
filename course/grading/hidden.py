"""A test cell's hidden tests: the block between nbgrader's markers, and the probes it declares.

Runs in: the grader.
"""

from __future__ import annotations

import ast
import re

import nbformat

HIDDEN = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n(.*?)^[ \t]*### END HIDDEN TESTS[ \t]*\n?",
    re.MULTILINE | re.DOTALL,
)


def split_hidden(source: str) -> tuple[str, str]:
    """A test cell's visible part (hidden blocks removed) and its hidden blocks' code."""
    hidden = "".join(match.group(1) for match in HIDDEN.finditer(source))
    return HIDDEN.sub("", source), hidden


def is_test_cell(cell: nbformat.NotebookNode) -> bool:
    meta = cell.metadata.get("nbgrader", {})
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


def test_cells(nb: nbformat.NotebookNode) -> list[tuple[str, str]]:
    """(grade id, hidden code) of every test cell with hidden tests, in notebook order."""
    found = []
    for cell in nb.cells:
        if is_test_cell(cell):
            _, hidden = split_hidden(cell.source)
            if hidden.strip():
                found.append((cell.metadata["nbgrader"]["grade_id"], hidden))
    return found


def _is_probe(decorator: ast.expr) -> bool:
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(call, ast.Name) and call.id == "probe"


def asked_names(hidden: str) -> set[str]:
    """The names a hidden block's probes ask the notebook for: their parameters without a
    default (as `course.lesson.probes.run` asks), read from the block's text."""
    try:
        tree = ast.parse(hidden)
    except SyntaxError:
        return set()
    asked = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(map(_is_probe, node.decorator_list)):
            arguments = node.args.args
            asked.update(a.arg for a in arguments[: len(arguments) - len(node.args.defaults)])
    return asked
