"""The forgotten-zero_grad widget: the numbers it trains, the plot it draws and its controls."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course.lesson.widgets import training  # noqa: E402
from course.lesson.widgets.base import PALETTE  # noqa: E402
from course.lesson.widgets.training import (  # noqa: E402
    LR_EXPONENTS,
    VARIANTS,
    diverging,
    plot_training,
    readout,
    regression_data,
    show_training,
    training_data,
)


@pytest.fixture(scope="module")
def data():
    return training_data(0.1, 30)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def _oracle(lr: float, steps: int, clear: bool) -> tuple[list[float], list[float]]:
    """Gradient descent on the same data with hand-written MSE gradients, in float64.

    ``clear=False`` adds every step's gradient to a running sum and steps with the sum, which is
    what a loop without zero_grad does.
    """
    x, y = (t.double().flatten() for t in regression_data())
    w = b = 0.0
    gw_sum = gb_sum = 0.0
    losses, slopes = [], []
    for _ in range(steps + 1):
        err = w * x + b - y
        losses.append(float((err**2).mean()))
        slopes.append(w)
        gw, gb = float(2 * (err * x).mean()), float(2 * err.mean())
        gw_sum, gb_sum = (gw_sum + gw, gb_sum + gb) if not clear else (gw, gb)
        w, b = w - lr * gw_sum, b - lr * gb_sum
    return losses, slopes


def test_one_loss_and_slope_per_step_for_every_variant(data):
    assert data.steps == list(range(31))
    assert set(data.losses) == set(data.slopes) == set(VARIANTS)
    for variant in VARIANTS:
        assert len(data.losses[variant]) == len(data.slopes[variant]) == 31


def test_every_variant_starts_from_the_same_untrained_model(data):
    starts = {
        variant: (losses[0], data.slopes[variant][0]) for variant, losses in data.losses.items()
    }
    assert len(set(starts.values())) == 1
    assert data.slopes["correct"][0] == 0.0


@pytest.mark.parametrize("variant,clear", [("correct", True), ("no_zero", False)])
def test_matches_hand_written_gradient_descent(data, variant, clear):
    losses, slopes = _oracle(0.1, 30, clear)
    assert data.losses[variant] == pytest.approx(losses, rel=1e-4, abs=1e-5)
    assert data.slopes[variant] == pytest.approx(slopes, rel=1e-4, abs=1e-5)


def test_correct_loop_fits_the_line(data):
    assert data.losses["correct"][-1] < 0.02 * data.losses["correct"][0]
    assert data.slopes["correct"][-1] == pytest.approx(data.true_slope, abs=0.1)


def test_forgotten_zero_grad_swings_instead_of_settling(data):
    losses = data.losses["no_zero"]
    assert losses[-1] > 10 * data.losses["correct"][-1]
    rises = sum(later > earlier for earlier, later in zip(losses, losses[1:]))
    assert rises >= 10, "the loss should go up again and again, not fall steadily"


def test_zeroing_between_backward_and_step_never_moves(data):
    losses, slopes = data.losses["zero_before_step"], data.slopes["zero_before_step"]
    assert losses == [losses[0]] * 31
    assert slopes == [0.0] * 31


def test_same_arguments_give_the_same_numbers(data):
    assert training_data(0.1, 30) == data


def test_variants_can_be_chosen():
    chosen = training_data(0.1, 5, variants=["no_zero"])
    assert list(chosen.losses) == ["no_zero"]


def test_divergence_is_marked_not_raised():
    data = training_data(5.0, 100, variants=["correct"])
    losses = data.losses["correct"]
    first = next(i for i, v in enumerate(losses) if math.isinf(v))
    assert all(math.isinf(v) for v in losses[first:])
    assert all(math.isnan(v) for v in data.slopes["correct"][first:])
    assert f"diverged (loss overflowed at step {first})" in readout(data)


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"lr": 0.0}, "lr must be a positive number"),
        ({"lr": -0.1}, "lr must be a positive number"),
        ({"lr": float("nan")}, "lr must be a positive number"),
        ({"lr": "0.1"}, "lr must be a positive number"),
        ({"steps": 0}, "steps must be a whole number of at least 1"),
        ({"steps": 2.5}, "steps must be a whole number of at least 1"),
        ({"variants": ["correct", "sometimes"]}, "unknown variant"),
        ({"variants": []}, "unknown variant"),
    ],
)
def test_bad_input_raises_a_clear_error(kwargs, match):
    args = {"lr": 0.1, "steps": 10, **kwargs}
    with pytest.raises(ValueError, match=match):
        training_data(args.pop("lr"), args.pop("steps"), **args)


def test_leaves_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    training_data(0.1, 3)
    assert torch.equal(torch.rand(3), expected)


def test_plot_draws_each_variant_with_its_label_and_colour(data):
    fig = plot_training(data)
    loss_ax, slope_ax = fig.axes
    for ax, series in ((loss_ax, data.losses), (slope_ax, data.slopes)):
        lines = {line.get_label(): line for line in ax.get_lines()}
        for variant, values in series.items():
            label, colour, _ = VARIANTS[variant]
            line = lines[label]
            assert list(line.get_xdata()) == data.steps
            assert list(line.get_ydata()) == pytest.approx(values)
            assert line.get_color() == colour
            assert colour in PALETTE.values()


def test_one_legend_below_the_panels_names_every_line(data):
    fig = plot_training(data)
    (legend,) = fig.legends
    texts = [t.get_text() for t in legend.get_texts()]
    assert texts == [label for label, _, _ in VARIANTS.values()] + ["true slope 2"]
    assert [h.get_color() for h in legend.legend_handles[:3]] == [
        c for _, c, _ in VARIANTS.values()
    ]


def test_plot_titles_axes_and_scales(data):
    loss_ax, slope_ax = plot_training(data).axes
    assert loss_ax.get_title() == "Training loss (lr = 0.1)"
    assert loss_ax.get_xlabel() == "optimizer steps"
    assert "mean squared error" in loss_ax.get_ylabel()
    assert loss_ax.get_yscale() == "log"
    assert slope_ax.get_title() == "Learned slope w"
    assert slope_ax.get_ylabel() == "w after the step"
    target = [line for line in slope_ax.get_lines() if line.get_label() == "true slope 2"]
    assert target and list(target[0].get_ydata()) == [2.0, 2.0]


def test_plot_leaves_gaps_where_training_diverged():
    data = training_data(5.0, 100, variants=["correct"])
    (line,) = plot_training(data).axes[0].get_lines()
    ys = list(line.get_ydata())
    assert any(math.isnan(v) for v in ys) and not any(math.isinf(v) for v in ys)


def test_plot_draws_on_given_axes(data):
    fig, axes = plt.subplots(1, 2)
    assert plot_training(data, axes) is fig
    assert len(axes[0].get_lines()) == 3


def test_readout_names_every_variant_and_its_final_loss(data):
    text = readout(data)
    assert (
        text.splitlines()[0]
        == f"lr = 0.1, 30 steps, loss before training {data.losses['correct'][0]:.4g}"
    )
    for variant, (label, _, _) in VARIANTS.items():
        assert label in text
        assert f"{data.losses[variant][-1]:.4g}" in text
    assert "(never moved)" in text


def test_widget_is_a_placeholder_when_nbgrader_runs(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    widget = show_training()
    assert "not drawn during grading" in widget.value


def test_moving_a_control_redraws_the_readout(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(training, "training_data", _counting(training.training_data))
    box = show_training(lr=0.1, steps=10, variants=("correct",))
    _header, controls, readout_html, _output = box.children
    rate, count = controls.children
    assert (rate.description, count.description) == ("learning rate", "steps")
    before = readout_html.value
    assert "lr = 0.1, 10 steps" in before
    count.value = 20
    assert "lr = 0.1, 20 steps" in readout_html.value
    rate.value = 0.01
    assert "lr = 0.01, 20 steps" in readout_html.value
    assert training.training_data.calls == 3


def _counting(fn):
    def wrapper(*args, **kwargs):
        wrapper.calls += 1
        return fn(*args, **kwargs)

    wrapper.calls = 0
    return wrapper


def _slider_rates() -> list[float]:
    low, high = LR_EXPONENTS
    count = round((high - low) / 0.1)
    return [10 ** (low + 0.1 * i) for i in range(count + 1)]


def test_the_slider_stops_where_the_correct_loop_still_converges(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    _header, controls, _readout, _output = show_training().children
    rate, _count = controls.children
    assert (rate.min, rate.max) == LR_EXPONENTS
    for lr in _slider_rates():
        data = training_data(lr, 100, variants=["correct", "no_zero"])
        correct, forgotten = data.losses["correct"], data.losses["no_zero"]
        assert correct[-1] < 0.05 * correct[0], f"lr {lr:.3g}: the correct loop did not fit"
        assert not diverging(correct) and not diverging(forgotten), f"lr {lr:.3g}"
        assert forgotten[-1] > correct[-1], f"lr {lr:.3g}: the forgotten zero_grad looks better"


def test_a_run_that_blows_up_is_called_diverging():
    data = training_data(1.0, 30)  # past the slider's range: even the correct loop diverges
    assert diverging(data.losses["correct"]) and not diverging(data.losses["no_zero"])
    text = readout(data)
    assert "diverging: final loss" in text and "still rising" in text
    assert "even the correct loop diverges at this learning rate" in text
    assert "even the correct loop" not in readout(training_data(0.1, 30))


def test_a_swing_is_not_divergence():
    assert not diverging([5.0, 1.0, 6.0, 7.0, 8.0, 9.0])  # rising, but below twice the start
    assert not diverging([1.0, 3.0, 2.5, 2.6, 2.7])  # above twice the start, but not rising 3 steps
    assert diverging([1.0, 1.5, 2.2, 3.0])
    assert diverging([1.0, math.inf])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"lr": 1.0}, "lr must be a number from 0.01 to 0.79"),
        ({"lr": 0.001}, "lr must be a number from 0.01 to 0.79"),
        ({"steps": 0}, "steps must be a whole number from 1 to 100"),
        ({"steps": 20, "max_steps": 10}, "steps must be a whole number from 1 to 10"),
        ({"variants": ["sometimes"]}, "unknown variant"),
    ],
)
def test_bad_widget_arguments_are_clear_errors(monkeypatch, kwargs, match):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with pytest.raises(ValueError, match=match):
        show_training(**kwargs)


def test_a_failed_redraw_shows_the_error_not_the_old_picture(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    _header, controls, readout_html, _output = show_training(steps=5).children
    _rate, count = controls.children

    def broken(*args, **kwargs):
        raise RuntimeError("no memory left")

    monkeypatch.setattr(training, "training_data", broken)
    count.value = 6
    assert "Could not draw: RuntimeError: no memory left" in readout_html.value
    assert "lr = " not in readout_html.value


def test_the_widget_keeps_its_own_list_of_variants(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    chosen = ["correct"]
    _header, controls, readout_html, _output = show_training(steps=5, variants=chosen).children
    chosen.append("no_zero")  # a later cell changes the list it passed in
    controls.children[1].value = 6
    assert VARIANTS["no_zero"][0] not in readout_html.value
