"""The forgotten-``zero_grad`` picture: one tiny model trained with, without and in the wrong order.

Runs in: a student's kernel, and a grading kernel running the same notebook.

A 1-D linear regression (``y ≈ w·x + b`` on data made from a fixed seed) is trained with plain SGD
in a few training-loop variants that differ only in where gradients are cleared. The numbers come
from :func:`training_data`; :func:`plot_training` draws them and :func:`readout` prints them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .base import PALETTE, error_view, interactive_plot, new_figure

# The training-loop variants, by key: a label for plots and readouts, a colour and a line style
# (colour and style both differ, so the curves stay apart in grey-scale print too).
VARIANTS: dict[str, tuple[str, str, str]] = {
    "correct": ("zero_grad → forward → backward → step", PALETTE["blue"], "-"),
    "no_zero": ("zero_grad forgotten", PALETTE["vermillion"], "--"),
    "zero_before_step": ("zero_grad between backward and step", PALETTE["orange"], ":"),
}

TRUE_SLOPE, TRUE_BIAS, NOISE = 2.0, -1.0, 0.1

# The widget's learning-rate slider, as powers of ten: 0.01 to 10**-0.1 = 0.79. Plain SGD on this
# data is stable below 2 / (largest eigenvalue of the loss's Hessian) = 0.985 (the Hessian of the
# mean squared error here is close to 2 times the identity); above that even the correct loop
# diverges, and a comparison of where zero_grad() goes would say nothing about zero_grad().
LR_EXPONENTS = (-2.0, -0.1)


@dataclass(frozen=True)
class TrainingData:
    """Loss and slope after each of ``steps`` SGD steps, for each training-loop variant."""

    lr: float
    steps: list[int]  # 0, 1, ..., number of steps (0 is the untrained model)
    losses: dict[str, list[float]]  # by variant: full-batch MSE after each step (inf once diverged)
    slopes: dict[str, list[float]]  # by variant: the model's w after each step (nan once diverged)
    true_slope: float  # the w the data was made with


def regression_data(seed: int = 0, n: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """``n`` points of ``y = 2x - 1`` plus a little noise, from a fixed seed, shaped ``(n, 1)``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, generator=gen)
    y = TRUE_SLOPE * x + TRUE_BIAS + NOISE * torch.randn(n, 1, generator=gen)
    return x, y


def _train(variant: str, lr: float, steps: int, x: torch.Tensor, y: torch.Tensor):
    """Train a fresh ``Linear(1, 1)`` (from w = b = 0) ``steps`` times in one loop variant."""
    model = torch.nn.utils.skip_init(torch.nn.Linear, 1, 1)  # no draw from the global generator
    with torch.no_grad():
        model.weight.zero_()
        model.bias.zero_()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.MSELoss()

    def evaluate() -> tuple[float, float]:
        with torch.no_grad():
            return loss_fn(model(x), y).item(), model.weight.item()

    loss, slope = evaluate()
    losses, slopes = [loss], [slope]
    for _ in range(steps):
        if not math.isfinite(loss):
            losses.append(math.inf)
            slopes.append(math.nan)
            continue
        if variant == "correct":
            optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        if variant == "zero_before_step":
            optimizer.zero_grad()  # the step below then has no gradient to use
        optimizer.step()
        loss, slope = evaluate()
        if not math.isfinite(loss):
            loss, slope = math.inf, math.nan
        losses.append(loss)
        slopes.append(slope)
    return losses, slopes


