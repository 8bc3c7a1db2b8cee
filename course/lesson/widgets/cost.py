"""What gradient tracking costs: memory kept for backward and forward time, with and without it.

Runs in: a student's kernel, and a grading kernel running the same notebook.

The memory is counted exactly, not sampled: every tensor that autograd saves for the backward pass
goes through a ``torch.autograd.graph.saved_tensors_hooks`` pack hook, and we add up the bytes of
the distinct storages that are not the model's own parameters (those exist anyway). Under
``torch.no_grad()`` no graph is built, nothing is saved, and the count is 0.

Times are wall-clock and depend on the machine and on whatever else runs on it. To keep a busy
moment from deciding the result, the two modes take turns round after round, each round starting
with the other mode, and each mode is summed up by its fastest run (the one least disturbed);
:func:`timing_verdict` calls a difference real only when it is larger than the run-to-run noise
and the same mode won at least three rounds in four, and says which rule withheld a verdict.
Times are shown, never checked.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .base import PALETTE, error_view, interactive_plot, new_figure

MODES = ("tracking on", "torch.no_grad()")
COLOURS = (PALETTE["vermillion"], PALETTE["blue"])
MIB = 2**20


@dataclass(frozen=True)
class CostData:
    """Saved bytes and forward times of one MLP, for each entry of ``MODES``."""

    width: int
    depth: int
    batch: int
    repeats: int
    saved_bytes: list[int]  # bytes kept for backward, in the order of MODES
    times_ms: list[list[float]]  # by mode: the wall time of each run in ms, round by round

    @property
    def fastest_ms(self) -> list[float]:
        """Each mode's fastest run in ms: the one that the rest of the machine disturbed least."""
        return [min(t) for t in self.times_ms]

    @property
    def median_ms(self) -> list[float]:
        return [statistics.median(t) for t in self.times_ms]


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


