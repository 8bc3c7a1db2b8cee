"""Every pip route installs PyTorch's CPU build on Linux, never PyPI's CUDA build (several GB):
pip itself resolves requirements.txt's torch lines against a stand-in PyPI (whose Linux torch is
the CUDA build) and a stand-in of PyTorch's CPU index, offline; and the routes the Makefile and
the docs give ask for that index, with a Python students can run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from course import studentcopy
from course.grading.coursedir import Course
from course_testing import REPO

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
GUIDE = REPO / "docs" / "instructor-guide.md"


def torch_lines(requirements: str) -> list[str]:
    """requirements.txt's lines that pin torch (one per platform)."""
    lines = [line.split("#")[0].strip() for line in requirements.splitlines()]
    return [line for line in lines if line and Requirement(line).name == "torch"]


def fake_wheel(folder: Path, version: str, requires: tuple[str, ...] = ()) -> str:
    """A wheel that says it is torch ``version`` (pip reads only its metadata here)."""
    name = f"torch-{version}-py3-none-any.whl"
    info = f"torch-{version}.dist-info"
    with zipfile.ZipFile(folder / name, "w") as wheel:
        requirements = "".join(f"Requires-Dist: {r}\n" for r in requires)
        wheel.writestr(
            f"{info}/METADATA",
            f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n{requirements}",
        )
        wheel.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        wheel.writestr(f"{info}/RECORD", "")
    return name


def fake_index(root: Path, versions: dict[str, tuple[str, ...]]) -> str:
    """A simple index at ``root`` holding torch in ``versions`` (with their requirements)."""
    project = root / "torch"
    project.mkdir(parents=True)
    links = [fake_wheel(project, v, requires) for v, requires in versions.items()]
    (project / "index.html").write_text("".join(f'<a href="{n}">{n}</a>\n' for n in links))
    return root.as_uri()


@pytest.fixture(scope="module")
def indexes(tmp_path_factory) -> dict[str, str]:
    """PyPI as it is for Linux (torch is the CUDA build, with its nvidia packages) and PyTorch's
    CPU index (the CPU build, and the plain version PyTorch also lists for other platforms)."""
    base = tmp_path_factory.mktemp("indexes")
    pypi = fake_index(base / "pypi", {"2.13.0": ("nvidia-cublas-cu12",)})
    cpu = fake_index(base / "cpu", {"2.13.0+cpu": (), "2.13.0": ()})
    return {"pypi": pypi, "cpu": cpu}


def pip_chooses(tmp_path: Path, *args: str) -> tuple[str | None, str]:
    """The torch version ``pip install ARGS`` would install (None when it refuses) and pip's
    output, with no configuration of this machine's (wheel folders, other indexes)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull
    report = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
         "--no-cache-dir", "--disable-pip-version-check", "--report", str(report), *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    if done.returncode:
        return None, done.stdout + done.stderr
    (chosen,) = json.loads(report.read_text())["install"]
    return chosen["metadata"]["version"], done.stdout


@pytest.mark.skipif(sys.platform != "linux", reason="PyPI's CUDA build is Linux's")
def test_pip_routes_get_the_cpu_build_and_pypi_alone_never_the_cuda_one(indexes, tmp_path):
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("\n".join(torch_lines((REPO / "requirements.txt").read_text())))
    pypi, cpu = ["--index-url", indexes["pypi"]], ["--extra-index-url", indexes["cpu"]]
    # the docs' route, and the Makefile's (torch alone, pinned by requirements.txt)
    assert pip_chooses(tmp_path, *pypi, *cpu, "-r", "requirements.txt")[0] == "2.13.0+cpu"
    chosen, _ = pip_chooses(tmp_path, *pypi, *cpu, "-c", "requirements.txt", "torch")
    assert chosen == "2.13.0+cpu"
    # PyPI alone: pip stops and says so, rather than fetch the CUDA build
    chosen, said = pip_chooses(tmp_path, *pypi, "-r", "requirements.txt")
    assert chosen is None and "No matching distribution found for torch==2.13.0+cpu" in said
    # the known-bad pin: a plain version takes PyPI's CUDA build when PyPI is all there is
    requirements.write_text("torch==2.13.0\n")
    assert pip_chooses(tmp_path, *pypi, "-r", "requirements.txt")[0] == "2.13.0"


@pytest.mark.parametrize(
    "platform, version", [("linux", "2.13.0+cpu"), ("darwin", "2.13.0"), ("win32", "2.13.0")]
)
def test_one_torch_pin_per_platform_and_linux_s_is_the_cpu_build(platform, version):
    lines = torch_lines((REPO / "requirements.txt").read_text())
    pins = [Requirement(line) for line in lines]
    applies = [r for r in pins if r.marker is None or r.marker.evaluate({"sys_platform": platform})]
    assert [str(r.specifier) for r in applies] == [f"=={version}"]


def test_the_makefile_asks_the_cpu_index_for_torch_alone_then_installs_the_rest(tmp_path):
    """Only torch is asked of PyTorch's index: where it cannot be reached, pip retries it for
    every package it is asked about (7.5 s each, about 140 packages here)."""
    for name in ("Makefile", "requirements.txt", "pyproject.toml"):
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "CONDA_PREFIX")}
    done = subprocess.run(["make", "-n", "install"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60, check=True)  # fmt: skip
    pips = [line for line in done.stdout.splitlines() if " -m pip install " in line]
    assert pips[0].endswith(f"--no-deps --extra-index-url {CPU_INDEX} -c requirements.txt torch")
    assert pips[1].endswith("-m pip install -r requirements.txt"), "no index, not quiet"
    assert not [line for line in pips[1:] if CPU_INDEX in line]


def pip_routes(text: str) -> list[str]:
    """The `pip install -r requirements.txt` commands a document gives."""
    return re.findall(r"`([^`]*pip install [^`]*-r requirements\.txt[^`]*)`", text)


@pytest.mark.parametrize("document", ["guide", "student copy"])
def test_the_documented_routes_ask_the_cpu_index(tmp_path, document):
    if document == "guide":
        text = GUIDE.read_text()
    else:
        copy = studentcopy.build_student_copy(Course.at(REPO), tmp_path / "copy")
        text = (copy / "README.md").read_text()
    routes = pip_routes(text)
    assert routes, f"the {document} gives no pip route"
    assert [r for r in routes if f"--extra-index-url {CPU_INDEX}" not in r] == []
    assert pip_routes("`pip install -r requirements.txt`") != [], "the finder finds a bare one"


def test_the_shared_environment_is_made_with_a_python_every_student_can_run():
    """A venv runs the interpreter it was made with: `python3.11` on the instructor's PATH may be
    one under their home (pyenv, uv), which students cannot read."""
    made = re.findall(r"`(\S+) -m venv /opt/autograd-course`", GUIDE.read_text())
    assert made, "the guide makes the shared environment with `... -m venv /opt/autograd-course`"
    for python in made:
        assert python.startswith("/") and not python.startswith(("/root", "/home")), python
    assert "`/usr/bin/python3.11 -m venv /opt/autograd-course`" in GUIDE.read_text()


@pytest.mark.parametrize("pointer", ["requirements.txt", "Makefile"])
def test_the_cuda_choice_is_documented_where_the_install_files_point(pointer):
    (heading,) = re.findall(r'docs/instructor-guide\.md, "([^"]+)"', (REPO / pointer).read_text())
    section = GUIDE.read_text().split(f"\n## {heading}\n", 1)[1].split("\n## ", 1)[0]
    assert "https://download.pytorch.org/whl/cu" in section and "+cu" in section
