"""The course's central picture: `.grad` after k backward() calls, accumulated versus zeroed."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .base import PALETTE, interactive_plot, new_figure

MAX_LINES = 6  # more entries than this make an unreadable plot; the readout still lists them all


@dataclass(frozen=True)
class AccumulationData:
    """``.grad`` (flattened) after each of ``calls`` backward() calls, without and with zeroing."""

    calls: list[int]
    accumulated: list[list[float]]  # entry k: w.grad after k+1 calls without clearing
    zeroed: list[list[float]]  # entry k: w.grad after call k+1 when it is cleared before each call


def accumulation_data(
    w: torch.Tensor, loss_fn: Callable[[torch.Tensor], torch.Tensor], calls: int
) -> AccumulationData:
    """Run ``loss_fn(w).backward()`` ``calls`` times both ways, on a private copy of ``w``.

    The caller's tensor and its ``.grad`` are untouched, so the same arguments always give the
    same numbers (moving a slider back and forth shows the same picture).
    """
    if calls < 1:
        raise ValueError(f"calls must be at least 1, got {calls}")
    if not w.requires_grad:
        raise ValueError("w must require grad: create it with requires_grad=True")

    def run(clear: bool) -> list[list[float]]:
        leaf = w.detach().clone().requires_grad_(True)
        history = []
        for _ in range(calls):
            if clear:
                leaf.grad = None
            loss_fn(leaf).backward()
            if leaf.grad is None:
                raise ValueError("loss_fn(w) does not depend on w: backward() gave it no gradient")
            history.append(leaf.grad.detach().flatten().tolist())
        return history

    return AccumulationData(list(range(1, calls + 1)), run(clear=False), run(clear=True))


def plot_accumulation(data: AccumulationData, axes=None):
    """Two panels: accumulated `.grad` growing k·g (left) and zeroed `.grad` flat at g (right)."""
    if axes is None:
        fig, axes = new_figure(ncols=2)
    else:
        fig = axes[0].figure
    colours = list(PALETTE.values())
    shown = min(len(data.accumulated[0]), MAX_LINES)
    panels = [
        (axes[0], data.accumulated, "Without zeroing: .grad accumulates", "-o"),
        (axes[1], data.zeroed, "Zeroed before each call: .grad stays g", "-s"),
    ]
    top = max(max(abs(v) for v in row) for row in data.accumulated) or 1.0
    for ax, history, title, style in panels:
        for i in range(shown):
            ax.plot(
                data.calls,
                [row[i] for row in history],
                style,
                color=colours[i % len(colours)],
                label=f"w.grad[{i}]",
            )
        ax.set_title(
            title
            if shown == len(history[0])
            else f"{title}\n(first {shown} of {len(history[0])} entries)"
        )
        ax.set_xlabel("number of backward() calls")
        ax.set_ylabel("value of w.grad")
        ax.set_xticks(data.calls)
        ax.set_ylim(-1.1 * top if any(v < 0 for row in history for v in row) else 0, 1.1 * top)
        ax.axhline(0, color="#999999", linewidth=0.8)
        ax.legend(loc="upper left", fontsize="small")
    return fig


def readout(data: AccumulationData) -> str:
    """The numbers in the plot as text: `.grad` after the last call, both ways."""
    fmt = lambda row: "[" + ", ".join(f"{v:.4g}" for v in row) + "]"  # noqa: E731
    k = data.calls[-1]
    return (
        f"after {k} call{'s' if k > 1 else ''}:\n"
        f"  without zeroing  w.grad = {fmt(data.accumulated[-1])}\n"
        f"  with zeroing     w.grad = {fmt(data.zeroed[-1])}"
    )


def show_accumulation(
    w: torch.Tensor,
    loss_fn: Callable[[torch.Tensor], torch.Tensor],
    max_calls: int = 8,
):
    """A slider for the number of backward() calls and the two panels side by side."""
    import ipywidgets as widgets

    slider = widgets.IntSlider(
        value=1,
        min=1,
        max=max_calls,
        description="backward() calls",
        style={"description_width": "initial"},
        continuous_update=False,
    )

    def draw(calls: int):
        data = accumulation_data(w, loss_fn, calls)
        return plot_accumulation(data), readout(data)

    return interactive_plot({"calls": slider}, draw, "Gradient accumulation")
