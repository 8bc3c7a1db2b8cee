"""The Makefile as `make -n` shows it (what make would run, run nothing), in a scratch folder with
the course's Makefile: the README's two commands set themselves up on a fresh machine, the
install says what it does, and `lab`, `demo` and `release` run in the environment active in the
shell when it can run the course, building no second one."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_testing import REPO

COPIED = ("Makefile", "requirements.txt", "pyproject.toml")
BUILDS_VENV = "-m venv .venv"


def make_n(folder: Path, target: str, active: Path | None = None) -> str:
    """What ``make target`` would run in ``folder`` with ``active`` as the active environment
    (none: a fresh shell)."""
    # A fresh shell: no active environment, and no make above it (`make test` runs this one:
    # its MAKELEVEL and MAKEFLAGS would add "Entering directory" lines and its options).
    dropped = ("VIRTUAL_ENV", "CONDA_PREFIX", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    if active is not None:
        env["VIRTUAL_ENV"] = str(active)
    done = subprocess.run(["make", "-n", target], cwd=folder, env=env, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def folder(tmp_path) -> Path:
    """A course folder without a .venv (a fresh clone, or a copy for a new term)."""
    for name in COPIED:
        (tmp_path / name).write_bytes((REPO / name).read_bytes())
    return tmp_path


def test_the_readme_gives_two_commands_for_a_fresh_machine_that_set_themselves_up(folder):
    readme = (REPO / "README.md").read_text()
    section = readme.split("## On a fresh machine", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", section, re.S)[1]
    commands = re.findall(r"^make (\w+)", block, flags=re.M)
    assert commands == ["demo", "test"]
    for command in commands:
        assert BUILDS_VENV in make_n(folder, command), command


def test_a_rule_without_install_does_not_set_itself_up(tmp_path):
    (tmp_path / "Makefile").write_text("demo:\n\tpython -m course demo\n")  # the known-bad rule
    assert BUILDS_VENV not in make_n(tmp_path, "demo")


def test_the_install_says_what_it_does(folder):
    commands = make_n(folder, "install").splitlines()
    said = [c for c in commands if c.startswith("echo ")]
    assert said and "Installing the course's environment in .venv" in said[0]
    (requirements,) = [c for c in commands if c.endswith("pip install -r requirements.txt")]
    assert "--quiet" not in requirements, "pip's own lines show what it installs"


@pytest.mark.parametrize("target", ["lab", "demo", "release"])
def test_an_active_environment_that_runs_the_course_is_used_and_nothing_built(folder, target):
    """As `python -m course` does; the environment of this test run can run the course."""
    active = Path(sys.prefix)
    assert make_n(folder, target, active).splitlines() == [
        f"{active}/bin/python -m course {target}"
    ]


@pytest.mark.parametrize("target", ["lab", "demo", "release"])
def test_an_environment_that_cannot_run_the_course_is_passed_over(folder, tmp_path, target):
    other = tmp_path / "other-env"  # active, but without nbgrader, JupyterLab or torch
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "python").symlink_to(sys.base_prefix + "/bin/python3")
    for active in (other, folder / ".venv"):  # the folder's own .venv: its install rule applies
        commands = make_n(folder, target, active)
        assert BUILDS_VENV in commands and commands.endswith(
            f".venv/bin/python -m course {target}\n"
        )


def test_install_and_test_use_the_folder_s_own_venv_whatever_is_active(folder):
    for target in ("install", "test"):
        assert BUILDS_VENV in make_n(folder, target, Path(sys.prefix)), target
