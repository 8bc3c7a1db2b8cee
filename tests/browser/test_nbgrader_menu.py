"""The Nbgrader menu in real JupyterLab: the student's Assignment List and the Formgrader open."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from labdriver import click_menu_command, fail, open_lab, open_menu, poll, screenshot

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
NBGRADER_COMMANDS = ["nbgrader:open-assignment-list", "nbgrader:open-formgrader"]

RENDER_TIMEOUT_S = 90
# What nbgrader says when the exchange is missing or unusable, and other failures it shows.
EXCHANGE_PROBLEM = re.compile(
    r"does not exist|could not be created|Unwritable directory|contact your instructor|"
    r"Traceback|Internal Server Error",
    re.IGNORECASE,
)


def text_of(locator) -> str:
    try:
        return locator.inner_text(timeout=5_000)
    except Exception:  # noqa: BLE001 - not there (yet)
        return ""


def test_nbgrader_menu_lists_its_tools(page, lab, screenshots):
    open_lab(page, lab.page_url(), "Lab")
    menu = open_menu(page, "Nbgrader")
    commands = menu.locator(".lm-Menu-item").evaluate_all(
        "items => items.map(i => i.getAttribute('data-command'))"
    )
    missing = [command for command in NBGRADER_COMMANDS if command not in commands]
    screenshot(page, screenshots, "nbgrader-menu")
    assert not missing, f"the Nbgrader menu lacks {missing}; it has {commands}"
    page.keyboard.press("Escape")


def test_assignment_list_opens(page, lab, screenshots):
    open_lab(page, lab.page_url(), "Lab")
    click_menu_command(page, "Nbgrader", "nbgrader:open-assignment-list")
    panel = page.locator("#nbgrader-assignment-list")
    sections = ["Released assignments", "Downloaded assignments", "Submitted assignments"]

    def rendered():
        text = text_of(panel)
        loading = "Loading" in text or "please wait" in text.lower()
        return text if all(s in text for s in sections) and not loading else None

    try:
        text = poll(
            rendered,
            RENDER_TIMEOUT_S,
            describe=lambda _: (
                f"Assignment List: did not render its sections {sections} "
                f"within {RENDER_TIMEOUT_S} s; it shows "
                f"{text_of(panel)[:500]!r}"
            ),
        )
        problem = EXCHANGE_PROBLEM.search(text)
        assert not problem, (
            f"Assignment List shows a problem ({problem.group(0)!r}): {text[:800]!r}"
        )
    finally:
        screenshot(page, screenshots, "nbgrader-assignment-list")


def test_formgrader_opens_with_the_course_assignments(page, lab, screenshots):
    open_lab(page, lab.page_url(), "Lab")
    click_menu_command(page, "Nbgrader", "nbgrader:open-formgrader")
    try:
        page.locator("#formgrader iframe").wait_for(
            state="attached", timeout=RENDER_TIMEOUT_S * 1000
        )
        frame = page.frame_locator("#formgrader iframe")
        body = frame.locator("body")

        def listed():
            rows = frame.locator("table tr").all_inner_texts()
            names = {row.split("\t")[0].strip() for row in rows}
            return rows if set(ASSIGNMENTS) <= names else None

        poll(
            listed,
            RENDER_TIMEOUT_S,
            describe=lambda _: (
                f"Formgrader: the assignments {ASSIGNMENTS} were not all listed "
                f"within {RENDER_TIMEOUT_S} s; the page shows "
                f"{text_of(body)[:800]!r}"
            ),
        )
        alerts = [a for a in frame.locator(".alert:visible").all_inner_texts() if a.strip()]
        assert not alerts, f"Formgrader shows warnings: {alerts}"
        problem = EXCHANGE_PROBLEM.search(text_of(body))
        assert not problem, (
            f"Formgrader shows a problem ({problem.group(0)!r}): {text_of(body)[:800]!r}"
        )
        # The course's own exchange (nbgrader_config.py), not the system-wide default.
        if "/usr/local/share/nbgrader/exchange" in (body.text_content() or ""):
            fail("Formgrader uses the system-wide exchange, not the course's exchange/")
    finally:
        screenshot(page, screenshots, "nbgrader-formgrader")
