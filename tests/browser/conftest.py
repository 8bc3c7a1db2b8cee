"""Real JupyterLab in headless Chromium: a throwaway server and browser for the browser tests.

The facts these fixtures rely on (launch flags, the news pop-up, kernel readiness) are recorded in
docs/jupyterlab-in-chromium.md. Nothing here touches the repository except the screenshots
written to test-artifacts/screenshots/ (gitignored).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from course.lab import lab_environment
from course.submission import (
    answer_file,
    answer_names,
    build_submission,
    reference_answers,
    write_submission,
)
from course_testing import copy_course, venv_env, with_essay

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
# Without the background-networking flags Chromium's own connections out are refused many at a
# time on these machines; Playwright's bundled browser cannot be downloaded here.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = REPO / "test-artifacts" / "screenshots"
COURSE_CONFIG = "nbgrader_config.py"

SERVER_START_TIMEOUT_S = 120
SERVER_STOP_TIMEOUT_S = 20
DEFAULT_TIMEOUT_MS = 30_000
VIEWPORT = {"width": 1440, "height": 1000}
LAB_SETTINGS = [
    # A fresh HOME otherwise opens with a news pop-up over the page.
    ("apputils-extension", "notification", {"fetchNews": "false", "checkForUpdates": False}),
    # Keep every cell in the page: by default Lab only attaches the cells near the viewport, and
    # the tests read every cell's prompt and outputs.
    ("notebook-extension", "tracker", {"windowingMode": "none"}),
]


@dataclass
class Lab:
    """A running JupyterLab server: where it listens and how to reach its REST API."""

    url: str
    token: str
    root: Path
    home: Path
    log_path: Path
    process: subprocess.Popen = field(repr=False)

    def api(self, method: str, path: str, timeout: float = 10.0) -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}", method=method, headers={"Authorization": f"token {self.token}"}
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
        return json.loads(body) if body else None

    def page_url(self, path: str = "") -> str:
        """A Lab URL in a workspace of its own, so no test reopens what an earlier one left open."""
        workspace = f"test-{uuid.uuid4().hex[:8]}"
        tree = f"/tree/{path}" if path else ""
        return f"{self.url}/lab/workspaces/{workspace}{tree}?token={self.token}"

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as error:
            return f"(server log unreadable: {error})"

    def shutdown_kernels(self) -> None:
        """Stop every kernel, so the next test does not share two cores with a leftover one."""
        for kernel in self.api("GET", "/api/kernels"):
            try:
                self.api("DELETE", f"/api/kernels/{kernel['id']}", timeout=30)
            except urllib.error.HTTPError as error:
                if error.code != 404:  # already gone
                    raise


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _make_home(home: Path) -> dict[str, str]:
    """A fresh HOME with the Lab settings the tests need, and the environment pointing at it."""
    user_settings = home / ".jupyter" / "lab" / "user-settings" / "@jupyterlab"
    for plugin, name, values in LAB_SETTINGS:
        (user_settings / plugin).mkdir(parents=True, exist_ok=True)
        (user_settings / plugin / f"{name}.jupyterlab-settings").write_text(json.dumps(values))
    env = dict(os.environ)
    # Widgets draw nothing when nbgrader's execution flag is set
    # (course.lesson.widgets.base.headless).
    for name in (
        "NBGRADER_EXECUTION",
        "MPLBACKEND",
        "JUPYTER_PATH",
        "JUPYTERLAB_DIR",
        "JUPYTERLAB_SETTINGS_DIR",
        "JUPYTERLAB_WORKSPACES_DIR",
    ):
        env.pop(name, None)
    env.update(
        # As `make lab` has it (course.lab): without the venv's bin/ on PATH the formgrader's
        # assignment list answers 500.
        PATH=lab_environment()["PATH"],
        HOME=str(home),
        JUPYTER_CONFIG_DIR=str(home / ".jupyter"),
        JUPYTER_DATA_DIR=str(home / ".local" / "share" / "jupyter"),
        JUPYTER_RUNTIME_DIR=str(home / ".local" / "share" / "jupyter" / "runtime"),
        PYTHONUNBUFFERED="1",
    )
    return env


def _make_course_root(root: Path) -> None:
    """The students' notebooks (release/), the course config and, for the formgrader, source/."""
    root.mkdir(parents=True)
    shutil.copy2(REPO / COURSE_CONFIG, root / COURSE_CONFIG)
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__")
    shutil.copytree(REPO / "release", root / "release", ignore=ignore)
    # The formgrader lists the assignments it finds in source/; students never see this folder.
    shutil.copytree(REPO / "source", root / "source", ignore=ignore)
    # The config's course-local exchange, created as nbgrader would (world-writable).
    exchange = root / "exchange"
    exchange.mkdir()
    exchange.chmod(0o777)


