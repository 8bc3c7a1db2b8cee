"""Before nbgrader sees a submission: its cells' grading metadata is the source's, not the
student's.
nbgrader trusts the metadata a submission carries, and its own code fails (KeyError,
MissingEntry) on an empty notebook, a duplicated cell or an answer cell re-labelled as a test.
`RestoreCells` runs first among autograde's sanitizing steps and makes the notebook one nbgrader
handles: every cell that claims a grade id of the source gets the source's metadata for it (so
forged points, flags or ids are ignored); a second claim to the same id, an unknown id or a
changed cell type loses its claim and becomes an ordinary cell; every graded, answer or locked
cell the student deleted is put back where it belongs, answers empty. nbgrader's own steps then
restore the locked and test cells' code as usual.

Runs in: a worker, before nbgrader reads the submission.
"""

from __future__ import annotations

import copy
import uuid
from pathlib import Path

import nbformat
from nbgrader.preprocessors import NbGraderPreprocessor


def source_notebook(resources: dict) -> Path:
    """The assignment's source notebook of the one being graded (nbgrader runs in the course
    folder, and source/ is its default source directory)."""
    info = resources.get("nbgrader", {})
    return Path("source") / info.get("assignment", "") / f"{info.get('notebook', '')}.ipynb"


def _grade_id(cell) -> str | None:
    return cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")


class RestoreCells(NbGraderPreprocessor):
    def preprocess(self, nb, resources):
        path = source_notebook(resources)
        if not path.is_file():
            self.log.warning("no source notebook at %s: cell metadata is not checked", path)
            return nb, resources
        source = [c for c in nbformat.read(path, as_version=4).cells if _grade_id(c)]
        by_id = {_grade_id(c): c for c in source}
        claimed = set()
        for cell in nb.cells:
            grade_id = _grade_id(cell)
            if grade_id is None:
                cell.get("metadata", {}).pop("nbgrader", None)
                continue
            original = by_id.get(grade_id)
            if original is None or grade_id in claimed or original.cell_type != cell.cell_type:
                del cell.metadata["nbgrader"]  # not a real claim: an ordinary cell now
                continue
            claimed.add(grade_id)
            cell.metadata["nbgrader"] = copy.deepcopy(original.metadata["nbgrader"])
        self._put_back_missing(nb, source, claimed)
        return nb, resources

    @staticmethod
    def _put_back_missing(nb, source, present: set[str]) -> None:
        """Insert each missing source cell after the source cell that precedes it."""
        position = {_grade_id(c): i for i, c in enumerate(nb.cells) if _grade_id(c)}
        after = -1  # index in nb.cells of the last source cell seen
        for original in source:
            grade_id = _grade_id(original)
            if grade_id in present:
                after = position[grade_id]
                continue
            cell = copy.deepcopy(original)
            if cell.metadata["nbgrader"].get("solution"):
                cell.source = ""  # the student gave no answer; never the solution
            if cell.cell_type == "code":
                cell.outputs, cell.execution_count = [], None
            if any(c.get("id") == cell.get("id") for c in nb.cells):
                cell.id = uuid.uuid4().hex[:8]
            after += 1
            nb.cells.insert(after, cell)
            position = {_grade_id(c): i for i, c in enumerate(nb.cells) if _grade_id(c)}
