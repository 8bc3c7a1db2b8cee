"""The student copy: the repository a student clones, or opens on Binder.

Runs in: the grader (the instructor's `python -m course` process).

It holds the released notebooks, the lesson side of the `course` package (what the notebooks
import), what a student's environment needs (requirements.txt for pip, environment.yml for
Binder), a postBuild that turns off nbgrader's instructor tools, a student's nbgrader config and
a README for students. Nothing from source/, fixtures/ or tests/, and not the grading engine.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

from .grading.coursedir import Course, CourseError
from .lab import first_notebook

# Of the course's pins, what a student needs: the notebooks' imports, JupyterLab, and nbgrader
# for the Validate button and the exchange (nbclient and nbformat are nbgrader's).
STUDENT_PACKAGES = ["torch", "nbgrader", "jupyterlab", "ipywidgets", "matplotlib", "nbclient",
                    "nbformat"]  # fmt: skip
CONDA_NAMES = {"torch": "pytorch-cpu"}
# requirements.txt pins torch's CPU build on Linux, which only PyTorch's CPU index has.
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"

# nbgrader's menu, its instructor tools and the exchange views, which mean nothing on Binder:
# off, and locked so that Settings > Plugin Manager cannot turn them back on. The Validate
# button (@jupyter/nbgrader:validate-assignment and its server part) stays.
LOCKED_LAB_PLUGINS = [
    "@jupyter/nbgrader:menu",
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

INIT = '''\
"""The autograd course's lesson side: `course.lesson` is what the notebooks import (check
helpers, probes, widgets)."""
'''

NBGRADER_CONFIG = '''\
"""nbgrader's settings for a student: the course id. Without a config file every nbgrader command
run in this folder warns "No nbgrader_config.py file found"."""

c = get_config()  # noqa: F821 (injected by traitlets)
c.CourseDirectory.course_id = {course_id!r}
'''

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

BINDER_BADGE = (
    "[![Binder](https://mybinder.org/badge_logo.svg)]"
    "(https://mybinder.org/v2/gh/{repo}/HEAD?urlpath=lab/tree/{notebook})"
)

README = """\
# Autograd course: the student notebooks

Four short lessons on PyTorch autograd, each with exercises you can check yourself:
`release/01_requires_grad`, `release/02_backward`, `release/03_grad_zeroing`, `release/04_no_grad`.
{binder}
## Working on a notebook

- Open it in JupyterLab (on Binder, or locally:
  `pip install --extra-index-url {torch_index} -r requirements.txt` (PyTorch's
  CPU build; on Linux PyPI has only the CUDA build, several GB), `pip install -e .`, then
  `jupyter lab`), run the cells from the top (Run > Run All Cells), and fill in every cell that
  says `YOUR CODE HERE`.
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
asks: uploaded to your course's learning platform, or on your course's own JupyterHub with
Nbgrader > Assignment List (that menu is switched off on Binder, where there is nothing to submit
to).
"""


def student_requirements(requirements: str) -> str:
    """The course's requirements.txt cut down to the pins a student needs."""
    wanted = [
        line
        for line in requirements.splitlines()
        if re.split(r"[=<>~ ]", line.strip(), maxsplit=1)[0].lower() in STUDENT_PACKAGES
    ]
    head = (
        "# What the notebooks need, pinned as in the course's own environment. PyTorch's CPU\n"
        f"# build: pip install --extra-index-url {TORCH_CPU_INDEX} -r requirements.txt\n"
    )
    return head + "\n".join(wanted + [""])


def student_environment(environment: str) -> str:
    """The course's environment.yml (for Binder) with only the packages a student needs."""
    wanted = {"python", "pip", *(CONDA_NAMES.get(n, n) for n in STUDENT_PACKAGES)}
    kept, section = [], None
    for line in environment.splitlines():
        if line.startswith("#"):
            continue
        if not line.startswith((" ", "-")):
            section = line.split(":")[0]
        package = re.fullmatch(r"\s*-\s*([A-Za-z0-9_.\-]+)\s*(?:[=<>].*)?", line)
        if section != "dependencies" or not package or package[1].lower() in wanted:
            kept.append(line)
    return "# What the notebooks need on Binder, pinned as in the course's own environment.\n" + (
        "\n".join(kept + [""])
    )


def student_postbuild(course_postbuild: str) -> str:
    """The course's postBuild, then the instructor's tools off (and locked) for the student."""
    page = {
        "disabledExtensions": dict.fromkeys(LOCKED_LAB_PLUGINS, True),
        "lockedExtensions": dict.fromkeys(LOCKED_LAB_PLUGINS, True),
    }
    # A user's jupyter_server_config.json wins over the environment's extension list.
    server = {
        "ServerApp": {"jpserver_extensions": dict.fromkeys(DISABLED_SERVER_EXTENSIONS, False)}
    }
    return (
        course_postbuild.rstrip("\n")
        + "\n# Students get no instructor tools: nbgrader's menu, formgrader, create assignment and"
        + "\n# the course and assignment lists are off and locked; the Validate button stays.\n"
        + 'config="${JUPYTER_CONFIG_DIR:-${HOME}/.jupyter}"\n'
        + 'mkdir -p "${config}/labconfig"\n'
        + f"echo '{json.dumps(page)}' > \"${{config}}/labconfig/page_config.json\"\n"
        + f"echo '{json.dumps(server)}' > \"${{config}}/jupyter_server_config.json\"\n"
    )


def binder_badge(repo: str, notebook: str) -> str:
    """The README's Binder badge for the GitHub repository ``repo`` (OWNER/NAME)."""
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9_.\-]+", repo):
        raise CourseError(f"--binder wants a GitHub repository as OWNER/NAME, not {repo!r}.")
    return BINDER_BADGE.format(repo=repo, notebook=notebook)


def build_student_copy(course: Course, dest: Path, binder: str | None = None) -> Path:
    """Write the student copy into ``dest`` (which must not exist yet); return it. With
    ``binder`` (OWNER/NAME, where the copy will be published) its README opens on Binder."""
    dest = Path(dest)
    badge = binder_badge(binder, first_notebook(course)) if binder else None
    if dest.exists():
        raise CourseError(f"{dest} exists already: choose a new folder for the student copy.")
    root = course.root
    shutil.copytree(root / "release", dest / "release")
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(root / "course" / "lesson", dest / "course" / "lesson", ignore=ignore)
    (dest / "course" / "__init__.py").write_text(INIT)
    (dest / "requirements.txt").write_text(
        student_requirements((root / "requirements.txt").read_text())
    )
    (dest / "environment.yml").write_text(
        student_environment((root / "environment.yml").read_text())
    )
    (dest / "pyproject.toml").write_text(PYPROJECT)
    course_id = course.config().CourseDirectory.course_id
    (dest / "nbgrader_config.py").write_text(NBGRADER_CONFIG.format(course_id=course_id))
    postbuild = dest / "postBuild"
    postbuild.write_text(student_postbuild((root / "postBuild").read_text()))
    postbuild.chmod(0o755)
    (dest / "README.md").write_text(
        README.format(binder=f"\n{badge}\n" if badge else "", torch_index=TORCH_CPU_INDEX)
    )
    return dest
