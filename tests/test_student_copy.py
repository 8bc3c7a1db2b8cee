"""`python -m course student-copy DEST`: what a student clones or opens on Binder holds the
released notebooks and what they import, runs, and holds no solution, hidden test or tool of the
instructor's."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import nbformat
import pytest
from nbclient import NotebookClient

from course_testing import CONTRACT, REPO, distinctive_secrets


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    dest = tmp_path_factory.mktemp("student") / "autograd-course"
    done = subprocess.run(
        [sys.executable, "-m", "course", "student-copy", str(dest)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return dest


def test_it_holds_the_notebooks_and_the_lesson_side_only(copy):
    names = {p.relative_to(copy).as_posix() for p in copy.rglob("*") if p.is_file()}
    for assignment in CONTRACT:
        assert f"release/{assignment}/{assignment}.ipynb" in names
    assert {"README.md", "environment.yml", "postBuild", "pyproject.toml"} <= names
    assert "course/lesson/checks.py" in names
    unwanted = [
        n for n in names if n.startswith(("source/", "fixtures/", "tests/", "course/grading"))
    ]
    assert not unwanted, unwanted
    assert not (copy / "nbgrader_config.py").exists()


def test_it_reveals_no_solution_or_hidden_test(copy):
    """Its notebooks are the committed release (which test_release checks), and no file in it
    shows a line of a solution or hidden test that the release does not show anyway."""
    for assignment in CONTRACT:
        name = f"release/{assignment}/{assignment}.ipynb"
        assert (copy / name).read_bytes() == (REPO / name).read_bytes()
    secrets = distinctive_secrets()
    assert secrets, "the source has solutions and hidden tests to keep back"
    for path in copy.rglob("*"):
        if path.is_file() and path.suffix in (".ipynb", ".py", ".md", ".yml", ".toml", ".txt", ""):
            text = path.read_text()
            if path.suffix == ".ipynb":  # compare with what a reader of the JSON sees
                text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
            leaked = [line for line in secrets if line in text]
            assert not leaked, f"{path.relative_to(copy)} shows {leaked[:3]}"


def test_postbuild_turns_off_the_instructor_tools(copy):
    text = (copy / "postBuild").read_text()
    assert os.access(copy / "postBuild", os.X_OK)
    for tool in ("formgrader", "create-assignment", "course-list", "assignment-list"):
        assert f"jupyter labextension disable @jupyter/nbgrader:{tool}" in text
    assert "pip install --no-deps -e ." in text


def test_the_readme_says_how_work_is_kept_and_handed_in(copy):
    text = (copy / "README.md").read_text()
    assert "disappears with the session" in text and "Download" in text and "Handing in" in text


@pytest.mark.parametrize("assignment", list(CONTRACT))
def test_its_notebooks_run_with_its_own_package(copy, assignment):
    """Top to bottom as a student runs them: the exercises raise (stubs), nothing else does."""
    path = copy / "release" / assignment / f"{assignment}.ipynb"
    nb = nbformat.read(path, as_version=4)
    env = {**os.environ, "PYTHONPATH": str(copy)}
    env.pop("NBGRADER_EXECUTION", None)
    where = subprocess.run(
        [sys.executable, "-c", "import course.lesson; print(course.lesson.__file__)"],
        env=env, capture_output=True, text=True, check=True, cwd=copy,
    ).stdout  # fmt: skip
    assert where.startswith(str(copy)), f"the kernel would import the course from {where}"
    client = NotebookClient(
        nb, timeout=120, allow_errors=True, resources={"metadata": {"path": str(copy)}}
    )
    client.execute(env=env)
    errors = [
        (i, o.ename)
        for i, c in enumerate(nb.cells)
        if c.cell_type == "code"
        for o in c.outputs
        if o.output_type == "error"
    ]
    graded = {
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade")
        or c.metadata.get("nbgrader", {}).get("solution")
    }
    lesson_errors = [(i, e) for i, e in errors if i not in graded]
    assert not lesson_errors, f"lesson cells fail in the student copy: {lesson_errors}"
    imported = "\n".join(
        "".join(o.get("text", "")) for c in nb.cells if c.cell_type == "code" for o in c.outputs
    )
    assert "No module named" not in imported
