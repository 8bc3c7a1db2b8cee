"""Feedback preprocessing: students see which tests failed and why, never the hidden test code.

Runs in: a worker (feedback pages), and the grader for `python -m course feedback`.
"""

from __future__ import annotations

from nbconvert.preprocessors import Preprocessor
from traitlets import Bool

STUB_HINT = "this exercise still raises NotImplementedError: replace the stub with your code."


def short_error(ename: str, evalue: str) -> str:
    """The one line a student sees for a failed test: the check's message, not the traceback."""
    if ename == "NotImplementedError" and not evalue:
        return f"{ename}: {STUB_HINT}"
    return f"{ename}: {evalue}" if evalue else ename


class ShortTestErrors(Preprocessor):
    """Replace tracebacks in test cells by the error's message.

    A traceback quotes the lines around the failing one, hidden tests included; the message of our
    check helpers already says what is wrong in the student's terms.
    """

    enabled = Bool(True)  # nbgrader registers configured preprocessors without enabling them

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    output.traceback = [short_error(output.ename, output.evalue)]
        return cell, resources


# Long messages wrap inside the page instead of running off its right edge.
WRAP_CSS = (
    ".output_area pre, .output_subarea pre, .output pre, pre "
    "{white-space: pre-wrap; overflow-wrap: anywhere;}"
)


class WrapLongLines(Preprocessor):
    """Add `WRAP_CSS` to the page's inlined styles (after nbconvert's CSSHTMLHeaderPreprocessor,
    which sets them)."""

    enabled = Bool(True)

    def preprocess(self, nb, resources):
        resources.setdefault("inlining", {}).setdefault("css", []).append(WRAP_CSS)
        return nb, resources