def _wait_for_server(lab: Lab, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        if lab.process.poll() is not None:
            raise RuntimeError(
                f"JupyterLab exited with code {lab.process.returncode} before answering "
                f"/api/status; server log:\n{lab.log_tail()}"
            )
        try:
            lab.api("GET", "/api/status", timeout=5)
            return
        except (OSError, urllib.error.URLError) as error:
            last_error = error
            time.sleep(0.5)
    raise RuntimeError(
        f"JupyterLab did not answer {lab.url}/api/status within {timeout_s:.0f} s "
        f"(last error: {last_error}); server log:\n{lab.log_tail()}"
    )


def stop(process: subprocess.Popen) -> None:
    if process.poll() is not None:
        return
    process.terminate()  # the server shuts its kernels down on SIGTERM
    try:
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=SERVER_STOP_TIMEOUT_S)


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    """Debian's chromium. Missing: a skip on a developer's machine, a failure in CI."""
    if not CHROMIUM.exists():
        message = f"{CHROMIUM} is missing: install it with `apt-get install -y chromium`"
        if os.environ.get("CI"):
            pytest.fail(
                f"{message} (CI is set, and in CI the browser tests must run)", pytrace=False
            )
        pytest.skip(message)
    return CHROMIUM


def serve(root: Path, base: Path) -> Lab:
    """JupyterLab on ``root`` started as `make lab` starts it (`python -m course lab`), on a free
    loopback port with a known token, a fresh HOME and its log in ``base``; stop it with
    `stop`."""
    base.mkdir(parents=True, exist_ok=True)
    home, log_path = base / "home", base / "jupyterlab.log"
    env = _make_home(home)
    port, token = _free_port(), secrets.token_hex(24)
    command = [sys.executable, "-m", "course", "--course", str(root), "lab", "--no-browser",
               "--ip", "127.0.0.1", "--port", str(port), f"--IdentityProvider.token={token}",
               # window.jupyterapp: the tests read cells' outputs from the notebook model, where
               # an error is an error (the page renders it like any text on stderr).
               "--LabApp.expose_app_in_browser=True"]  # fmt: skip
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            command, cwd=root, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
    server = Lab(f"http://127.0.0.1:{port}", token, root, home, log_path, process)
    try:
        _wait_for_server(server, SERVER_START_TIMEOUT_S)
    except BaseException:
        stop(process)
        raise
    return server


@pytest.fixture(scope="session")
def lab(chromium_path, tmp_path_factory) -> Lab:
    """JupyterLab on a free loopback port, serving a scratch copy of the course."""
    base = tmp_path_factory.mktemp("jupyterlab")
    _make_course_root(base / "course")
    server = serve(base / "course", base)
    try:
        yield server
    finally:
        stop(server.process)


GRADED_ASSIGNMENT = "01_requires_grad"


def course_command(root: Path, *args: str) -> subprocess.CompletedProcess:
    """``python -m course ARGS`` in the course at ``root``, as an instructor runs it."""
    return subprocess.run(
        [sys.executable, "-m", "course", *args],
        cwd=root, env=venv_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="session")
def graded_class(chromium_path, tmp_path_factory) -> Path:
    """The root of a course where ada's submission of GRADED_ASSIGNMENT is graded (by `grade`):
    one exercise wrong (a failure in the report), a written answer that waits for a grader;
    then a backup made (by `backup`)."""
    course = copy_course(tmp_path_factory.mktemp("graded") / "course", with_release=True)
    answers = reference_answers(course, GRADED_ASSIGNMENT)
    exercise = next(iter(answers))
    wrong = answer_names(course, GRADED_ASSIGNMENT, exercise)
    answers[exercise] = answer_file(
        course, GRADED_ASSIGNMENT, exercise, next(n for n in wrong if n.startswith("wrong_"))
    )
    nb = build_submission(course, GRADED_ASSIGNMENT, answers)
    essay = "Leaves are what an optimizer updates; the gradients of results are dropped."
    write_submission(course, "ada", GRADED_ASSIGNMENT, with_essay(nb, GRADED_ASSIGNMENT, essay))
    for command in (["grade", GRADED_ASSIGNMENT], ["backup"]):
        done = course_command(course.root, *command)
        assert done.returncode == 0, done.stdout + done.stderr
    return course.root


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(
            executable_path=str(chromium_path), args=CHROMIUM_ARGS, headless=True
        )
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser, lab):
    """A fresh browser context and page; afterwards every kernel of the server is stopped."""
    context = browser.new_context(viewport=VIEWPORT)
    context.set_default_timeout(DEFAULT_TIMEOUT_MS)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()
        lab.shutdown_kernels()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    return SCREENSHOTS
