"""Driving JupyterLab in the page: opening, menus, kernel state, Run All, reading cells.

Every wait is bounded and fails with an AssertionError that says what it waited for, where, and
what it saw last. See docs/jupyterlab-in-chromium.md for why the waits are shaped this way.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

LAB_LOAD_TIMEOUT_S = 120
KERNEL_IDLE_TIMEOUT_S = 180
RUN_ALL_START_TIMEOUT_S = 30
EXECUTION_TIMEOUT_S = 300
POLL_S = 0.5

PROMPT_STARTED = re.compile(r"^\[(\*|\d+)\]:$")

# The notebook's cells as the model has them (window.jupyterapp, exposed by the lab fixture), with
# the prompt the page shows. The page renders an error like any text on stderr; the model does not.
CELLS_JS = """
() => {
  const app = window.jupyterapp;
  if (!app) { return {problem: 'window.jupyterapp is missing (expose_app_in_browser)'}; }
  const isNotebook = w => w && w.content && w.content.model && w.content.widgets;
  let panel = app.shell.currentWidget;
  if (!isNotebook(panel)) {
    panel = Array.from(app.shell.widgets('main')).find(isNotebook);
  }
  if (!isNotebook(panel)) { return {problem: 'no notebook is open'}; }
  const cells = panel.content.widgets.map((cell, index) => {
    const model = cell.model;
    const out = {index, type: model.type, prompt: null, executionCount: null, errors: [],
                 outputTypes: []};
    if (model.type === 'code') {
      out.executionCount = model.executionCount;
      const prompt = cell.node.querySelector('.jp-InputArea .jp-InputPrompt');
      out.prompt = prompt ? prompt.textContent.trim() : null;
      for (let k = 0; k < model.outputs.length; k++) {
        const output = model.outputs.get(k).toJSON();
        out.outputTypes.push(output.output_type);
        if (output.output_type === 'error') {
          out.errors.push({ename: output.ename, evalue: String(output.evalue).slice(0, 300)});
        }
      }
    }
    return out;
  });
  return {path: panel.context.path, cells};
}
"""

STATUS_JS = """
() => {
  const bar = document.querySelector('#jp-main-statusbar');
  return bar ? bar.textContent : null;
}
"""


def fail(message: str) -> None:
    raise AssertionError(message)


def poll(check, timeout_s: float, describe, stable: int = 1, interval_s: float = POLL_S):
    """Call ``check()`` until it returns a truthy value ``stable`` times in a row.

    Returns that value; after ``timeout_s`` fails with ``describe(last_value)``.
    """
    deadline = time.monotonic() + timeout_s
    streak, value = 0, None
    while True:
        value = check()
        streak = streak + 1 if value else 0
        if streak >= stable:
            return value
        if time.monotonic() > deadline:
            fail(describe(value))
        time.sleep(interval_s)


def open_lab(page, url: str, what: str) -> None:
    """Load Lab and wait until its menu bar is there."""
    page.goto(url, timeout=LAB_LOAD_TIMEOUT_S * 1000)
    try:
        page.locator("#jp-MainMenu .lm-MenuBar-item").first.wait_for(
            state="visible", timeout=LAB_LOAD_TIMEOUT_S * 1000
        )
    except Exception as error:  # noqa: BLE001 - reported with context
        fail(
            f"{what}: JupyterLab's menu bar did not appear within {LAB_LOAD_TIMEOUT_S} s "
            f"({type(error).__name__})"
        )


def status_text(page) -> str:
    return page.evaluate(STATUS_JS) or ""


def kernel_idle(page) -> bool:
    """The status bar's kernel state: Idle and connected (the toolbar says idle too early)."""
    text = status_text(page)
    return "Idle" in text and not any(
        word in text for word in ("Connecting", "Initializing", "Starting", "Busy", "No Kernel")
    )


def wait_for_kernel_idle(page, what: str, timeout_s: float = KERNEL_IDLE_TIMEOUT_S) -> None:
    poll(
        lambda: kernel_idle(page),
        timeout_s,
        stable=3,
        describe=lambda _: (
            f"{what}: the kernel was not idle and connected within "
            f"{timeout_s:.0f} s; status bar says {status_text(page)!r}"
        ),
    )


