"""What every widget shares: a colour-blind-safe palette, headless detection and the layout.

Runs in: a student's kernel, and a grading kernel running the same notebook.
"""

from __future__ import annotations

import io
import os
from collections.abc import Callable
from typing import Any

from matplotlib.figure import Figure

# Okabe & Ito's palette: distinguishable with the common colour-vision deficiencies.
PALETTE = {
    "blue": "#0072B2",
    "orange": "#E69F00",
    "green": "#009E73",
    "vermillion": "#D55E00",
    "purple": "#CC79A7",
    "sky": "#56B4E9",
    "black": "#000000",
}


def headless() -> bool:
    """True when nbgrader executes the notebook (autograde, validate): no one will see a widget."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def new_figure(ncols: int = 1, width: float = 5.0, height: float = 3.6) -> tuple[Figure, Any]:
    """A figure with ``ncols`` side-by-side axes, sized for a notebook cell.

    A bare ``Figure``, not pyplot's: importing pyplot costs a student's Run All time, and
    nothing here needs a window or a figure kept open after drawing.
    """
    fig = Figure(figsize=(width * ncols, height), layout="constrained")
    return fig, fig.subplots(1, ncols)


def png(fig: Figure):
    """The figure as a PNG image, drawn once (IPython's inline display draws it twice, for a
    tight bounding box that a constrained layout does not need)."""
    from IPython.display import Image

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return Image(data=buffer.getvalue(), format="png")


def display_figure(fig: Figure) -> None:
    """Show a figure in the notebook (a bare ``Figure`` is not shown at the end of a cell, as
    pyplot's are); not while nbgrader runs the notebook, when no one sees it."""
    from IPython.display import display

    if not headless():
        display(png(fig))


def interactive_plot(
    controls: dict[str, Any],
    draw: Callable[..., tuple[Figure, str]],
    title: str,
):
    """A box of ``controls`` above a readout and a plot, redrawn whenever a control moves.

    ``draw(**values)`` returns the figure and a plain-text readout of the numbers it shows, so the
    numbers can be read without the picture. When nbgrader runs the notebook, nothing is drawn and
    a one-line placeholder is returned instead: graded runs stay fast and never wait on a front end.
    """
    import ipywidgets as widgets

    if headless():
        return widgets.HTML(f"<i>{title}: interactive widget (not drawn during grading)</i>")

    readout = widgets.HTML(layout=widgets.Layout(margin="0 0 0 8px"))
    readout.add_class("course-readout")
    output = widgets.Output()
    output.add_class("course-plot")

    def redraw(_change=None) -> None:
        fig, text = draw(**{name: control.value for name, control in controls.items()})
        readout.value = f"<pre style='margin:0'>{text}</pre>"
        with output:
            output.clear_output(wait=True)
            display_figure(fig)

    for control in controls.values():
        control.observe(redraw, names="value")
    redraw()
    header = widgets.HTML(f"<b>{title}</b>")
    return widgets.VBox([header, widgets.HBox(list(controls.values())), readout, output])


def error_view(error: BaseException, title: str = "Could not draw"):
    """A figure and a readout that say what went wrong, drawn in place of the last picture.

    The course's widgets draw this when computing their numbers fails, so a failed redraw never
    leaves the previous (now wrong) picture standing.
    """
    fig, ax = new_figure(ncols=1, width=6.0, height=1.6)
    message = f"{type(error).__name__}: {error}"
    ax.text(0.5, 0.5, message, ha="center", va="center", wrap=True, color=PALETTE["vermillion"])
    ax.set_title(title)
    ax.set_axis_off()
    return fig, f"{title}: {message}"
