"""The cost widget: exact saved-for-backward bytes, zero under no_grad, and the bar charts it draws.

Wall-clock times depend on the machine and its load, so they are never compared to numbers here.
"""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402

from course.lesson.widgets import cost  # noqa: E402
from course.lesson.widgets.base import PALETTE  # noqa: E402


@pytest.fixture
def small() -> cost.CostData:
    return cost.cost_data(width=8, depth=3, batch=5, repeats=2)


def test_make_mlp_is_the_same_for_a_seed_and_leaves_the_global_rng_alone():
    torch.manual_seed(123)
    expected_next = torch.rand(3)
    torch.manual_seed(123)
    a, b = cost.make_mlp(6, 2), cost.make_mlp(6, 2)
    assert torch.equal(torch.rand(3), expected_next)
    for pa, pb in zip(a.parameters(), b.parameters()):
        assert torch.equal(pa, pb)
    assert not torch.equal(a[0].weight, cost.make_mlp(6, 2, seed=1)[0].weight)
    kinds = [type(m).__name__ for m in a]
    assert kinds == ["Linear", "ReLU", "Linear", "ReLU", "Linear"]
    assert a[-1].out_features == 1


def test_saved_bytes_of_a_known_model_are_the_input_and_each_relu_output():
    model = cost.make_mlp(width=8, depth=3)
    x = torch.randn(5, 8)
    # x (5x8) and three ReLU outputs (5x8), float32; weights are not counted. A ReLU keeps its
    # output only: its input (a Linear's output) too would make 7 tensors.
    assert cost.saved_bytes(model, x) == 4 * 5 * 8 * 4 == 640


def test_saved_bytes_leave_out_the_weights_autograd_keeps_unless_asked():
    model = cost.make_mlp(width=8, depth=3)  # Linear(8, 8) three times, then Linear(8, 1)
    x = torch.randn(5, 8)
    kept = cost.saved_bytes(model, x, include_model=True) - cost.saved_bytes(model, x)
    # Every Linear whose input requires grad keeps its weight, to pass the gradient on to that
    # input; the first one's input x does not require grad, so its weight is not kept.
    assert kept == (8 * 8 + 8 * 8 + 1 * 8) * 4
    x.requires_grad_()
    kept = cost.saved_bytes(model, x, include_model=True) - cost.saved_bytes(model, x)
    assert kept == (3 * 8 * 8 + 1 * 8) * 4
    with torch.no_grad():
        assert cost.saved_bytes(model, x, include_model=True) == 0


def test_saved_bytes_count_double_precision_twice_as_much():
    model = cost.make_mlp(width=4, depth=1).double()
    assert cost.saved_bytes(model, torch.randn(3, 4, dtype=torch.float64)) == 2 * 3 * 4 * 8


def test_saved_bytes_are_zero_under_no_grad_and_inference_mode():
    model = cost.make_mlp(width=8, depth=2)
    x = torch.randn(4, 8)
    with torch.no_grad():
        assert cost.saved_bytes(model, x) == 0
    with torch.inference_mode():
        assert cost.saved_bytes(model, x) == 0


def test_saved_bytes_are_not_zero_in_eval_mode():
    model = cost.make_mlp(width=8, depth=2).eval()
    assert cost.saved_bytes(model, torch.randn(4, 8)) == 3 * 4 * 8 * 4


def test_cost_data_saved_bytes_follow_the_formula(small):
    assert (small.width, small.depth, small.batch, small.repeats) == (8, 3, 5, 2)
    assert small.saved_bytes == [(3 + 1) * 5 * 8 * 4, 0]
    bigger = cost.cost_data(width=16, depth=2, batch=10, repeats=1)
    assert bigger.saved_bytes == [(2 + 1) * 10 * 16 * 4, 0]


def test_cost_data_times_are_one_list_per_mode_with_a_run_per_repeat(small):
    assert len(small.times_ms) == len(cost.MODES) == 2
    assert all(len(t) == small.repeats for t in small.times_ms)
    assert all(isinstance(t, float) and t >= 0 for runs in small.times_ms for t in runs)
    assert small.fastest_ms == [min(t) for t in small.times_ms]


def test_cost_data_leaves_the_grad_mode_as_it_was():
    cost.cost_data(width=4, depth=1, batch=2, repeats=1)
    assert torch.is_grad_enabled()
    with torch.no_grad():
        cost.cost_data(width=4, depth=1, batch=2, repeats=1)
        assert not torch.is_grad_enabled()