def open_menu(page, label: str):
    """Open a menu of the main menu bar by its label; returns the open menu."""
    item = page.locator("#jp-MainMenu .lm-MenuBar-item").filter(
        has=page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(f"^{re.escape(label)}$"))
    )
    if item.count() != 1:
        labels = page.locator("#jp-MainMenu .lm-MenuBar-itemLabel").all_text_contents()
        fail(f"the menu bar has no single {label!r} menu; it has {labels}")
    item.click()
    menu = page.locator(".lm-Menu").last
    menu.wait_for(state="visible", timeout=10_000)
    return menu


def click_menu_command(page, menu_label: str, command: str) -> None:
    menu = open_menu(page, menu_label)
    entry = menu.locator(f'.lm-Menu-item[data-command="{command}"]')
    if entry.count() != 1:
        commands = menu.locator(".lm-Menu-item").evaluate_all(
            "items => items.map(i => i.getAttribute('data-command'))"
        )
        fail(f"the {menu_label!r} menu has no {command!r} entry; it has {commands}")
    entry.click()


def notebook_cells(page, what: str) -> list[dict[str, Any]]:
    state = page.evaluate(CELLS_JS)
    if "problem" in state:
        fail(f"{what}: cannot read the notebook's cells: {state['problem']}")
    return state["cells"]


def code_prompts(cells) -> list[str | None]:
    return [cell["prompt"] for cell in cells if cell["type"] == "code"]


def open_notebook(page, url: str, what: str, cell_count: int) -> list[dict[str, Any]]:
    """Open a notebook and wait until all its cells are on the page."""
    open_lab(page, url, what)

    def loaded():
        state = page.evaluate(CELLS_JS)
        return state["cells"] if "cells" in state and len(state["cells"]) == cell_count else None

    def describe(_):
        state = page.evaluate(CELLS_JS)
        seen = state.get("problem") or f"{len(state['cells'])} cells on the page"
        return (
            f"{what}: the notebook did not open with its {cell_count} cells within "
            f"{LAB_LOAD_TIMEOUT_S} s ({seen})"
        )

    return poll(loaded, LAB_LOAD_TIMEOUT_S, describe)


def run_all(page, what: str) -> None:
    """Run > Run All Cells, then check that it really started (the first prompt changes)."""
    before = code_prompts(notebook_cells(page, what))
    if not before:
        fail(f"{what}: the notebook has no code cell to run")
    if before[0] != "[ ]:":
        fail(f"{what}: before Run All the first code cell's prompt is {before[0]!r}, not '[ ]:'")
    click_menu_command(page, "Run", "runmenu:run-all")
    poll(
        lambda: PROMPT_STARTED.match(code_prompts(notebook_cells(page, what))[0] or ""),
        RUN_ALL_START_TIMEOUT_S,
        describe=lambda _: (
            f"{what}: Run All ran nothing: the first code cell's prompt is still "
            f"{code_prompts(notebook_cells(page, what))[0]!r} after "
            f"{RUN_ALL_START_TIMEOUT_S} s (status bar: {status_text(page)!r})"
        ),
    )


def wait_until_executed(page, what: str, timeout_s: float = EXECUTION_TIMEOUT_S):
    """Wait until no cell is queued or running and the kernel is idle (seen three times running:
    the status bar says Idle for a moment between two queued cells)."""

    def finished():
        cells = notebook_cells(page, what)
        if any(prompt and "*" in prompt for prompt in code_prompts(cells)):
            return None
        return cells if kernel_idle(page) else None

    def describe(_):
        cells = notebook_cells(page, what)
        running = [c["index"] for c in cells if c["type"] == "code" and "*" in (c["prompt"] or "")]
        return (
            f"{what}: Run All did not finish within {timeout_s:.0f} s; cells still queued or "
            f"running: {running}; status bar: {status_text(page)!r}"
        )

    return poll(finished, timeout_s, describe, stable=3)


def screenshot(page, directory: Path, name: str, element=None) -> Path:
    path = directory / f"{name}.png"
    try:
        (element or page).screenshot(path=str(path), timeout=15_000)
    except Exception as error:  # noqa: BLE001 - a missing picture must not hide the real failure
        print(f"screenshot {path} failed: {error}")
    return path
