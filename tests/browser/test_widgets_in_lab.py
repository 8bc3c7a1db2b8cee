"""Every course widget of every release notebook, run and moved in real JupyterLab.

For each notebook: open it, wait for a connected idle kernel, Run All from the Run menu, wait for
the run to end, check no cell failed (except at the first exercise, which a student has not
answered yet: Run All stops there), then move every control of every course widget and check
that its readout text and its plot both change. Screenshots go to test-artifacts/screenshots/.
The default run opens one notebook (IN_DEFAULT_RUN), `make test-all` every one.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
from labdriver import (
    fail,
    notebook_cells,
    open_notebook,
    poll,
    run_all,
    screenshot,
    wait_for_kernel_idle,
    wait_until_executed,
)

pytestmark = pytest.mark.browser

REPO = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted(REPO.glob("release/*/*.ipynb"))
WIDGETS_PACKAGE = REPO / "course" / "lesson" / "widgets"

# What the course plan promises in each notebook, on top of what the notebooks themselves call
# (so a widget cell deleted from both source and release still fails here).
PLANNED = {
    "01_requires_grad": {"show_graph"},
    "02_backward": {"show_tangent"},
    "03_grad_zeroing": {"show_accumulation", "show_training"},
    "04_no_grad": {"show_cost"},
}

WIDGETS_RENDER_TIMEOUT_S = 90
CONTROL_CHANGE_TIMEOUT_S = 60

SHOW_CALL = re.compile(r"\b(show_\w+)\s*\(")


def widget_titles() -> dict[str, str]:
    """``show_*`` function -> the title its widget shows, read from course/lesson/widgets/*.py.

    Every course widget is built by ``interactive_plot(controls, draw, title)``.
    """
    titles = {}
    for module in sorted(WIDGETS_PACKAGE.glob("*.py")):
        for function in ast.parse(module.read_text()).body:
            if not (isinstance(function, ast.FunctionDef) and function.name.startswith("show_")):
                continue
            for node in ast.walk(function):
                if not (
                    isinstance(node, ast.Call)
                    and getattr(node.func, "id", None) == "interactive_plot"
                ):
                    continue
                title = node.args[2:3] + [k.value for k in node.keywords if k.arg == "title"]
                if title and isinstance(title[0], ast.Constant) and isinstance(title[0].value, str):
                    titles[function.name] = title[0].value
    return titles


def code_sources(notebook: Path) -> list[str]:
    if not notebook.exists():
        return []
    cells = json.loads(notebook.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def expected_widgets(notebook: Path, titles: dict[str, str]) -> dict[str, str]:
    """``show_*`` -> title for every course widget the notebook should display.

    The calls in the release notebook and in its source (the release must show what the source
    shows), and what the plan promises.
    """
    name = notebook.stem
    source = REPO / "source" / notebook.parent.name / notebook.name
    calls = set(PLANNED.get(name, set()))
    for code in code_sources(notebook) + code_sources(source):
        calls.update(call for call in SHOW_CALL.findall(code) if call in titles)
    unknown = sorted(call for call in calls if call not in titles)
    if unknown:
        fail(
            f"{name}: expected widgets {unknown} are not built by interactive_plot(..., title) in "
            f"course/lesson/widgets/*.py (found {sorted(titles)})"
        )
    return {call: titles[call] for call in sorted(calls)}


def check_errors(cells: list[dict], nb_cells: list[dict], what: str) -> None:
    """No cell failed, except that a release notebook stops at its first unanswered exercise.

    The exercises are unanswered in a release notebook, so the first answer or test cell (nbgrader
    solution or grade cell) to run fails, and the kernel drops the rest of Run All. Any error in
    another cell fails the test, and every code cell before the stop must have run.
    """
    failed = [cell for cell in cells if cell["errors"]]
    problems = []
    for position, cell in enumerate(failed):
        grading = nb_cells[cell["index"]].get("metadata", {}).get("nbgrader", {})
        exercise = grading.get("solution") or grading.get("grade")
        if position == 0 and exercise:
            continue
        problems.extend(
            f"cell {cell['index']} ({grading.get('grade_id', 'not an nbgrader cell')}"
            f"{', an exercise cell' if exercise else ''}): {error['ename']}: {error['evalue']}"
            for error in cell["errors"]
        )
    if problems:
        fail(f"{what}: cells failed after Run All:\n  " + "\n  ".join(problems))
    stop = failed[0]["index"] if failed else len(cells)
    unrun = [
        cell["index"]
        for cell in cells[:stop]
        if cell["type"] == "code"
        and cell["executionCount"] is None
        and "".join(nb_cells[cell["index"]]["source"]).strip()
    ]
    if unrun:
        fail(f"{what}: Run All finished but these code cells before cell {stop} never ran: {unrun}")


# The course widgets on the page: each `.course-readout`'s VBox, numbered in page order.
WIDGETS_JS = """
() => Array.from(document.querySelectorAll('.jp-Notebook .course-readout')).map((readout, i) => {
  const box = readout.closest('.widget-vbox');
  if (!box) { return {index: i, problem: 'a .course-readout outside a VBox'}; }
  box.setAttribute('data-course-widget', String(i));
  const header = box.querySelector(':scope > .widget-html .widget-html-content');
  const row = box.querySelector(':scope > .widget-hbox');
  const controls = row ? Array.from(row.children).map((control, j) => {
    control.setAttribute('data-course-control', String(j));
    const label = control.querySelector('.widget-label');
    const kind = control.querySelector('.noUi-handle') ? 'slider'
               : control.querySelector('select') ? 'dropdown' : 'unknown';
    return {index: j, kind, label: label ? label.textContent.trim() : '',
            classes: control.className};
  }) : [];
  const cell = box.closest('.jp-Cell');
  const img = box.querySelector('.course-plot img');
  return {index: i, title: header ? header.textContent.trim() : '', controls,
          readout: readout.textContent, img: img ? img.src : null,
          cell: cell ? Array.from(cell.parentElement.children).indexOf(cell) : null};
})
"""

STATE_JS = """
(i) => {
  const box = document.querySelector(`[data-course-widget="${i}"]`);
  if (!box) { return null; }
  const readout = box.querySelector('.course-readout');
  const img = box.querySelector('.course-plot img');
  return {readout: readout ? readout.textContent : null, img: img ? img.src : null};
}
"""


@dataclass
class Widget:
    index: int
    title: str
    controls: list[dict]

    def selector(self) -> str:
        return f'[data-course-widget="{self.index}"]'

    def name(self) -> str:
        return f"widget {self.index + 1} {self.title!r}"


def rendered_widgets(page, expected: dict[str, str], what: str) -> list[Widget]:
    """Wait until every expected widget is on the page with its readout and plot drawn."""

    def ready():
        found = page.evaluate(WIDGETS_JS)
        titles = {w["title"] for w in found}
        drawn = all(w.get("readout", "").strip() and w.get("img") for w in found)
        return found if found and drawn and set(expected.values()) <= titles else None

    def describe(_):
        found = page.evaluate(WIDGETS_JS)
        missing = {
            call: title
            for call, title in expected.items()
            if title not in {w["title"] for w in found}
        }
        undrawn = [
            f"{w['index'] + 1} {w['title']!r}"
            for w in found
            if not (w.get("readout", "").strip() and w.get("img"))
        ]
        message = f"{what}: after Run All, within {WIDGETS_RENDER_TIMEOUT_S} s"
        if not found:
            message += " no course widget (.course-readout) appeared on the page"
        if missing:
            message += (
                f"; expected widgets missing: {missing} (is the notebook finished? its "
                "release should call them)"
            )
        if undrawn:
            message += f"; widgets without readout text or plot image: {undrawn}"
        return message + f"; on the page: {[w['title'] for w in found]}"

    found = poll(ready, WIDGETS_RENDER_TIMEOUT_S, describe)
    problems = [w["problem"] for w in found if "problem" in w]
    if problems:
        fail(f"{what}: {problems}")
    return [Widget(w["index"], w["title"], w["controls"]) for w in found]


def move_control(page, widget: Widget, control: dict, what: str) -> str:
    """Move one control a step; returns a description of the move."""
    element = page.locator(f'{widget.selector()} [data-course-control="{control["index"]}"]')
    if control["kind"] == "slider":
        handle = element.locator(".noUi-handle").first
        now = float(handle.get_attribute("aria-valuenow") or "nan")
        top = float(handle.get_attribute("aria-valuemax") or "nan")
        key = "ArrowLeft" if now >= top else "ArrowRight"
        handle.scroll_into_view_if_needed()
        handle.focus()
        page.keyboard.press(key)
        return f"slider {control['label']!r} from {now:g} with {key}"
    if control["kind"] == "dropdown":
        select = element.locator("select")
        options = select.locator("option").all_inner_texts()
        current = select.evaluate("s => s.selectedIndex")
        if len(options) < 2:
            fail(f"{what}, {widget.name()}: dropdown {control['label']!r} has one option only")
        target = (current + 1) % len(options)
        select.scroll_into_view_if_needed()
        select.select_option(index=target)
        return f"dropdown {control['label']!r} from {options[current]!r} to {options[target]!r}"
    fail(
        f"{what}, {widget.name()}: control {control['index'] + 1} ({control['label']!r}, classes "
        f"{control['classes']!r}) is neither a slider nor a dropdown; teach this test to move it"
    )


def short(text: str | None, limit: int = 160) -> str:
    if text is None:
        return "None"
    text = " ".join(text.split())
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} chars)"


def check_control_moves_plot(page, widget: Widget, control: dict, what: str) -> str | None:
    """Move a control; None when readout and plot both changed, else what went wrong."""
    before = page.evaluate(STATE_JS, widget.index)
    move = move_control(page, widget, control, what)
    try:
        page.wait_for_function(
            """([i, readout, img]) => {
                 const box = document.querySelector(`[data-course-widget="${i}"]`);
                 const r = box && box.querySelector('.course-readout');
                 const p = box && box.querySelector('.course-plot img');
                 return r && p && p.src && r.textContent !== readout && p.src !== img;
               }""",
            arg=[widget.index, before["readout"], before["img"]],
            timeout=CONTROL_CHANGE_TIMEOUT_S * 1000,
            polling=100,
        )
        return None
    except Exception as error:  # noqa: BLE001 - turned into a clear message below
        if "Timeout" not in type(error).__name__:
            raise
    after = page.evaluate(STATE_JS, widget.index) or {"readout": None, "img": None}
    same = [
        part
        for part, key in (("readout text", "readout"), ("plot image", "img"))
        if after[key] == before[key] or not after[key]
    ]
    return (
        f"{widget.name()}: moved {move}, but within {CONTROL_CHANGE_TIMEOUT_S} s the "
        f"{' and the '.join(same)} stayed the same (readout now: {short(after['readout'])}; "
        f"plot src {'unchanged' if after['img'] == before['img'] else 'changed'})"
    )


TITLES = widget_titles()


# The notebook of the default run: the one with two widgets (every widget's data, plot and
# readout are also tested in-process, tests/test_widget_*.py); the others are marked slow.
IN_DEFAULT_RUN = "03_grad_zeroing"


@pytest.mark.parametrize(
    "notebook",
    [
        pytest.param(n, id=n.stem, marks=() if n.stem == IN_DEFAULT_RUN else pytest.mark.slow)
        for n in NOTEBOOKS
    ],
)
def test_widgets_in_lab(page, lab, screenshots, notebook):
    relative = notebook.relative_to(REPO).as_posix()
    name, what = notebook.stem, relative
    nb_cells = json.loads((lab.root / relative).read_text())["cells"]
    expected = expected_widgets(notebook, TITLES)
    for stale in screenshots.glob(f"{name}-*.png"):  # the pictures of this run only
        stale.unlink()
    try:
        open_notebook(page, lab.page_url(relative), what, len(nb_cells))
        wait_for_kernel_idle(page, what)
        run_all(page, what)
        wait_until_executed(page, what)
        check_errors(notebook_cells(page, what), nb_cells, what)
        if not expected:
            return  # a notebook without widgets: it ran cleanly, nothing to move
        widgets = rendered_widgets(page, expected, what)

        page.locator(widgets[0].selector()).scroll_into_view_if_needed()
        screenshot(page, screenshots, f"{name}-before")
        failures = []
        for widget in widgets:
            box = page.locator(widget.selector())
            box.scroll_into_view_if_needed()
            screenshot(page, screenshots, f"{name}-widget{widget.index + 1}-before", box)
            if not widget.controls:
                failures.append(f"{widget.name()}: has no controls to move")
            for control in widget.controls:
                problem = check_control_moves_plot(page, widget, control, what)
                if problem:
                    failures.append(problem)
            screenshot(page, screenshots, f"{name}-widget{widget.index + 1}-after", box)
        page.locator(widgets[0].selector()).scroll_into_view_if_needed()
        screenshot(page, screenshots, f"{name}-after")
        if failures:
            fail(f"{what}: " + "\n  ".join(failures))
    except BaseException:
        screenshot(page, screenshots, f"{name}-failure")
        raise


def test_release_has_notebooks():
    assert NOTEBOOKS, "no notebook matches release/*/*.ipynb: nothing for the browser tests to open"
    assert IN_DEFAULT_RUN in {n.stem for n in NOTEBOOKS}, "the default run opens no notebook"
