"""The accumulation widget: `.grad` after k backward() calls, accumulated (k·g) versus zeroed
(g)."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course.lesson.widgets import accumulation  # noqa: E402
from course.lesson.widgets.accumulation import (  # noqa: E402
    EXAMPLE_W,
    accumulation_data,
    example_loss,
    plot_accumulation,
    readout,
    show_accumulation,
)


def loss_fn(w: torch.Tensor) -> torch.Tensor:
    """Gradient 2w + [1, -3]: at w = [1, 2] it is g = [3, 1]."""
    return (w**2).sum() + (w * torch.tensor([1.0, -3.0])).sum()


G = [3.0, 1.0]


@pytest.fixture
def w():
    return torch.tensor([1.0, 2.0], requires_grad=True)


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_accumulated_grad_grows_k_times_g(w):
    data = accumulation_data(w, loss_fn, 5)
    assert data.calls == [1, 2, 3, 4, 5]
    assert data.accumulated == [[k * g for g in G] for k in data.calls]


def test_zeroed_grad_stays_flat_at_g(w):
    data = accumulation_data(w, loss_fn, 5)
    assert data.zeroed == [G] * 5


def test_callers_tensor_and_grad_are_untouched(w):
    accumulation_data(w, loss_fn, 3)
    assert w.grad is None
    assert torch.equal(w.detach(), torch.tensor([1.0, 2.0]))
    loss_fn(w).backward()
    before = w.grad
    accumulation_data(w, loss_fn, 3)
    assert w.grad is before and torch.equal(w.grad, torch.tensor(G))


def test_same_arguments_give_the_same_numbers(w):
    """Moving the slider back and forth shows the same picture."""
    assert accumulation_data(w, loss_fn, 4) == accumulation_data(w, loss_fn, 4)
    assert (
        accumulation_data(w, loss_fn, 2).accumulated
        == accumulation_data(w, loss_fn, 4).accumulated[:2]
    )


def test_works_on_matrices_and_scalars():
    m = torch.ones(2, 2, requires_grad=True)
    data = accumulation_data(m, lambda t: (3 * t).sum(), 2)
    assert data.accumulated == [[3.0] * 4, [6.0] * 4]
    s = torch.tensor(2.0, requires_grad=True)
    assert accumulation_data(s, lambda t: t**3, 3).accumulated == [[12.0], [24.0], [36.0]]


@pytest.mark.parametrize("calls", [0, -1])
def test_fewer_than_one_call_raises(w, calls):
    with pytest.raises(ValueError, match="calls must be at least 1"):
        accumulation_data(w, loss_fn, calls)


def test_tensor_without_requires_grad_raises():
    with pytest.raises(ValueError, match="w must require grad"):
        accumulation_data(torch.ones(2), loss_fn, 2)


def test_plot_lines_hold_the_data(w):
    data = accumulation_data(w, loss_fn, 4)
    fig = plot_accumulation(data)
    left, right = fig.axes
    for ax, history in ((left, data.accumulated), (right, data.zeroed)):
        lines = ax.get_lines()[:2]  # the third line is the zero axis
        assert [line.get_label() for line in lines] == ["w.grad[0]", "w.grad[1]"]
        for i, line in enumerate(lines):
            assert list(line.get_xdata()) == data.calls
            assert list(line.get_ydata()) == [row[i] for row in history]


def test_plot_titles_and_axis_labels(w):
    left, right = plot_accumulation(accumulation_data(w, loss_fn, 3)).axes
    assert left.get_title() == "Without zeroing: .grad accumulates"
    assert right.get_title() == "Zeroed before each call: .grad stays g"
    for ax in (left, right):
        assert ax.get_xlabel() == "number of backward() calls"
        assert ax.get_ylabel() == "value of w.grad"
    assert left.get_ylim() == right.get_ylim(), "both panels share a scale so they compare"


def test_readout_gives_the_last_values(w):
    text = readout(accumulation_data(w, loss_fn, 3))
    assert text.splitlines() == [
        "after 3 calls:",
        "  without zeroing  w.grad = [9, 3]",
        "  with zeroing     w.grad = [3, 1]",
    ]


def test_widget_is_a_placeholder_when_nbgrader_runs(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "validate")
    assert "not drawn during grading" in show_accumulation().value


def _widget(monkeypatch, **kwargs):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    _header, controls, readout_html, output = show_accumulation(**kwargs).children
    (slider,) = controls.children
    return slider, readout_html, output


def test_the_widget_example_is_the_lessons_g():
    w = torch.tensor(EXAMPLE_W, requires_grad=True)
    assert accumulation_data(w, example_loss, 1).zeroed == [G]


def test_the_widget_opens_where_accumulation_is_visible(monkeypatch):
    slider, readout_html, _output = _widget(monkeypatch)
    assert (slider.min, slider.max, slider.value) == (1, 8, 4)
    assert "after 4 calls:" in readout_html.value and "[12, 4]" in readout_html.value


def test_moving_the_slider_redraws_the_readout(monkeypatch):
    slider, readout_html, _output = _widget(monkeypatch, max_calls=6, calls=2)
    assert (slider.min, slider.max, slider.value) == (1, 6, 2)
    assert "after 2 calls:" in readout_html.value
    slider.value = 4
    assert "after 4 calls:" in readout_html.value and "[12, 4]" in readout_html.value
    slider.value = 1
    assert "after 1 call:" in readout_html.value


def test_the_widget_owns_its_example(monkeypatch):
    """What the notebook does to its own tensors and to the global RNG after the widget is drawn
    never changes the widget's numbers."""
    slider, readout_html, _output = _widget(monkeypatch)
    torch.manual_seed(7)
    torch.randn(5)
    slider.value = 3
    w = torch.tensor(EXAMPLE_W, requires_grad=True)
    assert readout(accumulation_data(w, example_loss, 3)) in readout_html.value


def test_a_failed_redraw_shows_the_error_not_the_old_picture(monkeypatch):
    slider, readout_html, _output = _widget(monkeypatch)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(accumulation, "accumulation_data", broken)
    slider.value = 5
    assert "Could not draw: RuntimeError: out of memory" in readout_html.value
    assert "after" not in readout_html.value


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"max_calls": 1}, "max_calls must be a whole number of at least 2"),
        ({"calls": 0}, "calls must be a whole number from 1 to max_calls=8"),
        ({"max_calls": 3, "calls": 4}, "calls must be a whole number from 1 to max_calls=3"),
        ({"calls": 2.0}, "calls must be a whole number"),
    ],
)
def test_bad_widget_arguments_are_clear_errors(monkeypatch, kwargs, match):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with pytest.raises(ValueError, match=match):
        show_accumulation(**kwargs)


def test_a_loss_that_ignores_w_is_a_clear_error():
    w = torch.ones(2, requires_grad=True)
    with pytest.raises(ValueError, match="does not depend on w"):
        accumulation_data(w, lambda t: torch.tensor(1.0, requires_grad=True), 2)


def test_a_large_w_draws_at_most_six_lines_and_says_so():
    w = torch.arange(10.0, requires_grad=True)
    fig = plot_accumulation(accumulation_data(w, lambda t: (t * t).sum(), 2))
    for ax in fig.axes:
        assert len(ax.get_lines()) == 6 + 1  # six entries and the zero line
        assert "(first 6 of 10 entries)" in ax.get_title()
