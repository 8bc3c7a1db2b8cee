"""`python -m course student-copy DEST`: what a student clones or opens on Binder holds the
released notebooks and what they import, runs, installs what a student needs and no more, and
holds no solution, hidden test or tool of the instructor's."""

from __future__ import annotations

import ast
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import zipfile
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from packaging.requirements import Requirement
from traitlets.config.loader import PyFileConfigLoader

from course import studentcopy
from course_testing import CONTRACT, REPO, distinctive_secrets
from pins import conda_pins, disagreements, pip_pins

BINDER_REPO = "someone/autograd-course-students"
INSTRUCTOR_TOOLS = {"pytest", "hypothesis", "playwright", "ruff", "dask", "distributed"}


def student_copy(dest: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "course", "student-copy", str(dest), *options],
        cwd=REPO, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


@pytest.fixture(scope="module")
def copy(tmp_path_factory):
    dest = tmp_path_factory.mktemp("student") / "autograd-course"
    done = student_copy(dest, "--binder", BINDER_REPO)
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


def test_its_nbgrader_config_is_a_students(copy):
    """The course id only: nothing of the instructor's grading set-up."""
    config = PyFileConfigLoader("nbgrader_config.py", path=str(copy)).load_config()
    assert config == {"CourseDirectory": {"course_id": "autograd-course"}}


def modules_named(docstring: str) -> list[str]:
    return re.findall(r"`(course(?:\.\w+)+)`", docstring)


def missing_modules(package_init: Path, root: Path) -> list[str]:
    """The `course.x` modules that ``package_init`` names and that ``root`` does not hold."""
    return [
        name
        for name in modules_named(package_init.read_text())
        if not (root / name.replace(".", "/")).is_dir()
        and not (root / (name.replace(".", "/") + ".py")).is_file()
    ]


def test_its_package_describes_only_what_is_in_it(copy):
    assert modules_named((copy / "course" / "__init__.py").read_text()) == ["course.lesson"]
    assert missing_modules(copy / "course" / "__init__.py", copy) == []
    # The course's own package description names the engine, which the copy leaves out.
    assert missing_modules(REPO / "course" / "__init__.py", copy) == ["course.grading"]


def test_it_reveals_no_solution_or_hidden_test(copy):
    """Its notebooks are the committed release (which test_release checks), and no file in it
    shows a line of a solution or hidden test that the release does not show anyway."""
    for assignment in CONTRACT:
        name = f"release/{assignment}/{assignment}.ipynb"
        assert (copy / name).read_bytes() == (REPO / name).read_bytes()
    secrets_ = distinctive_secrets()
    assert secrets_, "the source has solutions and hidden tests to keep back"
    for path in copy.rglob("*"):
        if path.is_file() and path.suffix in (".ipynb", ".py", ".md", ".yml", ".toml", ".txt", ""):
            text = path.read_text()
            if path.suffix == ".ipynb":  # compare with what a reader of the JSON sees
                text = "\n".join("".join(c["source"]) for c in json.loads(text)["cells"])
            leaked = [line for line in secrets_ if line in text]
            assert not leaked, f"{path.relative_to(copy)} shows {leaked[:3]}"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_with(names: set[str]) -> set[str]:
    """The distributions that installing ``names`` brings, dependencies included (no extras),
    as this environment has them."""
    seen: set[str] = set()
    todo = [canonical(n) for n in names]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for spec in metadata.requires(name) or []:
            requirement = Requirement(spec)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(canonical(requirement.name))
    return seen


def third_party_imports(copy: Path) -> set[str]:
    """The top-level modules that the copy's package and notebooks import, stdlib left out."""
    codes = [p.read_text() for p in (copy / "course").rglob("*.py")]
    for path in (copy / "release").rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        codes += [c.source for c in nb.cells if c.cell_type == "code"]
    found = set()
    for code in codes:
        python = "\n".join(line for line in code.splitlines() if not line.startswith(("%", "!")))
        for node in ast.walk(ast.parse(python)):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - {"course"}


