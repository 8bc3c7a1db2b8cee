"""requirements.txt is the one pinned truth; environment.yml (Binder) must agree with it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.version import Version

from course_testing import REPO

# conda-forge names for the packages whose PyPI name differs.
CONDA_NAME = {"torch": "pytorch-cpu", "dask": "dask-core"}  # conda-forge "dask" adds pandas, bokeh
PIP_ONLY = {
    "pytest",
    "hypothesis",
    "playwright",
    "ruff",
}  # test tooling: not needed by students on Binder


def pip_pins(text: str) -> dict[str, str]:
    """Each package's pinned release (a build's local label, as torch's ``+cpu``, left out): one
    per package, also when it has a line per platform."""
    pins: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#")[0].strip()
        if not line:
            continue
        requirement = Requirement(line)
        (pin,) = requirement.specifier
        assert pin.operator == "==", f"not an exact pin: {line!r}"
        release = Version(pin.version).public
        name = requirement.name.lower()
        assert pins.setdefault(name, release) == release, f"{name} pinned to two releases"
    return pins


def conda_pins(text: str) -> dict[str, str]:
    env = yaml.safe_load(text)
    pins = {}
    for dep in env["dependencies"]:
        if isinstance(dep, str) and "=" in dep:
            name, version = dep.split("=", 1)
            pins[name.lower()] = version.lstrip("=")
    return pins


def disagreements(requirements: str, environment: str) -> list[str]:
    """Every way the two files disagree, in words."""
    pip, conda = pip_pins(requirements), conda_pins(environment)
    env = yaml.safe_load(environment)
    problems = []
    if conda.get("python") != "3.11":
        problems.append(f"environment.yml must pin python=3.11, has {conda.get('python')}")
    if "conda-forge" not in env.get("channels", []):
        problems.append("environment.yml must use the conda-forge channel")
    for dep in env["dependencies"]:
        if isinstance(dep, str) and re.search(r"cuda|pytorch-gpu|^pytorch=", dep):
            problems.append(f"environment.yml asks for a CUDA build: {dep}")
    for name, version in pip.items():
        if name in PIP_ONLY:
            continue
        conda_name = CONDA_NAME.get(name, name)
        if conda.get(conda_name) != version:
            problems.append(
                f"{name}=={version} in requirements.txt, "
                f"{conda_name}={conda.get(conda_name)} in environment.yml"
            )
    return problems


def test_environment_yml_agrees_with_requirements():
    requirements = (REPO / "requirements.txt").read_text()
    environment = (REPO / "environment.yml").read_text()
    assert disagreements(requirements, environment) == []


def test_the_agreement_check_catches_drift():
    requirements = (
        'torch==2.13.0+cpu ; sys_platform == "linux"\ntorch==2.13.0 ; sys_platform != "linux"\n'
        "nbgrader==0.9.6\npytest==9.0.1\n"
    )
    good = (
        "channels: [conda-forge]\ndependencies: [python=3.11, pytorch-cpu=2.13.0, nbgrader=0.9.6]\n"
    )
    assert disagreements(requirements, good) == []
    drifted = good.replace("nbgrader=0.9.6", "nbgrader=0.9.5")
    assert disagreements(requirements, drifted) == [
        "nbgrader==0.9.6 in requirements.txt, nbgrader=0.9.5 in environment.yml"
    ]
    cuda = good.replace("pytorch-cpu=2.13.0", "pytorch-cpu=2.13.0, pytorch-cuda=12.4")
    assert any("CUDA" in p for p in disagreements(requirements, cuda))
    wrong_python = good.replace("python=3.11", "python=3.12")
    assert any("python=3.11" in p for p in disagreements(requirements, wrong_python))
    with pytest.raises(AssertionError, match="torch pinned to two releases"):
        pip_pins(requirements.replace("torch==2.13.0 ;", "torch==2.12.0 ;"))
    with pytest.raises(AssertionError, match="not an exact pin"):
        pip_pins("nbgrader>=0.9\n")


def test_requirements_pin_the_stack():
    pins = pip_pins((REPO / "requirements.txt").read_text())
    assert pins["torch"] == "2.13.0"
    assert pins["nbgrader"] == "0.9.6"
    assert pins["jupyterlab"].startswith("4.6.")
    assert pins["ipywidgets"].startswith("8.1.")
    assert pins["matplotlib"].startswith("3.11.")


def test_binder_post_build_installs_the_course_and_stops_on_error():
    post_build = (REPO / "postBuild").read_text()
    assert post_build.startswith("#!/bin/bash\n")
    assert "\nset -e\n" in post_build
    assert "pip install --no-deps -e ." in post_build
    assert Path(REPO / "postBuild").stat().st_mode & 0o111, "postBuild must be executable"
