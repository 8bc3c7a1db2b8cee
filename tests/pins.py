"""The course's pins, read: requirements.txt (pip) and environment.yml (conda-forge), and how
they disagree (tests/unit/test_environment.py, tests/stories/test_student_copy.py)."""

from __future__ import annotations

import re

import yaml
from packaging.requirements import Requirement
from packaging.version import Version

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
