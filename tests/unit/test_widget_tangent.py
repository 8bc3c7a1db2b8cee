"""The tangent widget: autograd's slope against the hand derivative, the plot's lines, the
controls."""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course.lesson.widgets.base import PALETTE  # noqa: E402
from course.lesson.widgets.tangent import (  # noqa: E402
    FUNCTIONS,
    draw_tangent,
    plot_tangent,
    readout,
    show_tangent,
    tangent_data,
)


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize(
    "f,df,x0",
    [
        (lambda t: t**3 - 2 * t, lambda x: 3 * x**2 - 2, 1.5),
        (torch.sin, math.cos, 0.7),
        (lambda t: torch.exp(-t * t), lambda x: -2 * x * math.exp(-x * x), -1.25),
        (lambda t: t * torch.sin(t), lambda x: math.sin(x) + x * math.cos(x), 2.0),
    ],
)
def test_slope_matches_the_hand_derivative(f, df, x0):
    data = tangent_data(f, x0, -3.0, 3.0)
    assert data.slope == pytest.approx(df(x0), rel=1e-12, abs=1e-12)
    assert data.y0 == pytest.approx(f(torch.tensor(x0, dtype=torch.float64)).item(), rel=1e-12)


def test_curve_samples_f_on_the_range():
    data = tangent_data(lambda t: t * t, 0.5, -2.0, 2.0, points=5)
    assert data.xs == [-2.0, -1.0, 0.0, 1.0, 2.0]
    assert data.ys == [4.0, 1.0, 0.0, 1.0, 4.0]


def test_tangent_line_touches_the_curve_with_the_slope():
    data = tangent_data(lambda t: t**2, 1.0, -2.0, 2.0, points=5)
    assert data.slope == 2.0 and data.y0 == 1.0
    # y = 1 + 2 (x - 1) at x = -2, -1, 0, 1, 2
    assert data.tangent_ys == [-5.0, -3.0, -1.0, 1.0, 3.0]


def test_slope_of_a_function_that_ignores_x_is_zero():
    data = tangent_data(lambda t: torch.tensor(2.0), 0.0, -1.0, 1.0, points=3)
    assert data.slope == 0.0 and data.tangent_ys == [2.0, 2.0, 2.0]


def test_same_arguments_give_the_same_numbers():
    f = lambda t: torch.tanh(3 * t)  # noqa: E731
    assert tangent_data(f, 0.3, -1.0, 1.0) == tangent_data(f, 0.3, -1.0, 1.0)


@pytest.mark.parametrize(
    "x0,lo,hi,points,match",
    [
        (0.0, 1.0, 1.0, 10, "lo must be below hi"),
        (0.0, 2.0, 1.0, 10, "lo must be below hi"),
        (5.0, -1.0, 1.0, 10, "outside the plotted range"),
        (0.0, -1.0, 1.0, 1, "points must be at least 2"),
    ],
)
def test_bad_ranges_raise_a_clear_error(x0, lo, hi, points, match):
    with pytest.raises(ValueError, match=match):
        tangent_data(torch.sin, x0, lo, hi, points=points)


@pytest.mark.parametrize(
    "f,match",
    [
        (lambda t: torch.stack([t, t]), r"0-dimensional tensor .* got shape \(2,\)"),
        (lambda t: 3.0, "0-dimensional tensor .* got float"),
    ],
)
def test_f_that_does_not_return_a_scalar_tensor_is_rejected(f, match):
    with pytest.raises(ValueError, match=match):
        tangent_data(f, 0.0, -1.0, 1.0)


def test_plot_draws_curve_tangent_and_point():
    data = tangent_data(torch.sin, 1.0, -3.0, 3.0, points=31)
    fig = plot_tangent(data, name="sin(x)")
    ax = fig.axes[0]
    curve, tangent, point = ax.get_lines()[:3]
    assert list(curve.get_xdata()) == data.xs and list(curve.get_ydata()) == data.ys
    assert list(tangent.get_ydata()) == data.tangent_ys
    assert list(point.get_xdata()) == [1.0] and list(point.get_ydata()) == [data.y0]
    assert curve.get_color() == PALETTE["blue"]
    assert tangent.get_color() == PALETTE["orange"] and tangent.get_linestyle() == "--"
    assert point.get_color() == PALETTE["vermillion"]
    assert ax.get_title() == f"Tangent to sin(x) at x = 1: slope = {math.cos(1.0):.4g}"
    assert ax.get_xlabel() == "x" and ax.get_ylabel() == "f(x)"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["sin(x)", f"tangent, slope {math.cos(1.0):.4g}", "x = 1"]


def test_steep_tangent_does_not_squash_the_curve():
    data = tangent_data(lambda t: t**3, 2.0, -2.0, 2.0)
    ax = plot_tangent(data).axes[0]
    low, high = ax.get_ylim()
    assert low < -8 and high > 8 and high - low < 2 * 16  # the curve's range plus a margin


