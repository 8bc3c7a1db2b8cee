"""What the tests share: the repository's path, the exercise contract, scratch course copies.

(A module of its own, not conftest.py: tests/browser has a conftest of its own, and two modules
named `conftest` cannot both be imported by name.)
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

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
