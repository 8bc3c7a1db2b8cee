"""What gradient tracking costs: memory kept for backward and forward time, with and without it.

The memory is counted exactly, not sampled: every tensor that autograd saves for the backward pass
goes through a ``torch.autograd.graph.saved_tensors_hooks`` pack hook, and we add up the bytes of
the distinct storages that are not the model's own parameters (those exist anyway). Under
``torch.no_grad()`` no graph is built, nothing is saved, and the count is 0. Times are wall-clock
medians and vary from machine to machine and run to run; they are shown, never checked.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from .base import PALETTE, interactive_plot, new_figure

MODES = ("tracking on", "torch.no_grad()")
COLOURS = (PALETTE["vermillion"], PALETTE["blue"])
MIB = 2**20


@dataclass(frozen=True)
class CostData:
    """Saved bytes and median forward time of one MLP, for each entry of ``MODES``."""

    width: int
    depth: int
    batch: int
    repeats: int
    saved_bytes: list[int]  # bytes kept for backward, in the order of MODES
    median_ms: list[float]  # median wall time of one forward pass in milliseconds, same order


def make_mlp(width: int, depth: int, seed: int = 0) -> torch.nn.Sequential:
    """An MLP from ``seed``: ``depth`` times Linear(width, width) + ReLU, then Linear(width, 1)."""
    _check_positive(width=width, depth=depth)
    with torch.random.fork_rng(devices=[]):  # PyTorch's usual init, without touching the global RNG
        torch.manual_seed(seed)
        layers: list[torch.nn.Module] = []
        for _ in range(depth):
            layers += [torch.nn.Linear(width, width), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(width, 1))
        model = torch.nn.Sequential(*layers)
    return model


def saved_bytes(model: torch.nn.Module, x: torch.Tensor) -> int:
    """Run ``model(x)`` in the current grad mode; return the bytes autograd keeps for backward.

    Counts each saved storage once (ReLU's output is saved by ReLU and by the next Linear) and
    leaves out the model's parameters and buffers, which are in memory whatever the mode.
    """
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in own:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return sum(kept.values())


def median_forward_ms(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> list[float]:
    """Median wall time in ms of ``model(x)``, for each entry of ``MODES`` (tracking on, off).

    The two modes take turns, run after run, so a machine that is busy for a moment slows both.
    """
    _check_positive(repeats=repeats)
    cuda = x.device.type == "cuda"
    times: list[list[float]] = [[] for _ in MODES]
    for run in range(repeats + 1):  # run 0 is a warm-up: the first call pays one-off costs
        for mode, grad in enumerate((True, False)):
            with torch.set_grad_enabled(grad):
                if cuda:
                    torch.cuda.synchronize(x.device)
                start = time.perf_counter()
                out = model(x)
                if cuda:
                    torch.cuda.synchronize(x.device)
                elapsed = (time.perf_counter() - start) * 1e3
                del out
            if run:
                times[mode].append(elapsed)
    return [statistics.median(t) for t in times]


def cost_data(
    width: int, depth: int, batch: int, repeats: int = 5, device: str = "cpu"
) -> CostData:
    """Measure a forward pass of ``make_mlp(width, depth)`` on a ``batch`` of inputs, both ways.

    The model and inputs come from fixed seeds, so ``saved_bytes`` is the same on every run:
    ``(depth + 1) * batch * width * 4`` with tracking on (the input and each ReLU output, float32)
    and 0 under ``torch.no_grad()``. The times are medians over ``repeats`` runs of each mode,
    after a warm-up.
    """
    _check_positive(width=width, depth=depth, batch=batch, repeats=repeats)
    model = make_mlp(width, depth).to(device)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(1)).to(device)
    memory = []
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            memory.append(saved_bytes(model, x))
    return CostData(width, depth, batch, repeats, memory, median_forward_ms(model, x, repeats))


def plot_cost(data: CostData, axes=None):
    """Two bar charts side by side: memory kept for backward (MiB) and median forward time (ms)."""
    if axes is None:
        fig, axes = new_figure(ncols=2, width=4.6)
    else:
        fig = axes[0].figure
    panels = [
        (
            axes[0],
            [b / MIB for b in data.saved_bytes],
            "Memory kept for backward",
            "saved activations (MiB)",
            "{:.3g} MiB",
        ),
        (
            axes[1],
            data.median_ms,
            f"Forward time (median of {data.repeats})",
            "time per forward pass (ms)",
            "{:.3g} ms",
        ),
    ]
    for ax, heights, title, ylabel, fmt in panels:
        bars = ax.bar(MODES, heights, color=COLOURS, label=list(MODES))
        ax.bar_label(bars, labels=[fmt.format(h) for h in heights], padding=2, fontsize="small")
        ax.set_title(title)
        ax.set_xlabel("gradient mode")
        ax.set_ylabel(ylabel)
        ax.set_ylim(0, 1.4 * max(max(heights), 1e-9))
        ax.legend(loc="upper center", ncol=2, fontsize="small")
    fig.suptitle(f"MLP of width {data.width}, depth {data.depth}, batch {data.batch}")
    return fig


def readout(data: CostData) -> str:
    """The numbers in the plot as text."""
    lines = [f"width {data.width}, depth {data.depth}, batch {data.batch}:"]
    for mode, memory, ms in zip(MODES, data.saved_bytes, data.median_ms):
        lines.append(
            f"  {mode:<16} kept for backward {memory / MIB:8.3f} MiB   median forward {ms:8.3f} ms"
        )
    return "\n".join(lines)


def show_cost(
    depth: int = 4, batch: int = 256, repeats: int = 5, device: str = "cpu", max_width: int = 1024
):
    """Sliders for the model's width and the batch size, and the two bar charts."""
    import ipywidgets as widgets

    style = {"description_width": "initial"}
    width_slider = widgets.IntSlider(
        value=min(256, max_width),
        min=32,
        max=max_width,
        step=32,
        description="model width",
        style=style,
        continuous_update=False,
    )
    batch_slider = widgets.IntSlider(
        value=batch,
        min=16,
        max=max(1024, batch),
        step=16,
        description="batch size",
        style=style,
        continuous_update=False,
    )

    def draw(width: int, batch: int):
        data = cost_data(width, depth, batch, repeats, device)
        return plot_cost(data), readout(data)

    return interactive_plot(
        {"width": width_slider, "batch": batch_slider}, draw, "What gradient tracking costs"
    )


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
