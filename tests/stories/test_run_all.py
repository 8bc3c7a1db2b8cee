"""Run All, then play with every widget: the order in which a student meets them.

Each source notebook (reference solutions and hidden tests in) runs top to bottom in one kernel,
as Jupyter's Run All does, with ``NBGRADER_EXECUTION`` unset so that the widgets draw. Then, in the
same kernel, every control of every course widget that the notebook displayed is moved (to every
option of a dropdown, to both ends of a slider), and each change must redraw the plot (a new
picture, not the one shown before) with a readout that reports no error; and a figure a lesson
cell draws (``plot_*``, ``display_figure``) is a picture among its outputs (figures are not
pyplot's: nothing shows them at the end of a cell by itself). This is what broke the
graph widget of lesson 1: its examples read the notebook's global ``w``, which a later cell
rebinds, and a pick kept the old picture.
"""

from __future__ import annotations

import json
import re
import time

import nbformat
import pytest
from nbclient import NotebookClient

from course_testing import REPO, student_kernel_env

ASSIGNMENTS = sorted(p.name for p in (REPO / "source").iterdir() if p.is_dir())
SHOW_CALL = re.compile(r"^\s*(?:\w+\s*=\s*)?show_\w+\(", re.MULTILINE)
FIGURE_CALL = re.compile(r"\b(?:plot_\w+|display_figure)\(")  # a lesson cell that draws a figure

# Runs in the notebook's kernel after the last cell. Course widgets are the boxes built by
# course.lesson.widgets.base.interactive_plot: a header, a box of controls, a readout (HTML with
# the class course-readout) and the plot (an Output with the class course-plot). Every figure a
# widget draws goes through the display publisher, which the driver watches.
DRIVER = r"""
import hashlib as _hashlib, json as _json, re as _re
from IPython import get_ipython as _get_ipython
from ipywidgets.widgets.widget import _instances as _widget_instances

def _drive_widgets():
    shell = _get_ipython()
    shown = []
    publish = shell.display_pub.publish

    def spy(data, *args, **kwargs):
        shown.append(data)
        return publish(data, *args, **kwargs)

    shell.display_pub.publish = spy
    error = _re.compile(r"\b[A-Z]\w*(Error|Exception)\b|Traceback|Could not draw")
    boxes = [
        w for w in list(_widget_instances.values())
        if type(w).__name__ == "VBox" and len(w.children) == 4
        and "course-readout" in getattr(w.children[2], "_dom_classes", ())
        and "course-plot" in getattr(w.children[3], "_dom_classes", ())
    ]
    report = {"widgets": len(boxes), "changes": 0, "problems": []}

    def picture(start):
        images = [d["image/png"] for d in shown[start:] if "image/png" in d]
        return _hashlib.sha1(images[-1].encode()).hexdigest() if images else None

    def values(control):
        # every option of a choice, the other state of a switch, both ends of a slider
        if hasattr(control, "options") and hasattr(control, "index"):
            now = control.index
            return [("index", i) for i in range(len(control.options)) if i != now] + [
                ("index", now)
            ]
        if isinstance(control.value, bool):
            return [("value", not control.value), ("value", control.value)]
        if hasattr(control, "min") and hasattr(control, "max"):
            ends = [control.max, control.min]
            if getattr(control, "base", None) is not None:  # FloatLogSlider: exponents
                ends = [control.base**e for e in ends]
            others = [v for i, v in enumerate(ends) if v != control.value and v not in ends[:i]]
            return [("value", v) for v in others]
        return []

    for number, box in enumerate(boxes):
        title = box.children[0].value
        readout = box.children[2]
        last = None
        for control in box.children[1].children:
            for attribute, value in values(control):
                before = picture(0) if last is None else last
                start = len(shown)
                old_text = readout.value
                try:
                    setattr(control, attribute, value)
                except Exception as exc:
                    report["problems"].append(
                        f"{title}: setting {control.description or type(control).__name__} "
                        f"{attribute}={value!r} raised {type(exc).__name__}: {exc}")
                    continue
                report["changes"] += 1
                now = picture(start)
                where = (f"{title}: {control.description or type(control).__name__} "
                         f"{attribute}={value!r}")
                if now is None:
                    report["problems"].append(f"{where}: nothing was drawn")
                elif now == before:
                    report["problems"].append(f"{where}: the plot did not change")
                if error.search(readout.value):
                    report["problems"].append(f"{where}: the readout shows an error: "
                                              f"{readout.value[:300]}")
                last = now if now is not None else before
    shell.display_pub.publish = publish
    print("DRIVER-REPORT " + _json.dumps(report))

_drive_widgets()
"""


def _stdout(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_run_all_then_every_widget_redraws_for_every_control(assignment, tmp_path):
    nb = nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    calls = sum(len(SHOW_CALL.findall(c.source)) for c in nb.cells if c.cell_type == "code")
    driver = nbformat.v4.new_code_cell(DRIVER)
    nb.cells.append(driver)
    client = NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    with client.setup_kernel(env=student_kernel_env()):
        for index, cell in enumerate(nb.cells[:-1]):
            client.execute_cell(cell, index)  # raises CellExecutionError if a cell fails
        started = time.perf_counter()
        client.execute_cell(driver, len(nb.cells) - 1)
        driving = time.perf_counter() - started
    for cell in nb.cells[:-1]:  # a figure a lesson cell draws is a picture in its outputs
        if cell.cell_type == "code" and FIGURE_CALL.search(cell.source):
            pictures = [o for o in cell.outputs if "image/png" in o.get("data", {})]
            assert pictures, f"no picture from: {cell.source}"
    line = next(x for x in _stdout(driver).splitlines() if x.startswith("DRIVER-REPORT "))
    report = json.loads(line.removeprefix("DRIVER-REPORT "))
    assert report["widgets"] == calls, f"{calls} show_*() calls but {report['widgets']} widgets"
    assert report["changes"] >= report["widgets"], report
    assert report["problems"] == [], "\n".join(report["problems"])
    print(
        f"{assignment}: {report['changes']} changes to {report['widgets']} widget(s) in "
        f"{driving:.1f} s"
    )
