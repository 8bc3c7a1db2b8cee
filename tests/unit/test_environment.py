"""requirements.txt is the one pinned truth; environment.yml (Binder) must agree with it."""

from __future__ import annotations

from pathlib import Path

import pytest

from course_testing import REPO
from pins import disagreements, pip_pins


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
