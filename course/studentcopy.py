"""The student copy: the repository a student clones, or opens on Binder.

It holds the released notebooks, the lesson side of the `course` package (what the notebooks
import), the Binder environment, a postBuild that turns off nbgrader's instructor tools, and a
README for students. Nothing from source/, fixtures/ or tests/, and not the grading engine.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .grading.coursedir import Course, CourseError

# nbgrader's instructor tools and the exchange views, which mean nothing on Binder.
DISABLED_LAB_PLUGINS = [
    "@jupyter/nbgrader:formgrader",
    "@jupyter/nbgrader:create-assignment",
    "@jupyter/nbgrader:course-list",
    "@jupyter/nbgrader:assignment-list",
]
DISABLED_SERVER_EXTENSIONS = [
    "nbgrader.server_extensions.formgrader",
    "nbgrader.server_extensions.course_list",
    "nbgrader.server_extensions.assignment_list",
]

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "autograd-course-lessons"
version = "0.1.0"
description = "What the autograd course's notebooks import: check helpers and widgets"
requires-python = ">=3.11,<3.12"
dependencies = ["torch", "ipywidgets", "matplotlib"]

[tool.setuptools.packages.find]
include = ["course*"]
"""

README = """\
# Autograd course: the student notebooks

Four short lessons on PyTorch autograd, each with exercises you can check yourself:
`release/01_requires_grad`, `release/02_backward`, `release/03_grad_zeroing`, `release/04_no_grad`.

## Working on a notebook

- Open it in JupyterLab (on Binder, or locally: `pip install -r requirements.txt`,
  `pip install -e .`, then `jupyter lab`), run the cells from the top (Run > Run All Cells), and
  fill in every cell that says `YOUR CODE HERE`.
- After each exercise comes a test cell: run it to check your answer. A message tells you what is
  wrong. More tests run when your notebook is graded, so a passing test cell is a good sign, not a
  promise.
- Written answers go in the cells that say `YOUR ANSWER HERE`; they are graded by a person.
- Keep the cells you were given as they are: graded cells are restored from the original when
  your notebook is graded.

## On Binder, your work disappears with the session

A Binder session ends after some minutes without activity, or when you close the tab, and
everything in it is gone. Save your work often to your own computer: in JupyterLab, right-click
the notebook in the file browser and choose Download (or File > Download). To continue later, open
a new session and upload your notebook (the upload arrow above the file browser).

## Handing in

Hand in the `.ipynb` file of each assignment, with its name unchanged, the way your instructor
asks: uploaded to your course's learning platform, or with the Nbgrader Assignments tab on your
course's own JupyterHub (that tab is switched off on Binder, where there is nothing to submit to).
"""


def build_student_copy(course: Course, dest: Path) -> Path:
    """Write the student copy into ``dest`` (which must not exist yet); return it."""
    dest = Path(dest)
    if dest.exists():
        raise CourseError(f"{dest} exists already: choose a new folder for the student copy.")
    root = course.root
    shutil.copytree(root / "release", dest / "release")
    package = root / "course"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    (dest / "course").mkdir(parents=True)
    shutil.copy2(package / "__init__.py", dest / "course" / "__init__.py")
    shutil.copytree(package / "lesson", dest / "course" / "lesson", ignore=ignore)
    for name in ("environment.yml", "requirements.txt"):
        shutil.copy2(root / name, dest / name)
    (dest / "pyproject.toml").write_text(PYPROJECT)
    # The course's own postBuild (install the package, no news pop-up), then the tools off.
    disable = [f"jupyter labextension disable {p}" for p in DISABLED_LAB_PLUGINS]
    disable += [f"jupyter server extension disable {e}" for e in DISABLED_SERVER_EXTENSIONS]
    postbuild = dest / "postBuild"
    postbuild.write_text(
        (root / "postBuild").read_text().rstrip("\n")
        + "\n# Students get no instructor tools (formgrader, create assignment, courses).\n"
        + "\n".join(disable)
        + "\n"
    )
    postbuild.chmod(0o755)
    (dest / "README.md").write_text(README)
    return dest
