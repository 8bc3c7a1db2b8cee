"""The package's layout says where code runs: `course.lesson` is what a student's kernel imports
(nothing of nbgrader or of the grading engine), `course.grading` the engine, the commands on top.
No import circles, and a wheel installs every module."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from course_testing import REPO

PACKAGE = REPO / "course"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def course_modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The course modules that ``path`` imports, anywhere in it (function-local imports too)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        found |= {t for t in targets if t in modules and t != name}
    return found


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle in ``graph`` (module -> modules it imports), or None."""
    state: dict[str, str] = {}
    trail: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        trail.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return trail[trail.index(nxt) :] + [nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        state[node] = "done"
        trail.pop()
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def import_graph() -> dict[str, set[str]]:
    modules = course_modules()
    # ``from . import x`` names the package ``course`` too; its __init__ imports nothing.
    return {name: imports_of(path, set(modules)) - {"course"} for name, path in modules.items()}


def test_find_cycle_finds_a_circle_and_accepts_a_tree():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


def test_imports_of_resolves_relative_imports():
    graph = import_graph()
    assert "course.grading.coursedir" in graph["course.grading.jobs"]
    assert "course.lesson.widgets.base" in graph["course.lesson.widgets.graph"]


def test_the_package_has_no_import_circle():
    assert find_cycle(import_graph()) is None


def test_the_lesson_side_never_imports_the_grading_side_or_the_commands():
    graph = import_graph()
    for name, imported in graph.items():
        if name.startswith("course.lesson"):
            outside = {m for m in imported if not m.startswith("course.lesson")}
            assert not outside, f"{name} (runs in a student's kernel) imports {sorted(outside)}"
        if name.startswith("course.grading"):
            above = {m for m in imported if not m.startswith(("course.grading", "course.lesson"))}
            assert not above, f"{name} (the engine) imports the commands above it: {sorted(above)}"


RUNS_IN = re.compile(r"^Runs in: \S", re.M)


def test_every_module_says_where_it_runs():
    """A newcomer reads first which process runs a module (docs/architecture.md): the grader, a
    worker, a grading kernel or a student's kernel."""
    silent = [
        str(path.relative_to(REPO))
        for path in sorted((REPO / "course").rglob("*.py"))
        if path.name != "__main__.py"
        and not RUNS_IN.search(ast.get_docstring(ast.parse(path.read_text())) or "")
    ]
    assert not silent, f"no 'Runs in:' line in the docstring of {silent}"


def test_a_docstring_without_a_runs_in_line_is_found():
    assert not RUNS_IN.search("Grading.\n\nRuns on the grader.")
    assert RUNS_IN.search("Grading.\n\nRuns in: the grader.")


def test_a_students_kernel_loads_nothing_of_nbgrader():
    """What the notebooks import, imported in a fresh Python: nbgrader, nbconvert and the
    grading engine stay out of the student's process."""
    lesson = sorted(n for n in course_modules() if n.startswith("course.lesson"))
    code = (
        "import importlib, sys\n"
        f"for m in {lesson!r}: importlib.import_module(m)\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('nbgrader', 'nbconvert')"
        " or m.startswith('course.grading')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert out.stdout.strip() == "[]", out.stdout


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    # Built from a copy: setuptools leaves build/ and *.egg-info where it builds.
    src, out = tmp_path_factory.mktemp("src"), tmp_path_factory.mktemp("wheel")
    shutil.copy2(REPO / "pyproject.toml", src)
    shutil.copytree(PACKAGE, src / "course", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
         "-w", str(out), str(src)],
        check=True,
    )  # fmt: skip
    (path,) = out.glob("*.whl")
    return path


def test_the_wheel_holds_every_module(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = [
        str(p.relative_to(REPO)) for p in course_modules().values()
        if str(p.relative_to(REPO)) not in names
    ]  # fmt: skip
    assert not missing, f"the wheel leaves out {missing}"


def test_every_module_imports_from_the_installed_wheel(wheel, tmp_path):
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target),
         str(wheel)],
        check=True,
    )  # fmt: skip
    modules = sorted(n for n in course_modules() if n != "course.__main__")
    code = (
        "import importlib, course\n"
        f"assert course.__file__.startswith({str(target)!r}), course.__file__\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print('imported', len(" + repr(modules) + "))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"PYTHONPATH": str(target), "PATH": str(Path(sys.executable).parent)},
    )
    assert out.returncode == 0, out.stderr
    assert f"imported {len(modules)}" in out.stdout


def relative_links(markdown: str) -> list[str]:
    """The targets of a Markdown page's links that point into the repository."""
    targets = re.findall(r"\]\(([^)\s]+)\)", markdown)
    return [t.split("#")[0] for t in targets if not re.match(r"[a-z]+:", t) and t.split("#")[0]]


def test_relative_links_are_found():
    page = "[a](docs/x.md) [b](https://e.org) [c](#top) [d](../shared/y.md#s)"
    assert relative_links(page) == ["docs/x.md", "../shared/y.md"]


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings (code blocks left out)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.M | re.S)
    headings = re.findall(r"^#+ (.+)$", prose, flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def broken_anchors(page: Path) -> list[str]:
    """The links of ``page`` to a heading of a Markdown page in the repository (or of itself)
    that is not there."""
    broken = []
    for link in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
        target, _, anchor = link.partition("#")
        path = page.parent / target if target else page
        if anchor and not re.match(r"[a-z]+:", link) and path.suffix == ".md" and path.is_file():
            if anchor not in heading_anchors(path.read_text()):
                broken.append(link)
    return broken


def test_anchors_are_github_s_and_broken_ones_are_found(tmp_path):
    page = "# Our commands (`python -m course ...`)\n```\n# not a heading\n```\n## What it *does*\n"
    assert heading_anchors(page) == {"our-commands-python--m-course-", "what-it-does"}
    (tmp_path / "x.md").write_text("## Top\n")
    (tmp_path / "y.md").write_text(
        "# Y\n[a](x.md#top) [b](#y) [c](https://e.org/#x) [d](x.md#gone) [e](#nowhere)\n"
    )
    assert broken_anchors(tmp_path / "y.md") == ["x.md#gone", "#nowhere"]


DOCS = ["README.md", *(str(p.relative_to(REPO)) for p in sorted((REPO / "docs").glob("*.md")))]


@pytest.mark.parametrize("page", DOCS)
def test_every_link_to_a_heading_finds_it(page):
    assert broken_anchors(REPO / page) == [], f"{page} links to headings that are not there"


@pytest.mark.parametrize("page", DOCS)
def test_every_link_of_the_docs_resolves_in_a_clone(page):
    """A clone has only the repository: no link may leave it (../shared) or point at nothing."""
    base = (REPO / page).parent
    broken = [
        link
        for link in relative_links((REPO / page).read_text())
        if not (base / link).resolve().is_relative_to(REPO) or not (base / link).exists()
    ]
    assert not broken, f"{page} links to {broken}"
