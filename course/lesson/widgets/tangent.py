"""The derivative as a slope: a curve, a point on it, and the tangent whose slope autograd
computed."""

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
        label=f"tangent, slope {data.slope:.4g}",
    )
    ax.plot(
        [data.x0],
        [data.y0],
        "o",
        color=PALETTE["vermillion"],
        markersize=8,
        label=f"x = {data.x0:.3g}",
    )
    # Keep the curve in view: a steep tangent would otherwise squash it.
    finite = [y for y in data.ys if math.isfinite(y)]
    low, high = (min(finite), max(finite)) if finite else (-1.0, 1.0)
    pad = 0.15 * (high - low) or 1.0
    ax.set_ylim(low - pad, high + pad)
    ax.set_xlim(data.xs[0], data.xs[-1])
    ax.axhline(0, color="#999999", linewidth=0.8)
    ax.set_title(f"Tangent to {name} at x = {data.x0:.3g}: slope = {data.slope:.4g}")
    ax.set_xlabel("x")
    ax.set_ylabel("f(x)")
    ax.legend(loc="best", fontsize="small")
    return fig


def readout(data: TangentData) -> str:
    """The numbers in the plot as text: the point, the value and the slope."""
    return (
        f"x      = {data.x0:.4g}\n"
        f"f(x)   = {data.y0:.6g}\n"
        f"slope  = {data.slope:.6g}   (df/dx from backward())"
    )


def show_tangent(
    functions: Mapping[str, Function],
    lo: float = -3.0,
    hi: float = 3.0,
    x0: float | None = None,
):
    """A dropdown of named functions and a slider for the point; the tangent follows the slider."""
    import ipywidgets as widgets

    if not functions:
        raise ValueError("functions must name at least one function")
    start = (lo + hi) / 2 if x0 is None else x0
    choice = widgets.Dropdown(options=list(functions), description="function")
    point = widgets.FloatSlider(
        value=start,
        min=lo,
        max=hi,
        step=(hi - lo) / 100,
        description="x",
        continuous_update=False,
        readout_format=".2f",
    )

    def draw(name: str, x: float):
        data = tangent_data(functions[name], x, lo, hi)
        return plot_tangent(data, name=name), readout(data)

    return interactive_plot({"name": choice, "x": point}, draw, "Tangent line from autograd")