def test_its_requirements_install_what_a_student_needs_and_no_tool_of_the_instructors(copy):
    pins = pip_pins((copy / "requirements.txt").read_text())
    assert not INSTRUCTOR_TOOLS & set(pins), (
        f"the student copy installs {INSTRUCTOR_TOOLS & set(pins)}"
    )
    course_pins = pip_pins((REPO / "requirements.txt").read_text())
    assert INSTRUCTOR_TOOLS <= set(course_pins), "the course's own pins hold the tools"
    assert {name: course_pins[name] for name in pins} == pins, "pinned as in the course"
    assert {"nbgrader", "jupyterlab"} <= set(pins)  # the Validate button, the exchange
    brought = installed_with(set(pins))
    distributions = metadata.packages_distributions()
    imports = third_party_imports(copy)
    assert {"torch", "ipywidgets", "matplotlib", "numpy"} <= imports
    needed = {m: canonical(distributions[m][0]) for m in imports}
    unmet = {m: d for m, d in needed.items() if d not in brought}
    assert not unmet, f"the notebooks import what the copy's requirements do not install: {unmet}"


def test_pip_install_dot_installs_the_lesson_side(copy, tmp_path):
    """`pip install .` in the copy (its README's local set-up): a package of course.lesson only,
    whose dependencies its requirements.txt pins."""
    src = tmp_path / "src"  # setuptools leaves build/ and *.egg-info where it builds
    shutil.copytree(copy, src, ignore=shutil.ignore_patterns("release"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(tmp_path), str(src)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "course/__init__.py" in names and "course/lesson/checks.py" in names
    modules = {n for n in names if n.endswith(".py")}
    assert modules == {p.relative_to(copy).as_posix() for p in (copy / "course").rglob("*.py")}, (
        "the wheel holds the copy's package, nothing more or less"
    )
    (meta,) = [n for n in names if n.endswith(".dist-info/METADATA")]
    depends = re.findall(
        r"^Requires-Dist: ([\w-]+)", zipfile.ZipFile(wheel).read(meta).decode(), re.M
    )
    pins = pip_pins((copy / "requirements.txt").read_text())
    assert depends and set(depends) <= set(pins), (depends, pins)


def test_installed_with_follows_dependencies():
    assert "numpy" in installed_with({"matplotlib"})
    assert "matplotlib" not in installed_with({"torch", "ipywidgets"})


def test_its_binder_environment_agrees_and_leaves_the_tools_out(copy):
    requirements = (copy / "requirements.txt").read_text()
    environment = (copy / "environment.yml").read_text()
    assert disagreements(requirements, environment) == []
    conda = conda_pins(environment)
    assert "python" in conda and "pytorch-cpu" in conda
    assert not {"dask-core", "distributed"} & set(conda)
    assert "conda-forge" in environment  # the channels stay


def test_its_readme_says_how_work_is_kept_and_handed_in(copy):
    text = (copy / "README.md").read_text()
    assert "disappears with the session" in text and "Download" in text and "Handing in" in text


def test_binder_puts_a_badge_on_the_readme_that_opens_the_first_notebook(copy, tmp_path):
    text = (copy / "README.md").read_text()
    (link,) = re.findall(r"\]\((https://mybinder\.org/v2/gh/[^)]+)\)", text)
    first = f"release/{list(CONTRACT)[0]}/{list(CONTRACT)[0]}.ipynb"
    assert link == f"https://mybinder.org/v2/gh/{BINDER_REPO}/HEAD?urlpath=lab/tree/{first}"
    assert (copy / first).is_file()
    plain = student_copy(tmp_path / "plain")
    assert plain.returncode == 0, plain.stderr
    assert "mybinder" not in (tmp_path / "plain" / "README.md").read_text()


def test_a_binder_value_that_is_no_repository_is_refused(tmp_path):
    done = student_copy(tmp_path / "copy", "--binder", "https://github.com/someone/x")
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "error: --binder wants a GitHub repository as OWNER/NAME, not "
        "'https://github.com/someone/x'."
    )
    assert not (tmp_path / "copy").exists()


def test_its_nbgrader_config_silences_the_warning_students_saw(copy, tmp_path):
    """nbgrader warns "No nbgrader_config.py file found" where there is none; not in the copy."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("JUPYTER")}
    env["HOME"] = str(home)
    nbgrader = str(Path(sys.executable).parent / "nbgrader")

    def warnings_in(folder: Path) -> str:
        out = subprocess.run(
            [nbgrader, "list"], cwd=folder, env=env, capture_output=True, text=True, timeout=120
        )
        return out.stdout + out.stderr

    assert "No nbgrader_config.py file found" in warnings_in(home)
    assert "No nbgrader_config.py file found" not in warnings_in(copy)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def binder_lab(copy, tmp_path_factory):
    """JupyterLab on the copy after its postBuild ran, as on Binder: a fresh HOME, and a `pip`
    stand-in that records what the postBuild asks of it."""
    base = tmp_path_factory.mktemp("binder")
    home, stubs = base / "home", base / "bin"
    home.mkdir()
    stubs.mkdir()
    (stubs / "pip").write_text(f'#!/bin/sh\necho "$@" >> {base}/pip.log\n')
    (stubs / "pip").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER", "NBGRADER"))}
    env.update(
        HOME=str(home),
        PATH=os.pathsep.join([str(stubs), str(Path(sys.executable).parent), env["PATH"]]),
    )
    subprocess.run([str(copy / "postBuild")], cwd=copy, env=env, check=True, timeout=60)
    assert (base / "pip.log").read_text() == "install --no-deps -e .\n"
    port, token = _free_port(), secrets.token_hex(16)
    command = [
        sys.executable, "-m", "jupyterlab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
        f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={copy}",
        *(["--allow-root"] if os.geteuid() == 0 else []),
    ]  # fmt: skip
    log = (base / "lab.log").open("wb")
    process = subprocess.Popen(command, cwd=copy, env=env, stdout=log, stderr=subprocess.STDOUT)

    def call(method: str, path: str, body: dict | None = None) -> tuple[int, str]:
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}{path}",
            method=method,
            data=json.dumps(body).encode() if body else None,
            headers={"Authorization": f"token {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()

    try:
        deadline = time.monotonic() + 120
        while True:
            assert process.poll() is None, (base / "lab.log").read_text()[-3000:]
            try:
                call("GET", "/api/status")
                break
            except OSError:
                assert time.monotonic() < deadline, (base / "lab.log").read_text()[-3000:]
                time.sleep(0.5)
        yield call
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def test_on_binder_the_nbgrader_menu_and_instructor_tools_are_off_and_locked(binder_lab):
    _, page = binder_lab("GET", "/lab")
    data = re.search(
        r'<script id="jupyter-config-data" type="application/json">(.*?)</script>', page, re.S
    )
    config = json.loads(data[1])
    tools = set(studentcopy.LOCKED_LAB_PLUGINS)
    assert "@jupyter/nbgrader:menu" in tools
    assert tools <= set(config["disabledExtensions"]), config["disabledExtensions"]
    assert tools <= set(config["lockedExtensions"]), config["lockedExtensions"]
    assert "@jupyter/nbgrader:validate-assignment" not in config["disabledExtensions"]
    for plugin in sorted(tools):  # what Settings > Plugin Manager asks of the server
        status, answer = binder_lab(
            "POST", "/lab/api/plugins", {"cmd": "enable", "plugin_name": plugin}
        )
        assert status == 500 and "locked" in answer, (plugin, status, answer)


def test_on_binder_the_instructor_tools_servers_are_off_and_validate_stays(binder_lab):
    assert binder_lab("GET", "/formgrader")[0] == 404
    assert binder_lab("GET", "/assignments")[0] == 404  # the Assignment List's server part
    status, answer = binder_lab("GET", "/nbgrader_version?version=0.9.6")
    assert status == 200, answer  # the Validate button's server part


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