@pytest.mark.parametrize("arg", ["width", "depth", "batch", "repeats"])
@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_cost_data_rejects_sizes_that_are_not_positive_ints(arg, bad):
    kwargs = {"width": 4, "depth": 1, "batch": 2, "repeats": 1, arg: bad}
    with pytest.raises(ValueError, match=f"{arg} must be a positive int"):
        cost.cost_data(**kwargs)


def test_plot_bars_show_the_saved_mib_and_the_times(small):
    fig = cost.plot_cost(small)
    memory_ax, time_ax = fig.axes
    heights = [bar.get_height() for bar in memory_ax.patches]
    assert heights == pytest.approx([640 / 2**20, 0.0])
    assert [bar.get_height() for bar in time_ax.patches] == pytest.approx(small.fastest_ms)
    plt.close(fig)


def test_plot_titles_labels_and_legend(small):
    fig = cost.plot_cost(small)
    memory_ax, time_ax = fig.axes
    assert memory_ax.get_title() == "Memory kept for backward"
    assert time_ax.get_title().splitlines() == [
        "Forward time (fastest of 2):",
        cost.timing_verdict(small.times_ms)[0],
    ]
    assert memory_ax.get_ylabel() == "saved activations (MiB)"
    assert time_ax.get_ylabel() == "fastest forward pass (ms)"
    assert fig._suptitle.get_text() == "MLP of width 8, depth 3, batch 5"
    for ax in (memory_ax, time_ax):
        assert ax.get_xlabel() == "gradient mode"
        assert [t.get_text() for t in ax.get_xticklabels()] == list(cost.MODES)
        assert [t.get_text() for t in ax.get_legend().get_texts()] == list(cost.MODES)
        colours = [matplotlib.colors.to_hex(bar.get_facecolor()).upper() for bar in ax.patches]
        assert colours == [PALETTE["vermillion"], PALETTE["blue"]]
    value_labels = [t.get_text() for t in memory_ax.texts]
    assert value_labels == ["0.00061 MiB", "0 MiB"]  # 640 bytes and nothing
    plt.close(fig)


def test_plot_draws_on_given_axes(small):
    fig, axes = plt.subplots(1, 2)
    assert cost.plot_cost(small, axes=axes) is fig
    assert len(axes[0].patches) == 2
    plt.close(fig)


def test_readout_has_both_modes_and_their_numbers():
    data = cost.CostData(64, 2, 32, 3, [3 * 2**20, 0], [[1.6, 1.5, 1.7], [1.3, 1.25, 1.2]])
    text = cost.readout(data)
    assert "width 64, depth 2, batch 32" in text
    first, second, verdict = text.splitlines()[1:]
    assert "tracking on" in first and "3.000 MiB" in first
    assert "fastest forward    1.500 ms" in first
    assert "torch.no_grad()" in second and "0.000 MiB" in second and "1.200 ms" in second
    assert verdict.strip() == cost.timing_verdict(data.times_ms)[1]


