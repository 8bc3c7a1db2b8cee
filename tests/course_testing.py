"""What the tests share: the repository's path, the exercise contract, scratch course copies.

(A module of its own, not conftest.py: tests/browser has a conftest of its own, and two modules
named `conftest` cannot both be imported by name.)
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import nbformat

from course import release
from course.grading.coursedir import CONFIG_FILE, Course

REPO = Path(__file__).resolve().parents[1]

CONTRACT_DOC = REPO / "docs" / "exercise-contract.md"


def read_contract(text: str) -> dict[str, list[str]]:
    """Assignment id -> its exercises, in order, from the contract's ``## <id>`` sections and
    their ``- `name(args)`:`` items."""
    contract: dict[str, list[str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        if re.fullmatch(r"\d\d_\w+", title.strip()):
            contract[title.strip()] = re.findall(r"^- `(\w+)\(", body, flags=re.M)
    return contract


# The graded exercises fixed by docs/exercise-contract.md (a public API).
CONTRACT = read_contract(CONTRACT_DOC.read_text())


def secret_lines(assignment: str, blocks: str = "SOLUTION|HIDDEN TESTS") -> list[str]:
    """Lines of the source's solution and hidden-test blocks (of ``blocks``) that the released
    notebook does not show: a line a teaching example also shows reveals nothing."""
    text = (REPO / "source" / assignment / f"{assignment}.ipynb").read_text()
    lines = []
    for cell in json.loads(text)["cells"]:
        source = "".join(cell["source"])
        for block in re.findall(rf"### BEGIN (?:{blocks})\n(.*?)### END", source, re.S):
            lines += [line.strip() for line in block.splitlines() if len(line.strip()) > 12]
    released = (REPO / "release" / assignment / f"{assignment}.ipynb").read_text()
    return [line for line in lines if json.dumps(line)[1:-1] not in released]


def points(assignment: str, prefix: str = "", kind: str = "code") -> float:
    """The points of the graded cells of ``kind`` ("code": autograded tests, "markdown": written
    answers) whose grade id starts with ``prefix``, read from the source notebooks: totals in
    tests follow the notebooks, never a number written into a test."""
    total = 0.0
    for path in sorted((REPO / "source" / assignment).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and cell.cell_type == kind:
                total += float(meta.get("points", 0)) if meta["grade_id"].startswith(prefix) else 0
    return total


def copy_course(dest: Path, with_release: bool = False) -> Course:
    """A scratch course directory with the repo's config, sources and answer fixtures, released
    when asked."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / CONFIG_FILE, dest / CONFIG_FILE)
    shutil.copytree(REPO / "source", dest / "source")
    shutil.copytree(REPO / "fixtures", dest / "fixtures")
    course = Course.at(dest)
    if with_release:  # regenerated, so the scratch gradebook knows the assignments' cells
        release.release(course, [])
    return course
