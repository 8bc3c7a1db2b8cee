"""The course's central picture: `.grad` after k backward() calls, accumulated versus zeroed.

Runs in: a student's kernel, and a grading kernel running the same notebook.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .base import PALETTE, error_view, interactive_plot, new_figure

MAX_LINES = 6  # more entries than this make an unreadable plot; the readout still lists them all

# The widget's own example, built afresh on every redraw (never a tensor or function of the
# notebook's, which a later cell could change): at w = [1, 2] the gradient is g = [3, 1].
EXAMPLE_W = (1.0, 2.0)
EXAMPLE_SHIFT = (1.0, -3.0)


def example_loss(w: torch.Tensor) -> torch.Tensor:
    """``(w**2).sum() + (w * [1, -3]).sum()``, whose gradient is ``2w + [1, -3]``."""
    return (w**2).sum() + (w * torch.tensor(EXAMPLE_SHIFT, dtype=w.dtype)).sum()


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


def show_accumulation(max_calls: int = 8, calls: int = 4):
    """A slider for the number of backward() calls and the two panels side by side.

    The widget owns its example: ``example_loss`` at ``w = EXAMPLE_W`` (a fresh tensor on every
    redraw), and it opens at ``calls`` calls, where the accumulation is already visible.
    """
    import ipywidgets as widgets

    if isinstance(max_calls, bool) or not isinstance(max_calls, int) or max_calls < 2:
        raise ValueError(f"max_calls must be a whole number of at least 2, got {max_calls!r}")
    if isinstance(calls, bool) or not isinstance(calls, int) or not 1 <= calls <= max_calls:
        raise ValueError(
            f"calls must be a whole number from 1 to max_calls={max_calls}, got {calls!r}"
        )

    slider = widgets.IntSlider(
        value=calls,
        min=1,
        max=max_calls,
        description="backward() calls",
        style={"description_width": "initial"},
        continuous_update=False,
    )

    def draw(calls: int):
        try:
            w = torch.tensor(EXAMPLE_W, requires_grad=True)
            data = accumulation_data(w, example_loss, calls)
            return plot_accumulation(data), readout(data)
        except Exception as error:  # shown instead of leaving the last picture up
            return error_view(error)

    return interactive_plot({"calls": slider}, draw, "Gradient accumulation")