def training_data(
    lr: float = 0.1,
    steps: int = 30,
    *,
    variants: Sequence[str] = tuple(VARIANTS),
    seed: int = 0,
) -> TrainingData:
    """Train the same tiny model ``steps`` times with SGD at rate ``lr`` in each of ``variants``.

    Every call starts from the same data and the same initial model, so the same arguments always
    give the same numbers. A run whose loss overflows is marked diverged (loss ``inf``) from then
    on.
    """
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not math.isfinite(lr) or lr <= 0:
        raise ValueError(f"lr must be a positive number, got {lr!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"steps must be a whole number of at least 1, got {steps!r}")
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        raise ValueError(
            f"unknown variant(s) {unknown or list(variants)}: choose from {', '.join(VARIANTS)}"
        )
    x, y = regression_data(seed)
    losses, slopes = {}, {}
    for variant in variants:
        losses[variant], slopes[variant] = _train(variant, float(lr), steps, x, y)
    return TrainingData(float(lr), list(range(steps + 1)), losses, slopes, TRUE_SLOPE)


def _finite_or_nan(values: list[float]) -> list[float]:
    return [v if math.isfinite(v) else math.nan for v in values]


def plot_training(data: TrainingData, axes=None):
    """Two panels: the loss after each step (log scale, left) and the learned slope w (right).

    The variants share one legend below the panels, where it never hides a curve.
    """
    if axes is None:
        fig, axes = new_figure(ncols=2, height=4.0)
    else:
        fig = axes[0].figure
    loss_ax, slope_ax = axes
    for variant, losses in data.losses.items():
        label, colour, style = VARIANTS[variant]
        loss_ax.plot(
            data.steps, _finite_or_nan(losses), style, color=colour, label=label, linewidth=2
        )
        slope_ax.plot(
            data.steps,
            _finite_or_nan(data.slopes[variant]),
            style,
            color=colour,
            label=label,
            linewidth=2,
        )
    loss_ax.set_yscale("log")
    loss_ax.set_title(f"Training loss (lr = {data.lr:.3g})")
    loss_ax.set_xlabel("optimizer steps")
    loss_ax.set_ylabel("mean squared error (log scale)")
    target = slope_ax.axhline(
        data.true_slope,
        color=PALETTE["black"],
        linewidth=0.8,
        label=f"true slope {data.true_slope:g}",
    )
    slope_ax.set_title("Learned slope w")
    slope_ax.set_xlabel("optimizer steps")
    slope_ax.set_ylabel("w after the step")
    handles, labels = loss_ax.get_legend_handles_labels()
    fig.legend(
        handles + [target],
        labels + [target.get_label()],
        loc="outside lower center",
        ncols=len(handles) + 1,
        fontsize="small",
        frameon=False,
    )
    return fig


def diverging(losses: list[float]) -> bool:
    """True when a run blew up: its loss overflowed, or it is more than twice the starting loss
    and still rising over the last three steps.

    A loop without zero_grad() swings, but at a learning rate where the correct loop converges
    its loss never reaches twice the start, so a swing is never called diverging.
    """
    if not all(math.isfinite(v) for v in losses):
        return True
    tail = losses[-4:]
    rising = len(tail) == 4 and all(b > a for a, b in zip(tail, tail[1:]))
    return rising and losses[-1] > 2 * losses[0]


def _describe(losses: list[float]) -> str:
    if not math.isfinite(losses[-1]):
        first = next(i for i, v in enumerate(losses) if not math.isfinite(v))
        return f"diverged (loss overflowed at step {first})"
    if diverging(losses):
        return f"diverging: final loss {losses[-1]:.4g}, still rising (the step is too large)"
    note = " (never moved)" if all(v == losses[0] for v in losses) else ""
    return f"final loss {losses[-1]:.4g}{note}"


def readout(data: TrainingData) -> str:
    """The numbers behind the plot as text: each variant's loss after the last step."""
    start = next(iter(data.losses.values()))[0]
    width = max(len(VARIANTS[v][0]) for v in data.losses)
    lines = [f"lr = {data.lr:.3g}, {data.steps[-1]} steps, loss before training {start:.4g}"]
    for variant, losses in data.losses.items():
        lines.append(f"  {VARIANTS[variant][0]:<{width}}  {_describe(losses)}")
    if "correct" in data.losses and diverging(data.losses["correct"]):
        lines.append(
            "  even the correct loop diverges at this learning rate: lower it before comparing"
        )
    return "\n".join(lines)


def show_training(
    lr: float = 0.1,
    steps: int = 30,
    max_steps: int = 100,
    variants: Sequence[str] = tuple(VARIANTS),
):
    """A learning-rate slider, a steps slider, the two panels and the final losses as text.

    The learning rate runs from 0.01 to 0.79 (``LR_EXPONENTS``), where the correct loop always
    converges, so every difference between the curves comes from where zero_grad() is called.
    """
    import ipywidgets as widgets

    low, high = (10**e for e in LR_EXPONENTS)
    if isinstance(lr, bool) or not isinstance(lr, (int, float)) or not low <= lr <= high:
        raise ValueError(
            f"lr must be a number from {low:.2g} to {high:.2g} (above that even the correct loop "
            f"diverges on this data), got {lr!r}"
        )
    if isinstance(max_steps, bool) or not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps must be a whole number of at least 1, got {max_steps!r}")
    if isinstance(steps, bool) or not isinstance(steps, int) or not 1 <= steps <= max_steps:
        raise ValueError(f"steps must be a whole number from 1 to {max_steps}, got {steps!r}")
    chosen = tuple(variants)  # the widget's own copy
    unknown = [v for v in chosen if v not in VARIANTS]
    if unknown or not chosen:
        raise ValueError(
            f"unknown variant(s) {unknown or list(chosen)}: choose from {', '.join(VARIANTS)}"
        )

    style = {"description_width": "initial"}
    rate = widgets.FloatLogSlider(
        value=lr,
        base=10,
        min=LR_EXPONENTS[0],
        max=LR_EXPONENTS[1],
        step=0.1,
        description="learning rate",
        style=style,
        continuous_update=False,
    )
    count = widgets.IntSlider(
        value=steps, min=1, max=max_steps, description="steps", style=style, continuous_update=False
    )

    def draw(lr: float, steps: int):
        try:
            data = training_data(lr, steps, variants=chosen)
            return plot_training(data), readout(data)
        except Exception as error:  # shown instead of leaving the last picture up
            return error_view(error)

    return interactive_plot({"lr": rate, "steps": count}, draw, "Forgetting zero_grad()")
