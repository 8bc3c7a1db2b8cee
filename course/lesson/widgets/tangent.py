"""The derivative as a slope: a curve, a point on it, and the tangent whose slope autograd
computed.

Runs in: a student's kernel, and a grading kernel running the same notebook.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from .base import PALETTE, interactive_plot, new_figure

Function = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class TangentData:
    """A curve sampled on ``[lo, hi]`` and its tangent line at ``x0``."""

    xs: list[float]  # where the curve is sampled (also where the tangent line is drawn)
    ys: list[float]  # f at each of xs
    x0: float
    y0: float  # f(x0)
    slope: float  # df/dx at x0, from autograd
    tangent_ys: list[float]  # y0 + slope * (x - x0) at each of xs


def _value(f: Function, t: torch.Tensor) -> torch.Tensor:
    out = f(t)
    if not isinstance(out, torch.Tensor) or out.dim() != 0:
        got = f"shape {tuple(out.shape)}" if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"f must return a 0-dimensional tensor for a 0-dimensional input, got {got}"
        )
    return out


def tangent_data(f: Function, x0: float, lo: float, hi: float, points: int = 201) -> TangentData:
    """Sample ``f`` on ``[lo, hi]`` and compute its slope at ``x0`` with one ``backward()`` call.

    ``f`` maps a 0-dimensional tensor to a 0-dimensional tensor. Everything runs in float64 on
    private tensors, so the same arguments always give the same numbers.
    """
    if not lo < hi:
        raise ValueError(f"lo must be below hi, got lo={lo} and hi={hi}")
    if not lo <= x0 <= hi:
        raise ValueError(f"x0={x0} is outside the plotted range [{lo}, {hi}]")
    if points < 2:
        raise ValueError(f"points must be at least 2, got {points}")
    xs = torch.linspace(lo, hi, points, dtype=torch.float64)
    with torch.no_grad():
        ys = [_value(f, x).item() for x in xs]
    t = torch.tensor(float(x0), dtype=torch.float64, requires_grad=True)
    y = _value(f, t)
    if y.requires_grad:
        y.backward()
        slope = t.grad.item()
    else:  # f ignores its input: a flat line
        slope = 0.0
    y0 = y.item()
    tangent = [y0 + slope * (x - x0) for x in xs.tolist()]
    return TangentData(xs.tolist(), ys, float(x0), y0, slope, tangent)


def _shown(value: float) -> float:
    """``value`` as it is printed: -0.0 (the slope of exp(−x²) at 0, for one) becomes 0.0, so
    no readout says "-0"."""
    return value + 0.0


def plot_tangent(data: TangentData, ax=None, name: str = "f(x)"):
    """The curve (labelled ``name``), the point (x0, f(x0)) and the tangent line through it."""
    if ax is None:
        fig, ax = new_figure(width=6.0)
    else:
        fig = ax.figure
    ax.plot(data.xs, data.ys, "-", color=PALETTE["blue"], linewidth=2, label=name)
    ax.plot(
        data.xs,
        data.tangent_ys,
        "--",
        color=PALETTE["orange"],
        linewidth=2,
        label=f"tangent, slope {_shown(data.slope):.4g}",
    )
    ax.plot(
        [data.x0],
        [data.y0],
        "o",
        color=PALETTE["vermillion"],
        markersize=8,
        label=f"x = {_shown(data.x0):.3g}",
    )
    # Keep the curve in view: a steep tangent would otherwise squash it.
    finite = [y for y in data.ys if math.isfinite(y)]
    low, high = (min(finite), max(finite)) if finite else (-1.0, 1.0)
    pad = 0.15 * (high - low) or 1.0
    ax.set_ylim(low - pad, high + pad)
    ax.set_xlim(data.xs[0], data.xs[-1])
    ax.axhline(0, color="#999999", linewidth=0.8)
    ax.set_title(
        f"Tangent to {name} at x = {_shown(data.x0):.3g}: slope = {_shown(data.slope):.4g}"
    )
    ax.set_xlabel("x")
    ax.set_ylabel("f(x)")
    ax.legend(loc="best", fontsize="small")
    return fig


def readout(data: TangentData) -> str:
    """The numbers in the plot as text: the point, the value and the slope."""
    return (
        f"x      = {_shown(data.x0):.4g}\n"
        f"f(x)   = {_shown(data.y0):.6g}\n"
        f"slope  = {_shown(data.slope):.6g}   (df/dx from backward())"
    )


def _cubic(t: torch.Tensor) -> torch.Tensor:
    return t**3 - 2 * t


#: The functions ``show_tangent()`` offers when it is given none, each with the range that shows
#: its shape: x³ − 2x on [-1.8, 1.8], where its bump and dip (at ±0.82, height ±1.09) fill half
#: the height of the plot instead of a tenth, as on [-3, 3].
FUNCTIONS: dict[str, tuple[Function, float, float]] = {
    "sin(x)": (torch.sin, -3.2, 3.2),
    "x³ − 2x": (_cubic, -1.8, 1.8),
    "exp(−x²)": (lambda t: torch.exp(-(t**2)), -2.5, 2.5),
    "x · sin(x)": (lambda t: t * torch.sin(t), -4.0, 4.0),
}


def _message_figure(title: str, text: str):
    fig, ax = new_figure(width=6.0)
    ax.set_title(title)
    ax.set_axis_off()
    ax.text(
        0.5,
        0.5,
        text,
        ha="center",
        va="center",
        fontsize=11,
        color=PALETTE["vermillion"],
        wrap=True,
    )
    return fig


def draw_tangent(name: str, f: Function, x: float, lo: float, hi: float):
    """``(figure, readout text)`` for ``f`` on ``[lo, hi]`` at ``x`` (moved into the range).

    An error in ``f`` is drawn as a message naming it, so a widget never keeps showing the
    previous picture.
    """
    x = min(max(float(x), lo), hi)
    try:
        data = tangent_data(f, x, lo, hi)
    except Exception as error:  # shown to the student instead of a stale picture
        message = f"Could not draw {name} at x = {x:.3g}:\n{type(error).__name__}: {error}"
        return _message_figure(f"Tangent to {name}", message), message
    return plot_tangent(data, name=name), readout(data)


def show_tangent(
    functions: Mapping[str, Function | tuple[Function, float, float]] | None = None,
    lo: float = -3.0,
    hi: float = 3.0,
    x0: float | None = None,
):
    """A dropdown of named functions and a slider for the point; the tangent follows the slider.

    ``functions`` maps a name to ``f`` (plotted on ``[lo, hi]``) or to ``(f, lo, hi)``, its own
    range; the slider's range follows the function picked. Without ``functions`` the widget
    offers its own (:data:`FUNCTIONS`).
    """
    import ipywidgets as widgets

    functions = FUNCTIONS if functions is None else functions
    if not functions:
        raise ValueError("functions must name at least one function")
    curves: dict[str, tuple[Function, float, float]] = {}
    for name, entry in functions.items():
        f, f_lo, f_hi = entry if isinstance(entry, tuple) else (entry, lo, hi)
        if not callable(f):
            raise TypeError(f"functions[{name!r}] should be a function of one tensor")
        if not f_lo < f_hi:
            raise ValueError(f"the range of {name!r} must have lo below hi, got [{f_lo}, {f_hi}]")
        curves[name] = (f, float(f_lo), float(f_hi))

    first = next(iter(curves))
    _, start_lo, start_hi = curves[first]
    start = (start_lo + start_hi) / 2 if x0 is None else min(max(x0, start_lo), start_hi)
    choice = widgets.Dropdown(options=list(curves), description="function")
    point = widgets.FloatSlider(
        value=start,
        min=start_lo,
        max=start_hi,
        step=(start_hi - start_lo) / 100,
        description="x",
        continuous_update=False,
        readout_format=".2f",
    )

    def follow(change) -> None:
        """Give the slider the range of the function just picked (before it is redrawn)."""
        _, new_lo, new_hi = curves[change["new"]]
        with point.hold_trait_notifications():
            if new_lo > point.max:  # keep min <= max at every step
                point.max, point.min = new_hi, new_lo
            else:
                point.min, point.max = new_lo, new_hi
            point.step = (new_hi - new_lo) / 100
            point.value = min(max(point.value, new_lo), new_hi)

    choice.observe(follow, names="value")

    def draw(name: str, x: float):
        f, f_lo, f_hi = curves[name]
        return draw_tangent(name, f, x, f_lo, f_hi)

    return interactive_plot({"name": choice, "x": point}, draw, "Tangent line from autograd")