def saved_bytes(model: torch.nn.Module, x: torch.Tensor, include_model: bool = False) -> int:
    """Run ``model(x)`` in the current grad mode; return the bytes autograd keeps for backward.

    Each storage counts once, however many operations keep it: a ReLU keeps its output, and the
    Linear after it keeps the same tensor as its input. A Linear whose input requires grad also
    keeps its weight; the model's parameters and buffers are in memory whatever the mode, so they
    are left out unless ``include_model`` is true.
    """
    own = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if include_model or storage.data_ptr() not in own:
            kept[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(x)
    del out
    return sum(kept.values())


def forward_times_ms(model: torch.nn.Module, x: torch.Tensor, repeats: int) -> list[list[float]]:
    """Wall times in ms of ``model(x)``: ``repeats`` runs for each entry of ``MODES``.

    The runs come in rounds of one run per mode, after a warm-up round (the first calls pay
    one-off costs); each round starts with the mode that went second in the round before, so
    neither mode always gets the warmer cache, and a moment when the machine is busy slows both.
    """
    _check_positive(repeats=repeats)
    cuda = x.device.type == "cuda"
    times: list[list[float]] = [[] for _ in MODES]
    grad_modes = (True, False)  # in the order of MODES
    for run in range(repeats + 1):
        order = (0, 1) if run % 2 == 0 else (1, 0)
        for mode in order:
            with torch.set_grad_enabled(grad_modes[mode]):
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
    return times


def timing_verdict(times_ms: list[list[float]], names: Sequence[str] = MODES) -> tuple[str, str]:
    """(a few words, a sentence) on which of two things was faster, or why no winner is named.

    ``times_ms`` holds the runs of each, taken in turns (run i of one next to run i of the
    other), and ``names`` names them. A difference counts only when both rules agree:

    * the gap rule: the fastest runs differ by more than the noise (the larger of the two gaps
      between a fastest and a median run, and at least 2 % of the slower time);
    * the rounds rule: the one with the faster fastest run also won at least three rounds in four.

    When no winner is named, the sentence says which rule (or both) withheld it.
    """
    if (
        len(times_ms) != 2
        or len(names) != 2
        or not times_ms[0]
        or len(set(map(len, times_ms))) != 1
    ):
        raise ValueError("timing_verdict compares two equally long, non-empty lists of times")
    fastest = [min(t) for t in times_ms]
    noise = max(statistics.median(t) - min(t) for t in times_ms)
    noise = max(noise, 0.02 * max(fastest))
    rounds = len(times_ms[0])
    wins = [sum(a < b for a, b in zip(times_ms[m], times_ms[1 - m])) for m in (0, 1)]
    winner = 0 if fastest[0] < fastest[1] else 1
    gap = abs(fastest[0] - fastest[1])
    above_noise = gap > noise
    steady = 4 * wins[winner] >= 3 * rounds
    won = f"{names[winner]} won {wins[winner]} of {rounds} rounds"
    if above_noise and steady:
        slower = max(fastest)
        return (
            f"{names[winner]} faster",
            f"{names[winner]} was faster: {min(fastest):.3g} ms against {slower:.3g} ms "
            f"(fastest of {rounds} runs each; {won}).",
        )
    differ = f"the fastest runs differ by {gap:.2g} ms"
    few = f"{names[winner]} won only {wins[winner]} of {rounds} rounds, fewer than 3 in 4"
    if not above_noise and steady:
        return (
            "difference is noise",
            f"too close to call: {differ}, not more than the run-to-run noise of {noise:.2g} ms "
            f"(even though {won}).",
        )
    if not above_noise:
        return (
            "difference is noise",
            f"too close to call: {differ}, not more than the run-to-run noise of {noise:.2g} ms, "
            f"and {few}.",
        )
    return (
        "no steady winner",
        f"too close to call: {differ}, more than the run-to-run noise of {noise:.2g} ms, but "
        f"{few}.",
    )


def cost_data(
    width: int, depth: int, batch: int, repeats: int = 7, device: str = "cpu"
) -> CostData:
    """Measure a forward pass of ``make_mlp(width, depth)`` on a ``batch`` of inputs, both ways.

    The model and inputs come from fixed seeds, so ``saved_bytes`` is the same on every run:
    ``(depth + 1) * batch * width * 4`` with tracking on (the input and each ReLU output, float32)
    and 0 under ``torch.no_grad()``. The times are ``repeats`` runs of each mode, taken in turns
    after a warm-up (:func:`forward_times_ms`).
    """
    _check_positive(width=width, depth=depth, batch=batch, repeats=repeats)
    model = make_mlp(width, depth).to(device)
    x = torch.randn(batch, width, generator=torch.Generator().manual_seed(1)).to(device)
    memory = []
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            memory.append(saved_bytes(model, x))
    return CostData(width, depth, batch, repeats, memory, forward_times_ms(model, x, repeats))


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
            data.fastest_ms,
            f"Forward time (fastest of {data.repeats}):\n{timing_verdict(data.times_ms)[0]}",
            "fastest forward pass (ms)",
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
    for mode, memory, ms in zip(MODES, data.saved_bytes, data.fastest_ms):
        lines.append(
            f"  {mode:<16} kept for backward {memory / MIB:8.3f} MiB   fastest forward {ms:8.3f} ms"
        )
    lines.append(f"  {timing_verdict(data.times_ms)[1]}")
    return "\n".join(lines)


def show_cost(
    depth: int = 4, batch: int = 256, repeats: int = 7, device: str = "cpu", max_width: int = 1024
):
    """Sliders for the model's width and the batch size, and the two bar charts.

    The widget builds its own model and inputs from fixed seeds on every redraw.
    """
    import ipywidgets as widgets

    _check_positive(depth=depth, batch=batch, repeats=repeats, max_width=max_width)
    if max_width < 32:
        raise ValueError(f"max_width must be at least 32, got {max_width!r}")
    device = str(torch.device(device))  # an unknown device is an error now, not at a redraw

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
        try:
            data = cost_data(width, depth, batch, repeats, device)
            return plot_cost(data), readout(data)
        except Exception as error:  # shown instead of leaving the last picture up
            return error_view(error)

    return interactive_plot(
        {"width": width_slider, "batch": batch_slider}, draw, "What gradient tracking costs"
    )


def _check_positive(**values: int) -> None:
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