def test_show_cost_is_a_placeholder_during_grading(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    box = cost.show_cost()
    assert "not drawn during grading" in box.value


def test_show_cost_has_width_and_batch_sliders_and_a_readout(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = cost.show_cost(depth=1, batch=16, repeats=1, max_width=64)
    sliders = box.children[1].children
    assert [s.description for s in sliders] == ["model width", "batch size"]
    assert [s.value for s in sliders] == [64, 16]
    assert "width 64, depth 1, batch 16" in box.children[2].value
    sliders[0].value = 32  # moving a slider redraws with the new numbers
    assert "width 32, depth 1, batch 16" in box.children[2].value


def test_forward_times_ms_gives_repeats_runs_per_mode_and_checks_repeats():
    model, x = cost.make_mlp(4, 1), torch.randn(2, 4)
    times = cost.forward_times_ms(model, x, repeats=3)
    assert len(times) == 2 and all(len(t) == 3 for t in times)
    assert all(isinstance(t, float) for runs in times for t in runs)
    with pytest.raises(ValueError, match="repeats must be a positive int"):
        cost.forward_times_ms(model, x, repeats=0)


def test_forward_times_ms_takes_turns_and_alternates_who_goes_first(monkeypatch):
    model, x = cost.make_mlp(4, 1), torch.randn(2, 4)
    order = []
    model.register_forward_pre_hook(lambda *args: order.append(torch.is_grad_enabled()))
    cost.forward_times_ms(model, x, repeats=3)
    assert order == [True, False, False, True, True, False, False, True]  # warm-up round first


def test_a_clear_win_is_called_one_and_a_busy_moment_does_not_decide_it():
    # tracking on is slower in every round; one round of each mode was slowed by something else
    on = [1.10, 1.12, 9.0, 1.11, 1.13]
    off = [0.90, 8.0, 0.92, 0.91, 0.93]
    short, sentence = cost.timing_verdict([on, off])
    assert short == "torch.no_grad() faster"
    assert sentence.startswith("torch.no_grad() was faster: 0.9 ms against 1.1 ms")
    assert "fastest of 5 runs each" in sentence


def test_overlapping_times_are_called_noise():
    on = [1.0, 1.3, 1.1, 1.6, 1.2]
    off = [1.05, 1.0, 1.4, 1.1, 1.5]
    short, sentence = cost.timing_verdict([on, off])
    assert short == "difference is noise"
    assert sentence.startswith("too close to call")


def test_a_gap_within_the_noise_names_the_gap_rule_even_with_a_steady_winner():
    # no_grad wins every round, but its fastest run is only 0.05 ms ahead of a noise of 0.3 ms
    on = [1.00, 1.30, 1.30, 1.30, 1.30]
    off = [0.95, 1.25, 1.25, 1.25, 1.25]
    short, sentence = cost.timing_verdict([on, off])
    assert short == "difference is noise"
    assert sentence == (
        "too close to call: the fastest runs differ by 0.05 ms, not more than the run-to-run "
        "noise of 0.3 ms (even though torch.no_grad() won 5 of 5 rounds)."
    )


def test_a_gap_above_the_noise_with_few_wins_names_the_rounds_rule():
    # the case: the gap (0.15) is three times the noise (0.05), 8 wins of 11 < 3 in 4
    on = [1.00] + [1.05] * 10
    off = [0.85] + [0.90] * 7 + [1.10] * 3
    short, sentence = cost.timing_verdict([on, off], ("set_to_none=False", "set_to_none=True"))
    assert short == "no steady winner"
    assert sentence == (
        "too close to call: the fastest runs differ by 0.15 ms, more than the run-to-run noise "
        "of 0.05 ms, but set_to_none=True won only 8 of 11 rounds, fewer than 3 in 4."
    )
    assert "within" not in sentence


def test_a_verdict_withheld_by_both_rules_names_both():
    on = [1.0, 1.3, 1.1, 1.6, 1.2]
    off = [0.98, 1.0, 1.4, 1.1, 1.5]
    short, sentence = cost.timing_verdict([on, off])
    assert short == "difference is noise"
    assert "not more than the run-to-run noise" in sentence
    assert "and torch.no_grad() won only 3 of 5 rounds, fewer than 3 in 4." in sentence


def test_a_faster_minimum_that_won_few_rounds_is_noise():
    on = [1.0] * 8
    off = [0.8, 1.1, 0.8, 1.1, 0.8, 1.1, 0.8, 1.1]  # the gap (0.2) beats the noise (0.15) ...
    short, sentence = cost.timing_verdict([on, off])
    assert short == "no steady winner"  # ... but no_grad won only half the rounds
    assert "torch.no_grad() won only 4 of 8 rounds" in sentence
    assert "more than the run-to-run noise of 0.15 ms" in sentence


def test_a_difference_below_two_percent_is_noise():
    on = [1.000, 1.000, 1.000, 1.000]
    off = [0.990, 0.990, 0.990, 0.990]
    short, sentence = cost.timing_verdict([on, off])
    assert short == "difference is noise"
    assert "noise of 0.02 ms (even though torch.no_grad() won 4 of 4 rounds)" in sentence


def test_a_failed_redraw_shows_the_error_not_the_old_picture(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    box = cost.show_cost(depth=1, batch=16, repeats=1, max_width=64)

    def broken(*args, **kwargs):
        raise RuntimeError("out of memory")

    monkeypatch.setattr(cost, "cost_data", broken)
    box.children[1].children[0].value = 32
    assert "Could not draw: RuntimeError: out of memory" in box.children[2].value
    assert "width" not in box.children[2].value


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"depth": 0}, "depth must be a positive int"),
        ({"repeats": 0}, "repeats must be a positive int"),
        ({"max_width": 16}, "max_width must be at least 32"),
        ({"device": "not-a-device"}, "device"),
    ],
)
def test_bad_widget_arguments_are_clear_errors(monkeypatch, kwargs, match):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    with pytest.raises((ValueError, RuntimeError), match=match):
        cost.show_cost(**kwargs)