def test_readout_prints_x_value_and_slope():
    text = readout(tangent_data(lambda t: t**2, 1.5, -2.0, 2.0))
    assert "x      = 1.5" in text
    assert "f(x)   = 2.25" in text
    assert "slope  = 3 " in text


def test_a_zero_that_is_negative_is_printed_as_0():
    """exp(−x²) has slope −2x·exp(−x²), which is -0.0 at x = 0 (and sin(x) is -0.0 at x = -0.0):
    the readout, the title and the legend print 0, never -0."""
    data = tangent_data(lambda t: torch.exp(-(t**2)), 0.0, -1.0, 1.0)
    assert math.copysign(1.0, data.slope) == -1.0  # the case itself: autograd's -0.0
    assert "slope  = 0 " in readout(data)
    data = tangent_data(torch.sin, -0.0, -1.0, 1.0)
    text = readout(data)
    assert "x      = 0\n" in text and "f(x)   = 0\n" in text
    ax = plot_tangent(data).axes[0]
    assert "-0" not in ax.get_title()
    assert not any("-0" in t.get_text() for t in ax.get_legend().get_texts())


def test_widget_is_a_placeholder_during_grading(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    box = show_tangent({"sin(x)": torch.sin})
    assert "not drawn during grading" in box.value


def test_widget_slope_follows_the_slider_and_the_dropdown(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = show_tangent({"x**2": lambda t: t**2, "sin(x)": torch.sin}, lo=-2.0, hi=2.0, x0=1.0)
    choice, slider = box.children[1].children
    shown = box.children[2]
    assert "slope  = 2 " in shown.value
    slider.value = -0.5
    assert "slope  = -1 " in shown.value
    choice.value = "sin(x)"
    assert f"slope  = {math.cos(-0.5):.6g} " in shown.value


def test_widget_needs_a_function():
    with pytest.raises(ValueError, match="at least one function"):
        show_tangent({})


def test_the_cubic_bump_fills_the_plot():
    """x³ − 2x has its bump and dip at ±sqrt(2/3), height ±1.09: on its own range they take up a
    good part of the height (on [-3, 3] they were a tenth of it)."""
    f, lo, hi = FUNCTIONS["x³ − 2x"]
    bump = math.sqrt(2 / 3)
    height = 2 * abs(bump**3 - 2 * bump)
    low, high = plot_tangent(tangent_data(f, 0.0, lo, hi)).axes[0].get_ylim()
    assert height / (high - low) > 0.3
    assert lo < -bump and bump < hi


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_every_own_function_draws_over_its_range(name):
    f, lo, hi = FUNCTIONS[name]
    data = tangent_data(f, (lo + hi) / 2, lo, hi)
    assert data.xs[0] == lo and data.xs[-1] == hi
    assert max(data.ys) > min(data.ys)  # not flat


def test_widget_without_arguments_offers_its_own_functions(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = show_tangent()
    choice, slider = box.children[1].children
    assert list(choice.options) == list(FUNCTIONS)
    assert (slider.min, slider.max) == FUNCTIONS[choice.value][1:]


def test_the_slider_follows_the_range_of_the_function_picked(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = show_tangent({"far": (torch.sin, 10.0, 20.0), "near": (torch.cos, -5.0, -1.0)}, x0=15.0)
    choice, slider = box.children[1].children
    shown = box.children[2]
    assert slider.value == 15.0 and f"slope  = {math.cos(15.0):.6g} " in shown.value
    choice.value = "near"  # disjoint range below: the slider moves into it
    assert (slider.min, slider.max) == (-5.0, -1.0) and slider.value == -1.0
    assert f"slope  = {-math.sin(-1.0):.6g} " in shown.value
    choice.value = "far"  # and back above
    assert (slider.min, slider.max) == (10.0, 20.0) and slider.value == 10.0
    assert f"slope  = {math.cos(10.0):.6g} " in shown.value


def test_a_function_that_fails_is_drawn_as_an_error_not_the_last_picture(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = show_tangent({"sin(x)": torch.sin, "broken": lambda t: t.sum(0, 1)}, lo=-1.0, hi=1.0)
    choice = box.children[1].children[0]
    shown = box.children[2]
    choice.value = "broken"
    assert "Could not draw broken" in shown.value and "TypeError" in shown.value
    fig, text = draw_tangent("broken", lambda t: t.sum(0, 1), 0.5, -1.0, 1.0)
    assert text.startswith("Could not draw broken at x = 0.5")
    assert any("TypeError" in t.get_text() for t in fig.axes[0].texts)
    assert not fig.axes[0].get_lines()  # no curve from before
    choice.value = "sin(x)"
    assert "slope" in shown.value


def test_a_point_outside_the_range_is_moved_into_it():
    _, text = draw_tangent("sin(x)", torch.sin, 5.0, -1.0, 1.0)
    assert "x      = 1\n" in text


def test_bad_functions_are_rejected():
    with pytest.raises(TypeError, match="function of one tensor"):
        show_tangent({"y": 3.0})
    with pytest.raises(ValueError, match="lo below hi"):
        show_tangent({"y": (torch.sin, 1.0, 1.0)})
