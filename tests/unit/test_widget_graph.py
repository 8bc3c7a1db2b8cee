"""The computational-graph helper: its nodes and edges, the picture, the readout and the widget."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

from course.lesson.widgets import graph  # noqa: E402
from course.lesson.widgets.base import PALETTE  # noqa: E402
from course.lesson.widgets.graph import LEAF, OP, graph_data, plot_graph, readout  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


@pytest.fixture
def affine():
    """y = (w * x).sum() + b with x a constant: two leaves, three operations."""
    w = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = torch.tensor(0.5, requires_grad=True)
    x = torch.tensor([0.1, 0.2, 0.3])
    return w, b, x, (w * x).sum() + b


def labels(data):
    return sorted(n.label for n in data.nodes)


def test_nodes_and_edges_of_a_small_expression(affine):
    w, b, _, y = affine
    data = graph_data(y, names={"w": w, "b": b})
    assert labels(data) == [
        "AccumulateGrad (b, shape ())",
        "AccumulateGrad (w, shape (3,))",
        "AddBackward0",
        "MulBackward0",
        "SumBackward0",
    ]
    by_op = {n.label: n.index for n in data.nodes}
    pairs = {(e.source, e.target) for e in data.edges}
    assert pairs == {
        (by_op["AccumulateGrad (w, shape (3,))"], by_op["MulBackward0"]),
        (by_op["MulBackward0"], by_op["SumBackward0"]),
        (by_op["SumBackward0"], by_op["AddBackward0"]),
        (by_op["AccumulateGrad (b, shape ())"], by_op["AddBackward0"]),
    }
    assert data.nodes[data.root].op == "AddBackward0"
    assert [n.name for n in data.leaves()].count("w") == 1
    assert {n.kind for n in data.nodes} == {LEAF, OP}
    assert {n.shape for n in data.leaves()} == {(3,), ()}


def test_the_constant_input_is_not_in_the_graph(affine):
    *_, y = affine
    data = graph_data(y)
    assert len(data.leaves()) == 2  # w and b; x does not require grad, so it has no node
    assert all(n.label.startswith("AccumulateGrad (shape") for n in data.leaves())


def test_a_tensor_used_twice_appears_once():
    w = torch.tensor([1.0, -2.0], requires_grad=True)
    y = (w * w).sum() + w.sum()
    data = graph_data(y, names={"w": w})
    assert [n.label for n in data.leaves()] == ["AccumulateGrad (w, shape (2,))"]
    square = next(n for n in data.nodes if n.op == "MulBackward0")
    into_square = [e for e in data.edges if e.target == square.index]
    assert len(into_square) == 1 and into_square[0].uses == 2
    assert len({(e.source, e.target) for e in data.edges}) == len(data.edges)


def test_a_shared_intermediate_appears_once():
    w = torch.tensor(2.0, requires_grad=True)
    h = w.exp()
    y = h * h + h
    data = graph_data(y, names={"h": h})
    assert [n.label for n in data.nodes].count("ExpBackward0 (h)") == 1
    assert len(data.leaves()) == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.tensor([1.0, 2.0]),  # does not require grad
        lambda: torch.tensor([1.0, 2.0]) * 3,  # computed from constants only
        lambda: torch.tensor([1.0, 2.0], requires_grad=True),  # a leaf: nothing to walk
        lambda: (torch.ones(2, requires_grad=True) * 2).detach(),  # cut from its graph
    ],
    ids=["constant", "computed-from-constants", "leaf", "detached"],
)
def test_a_tensor_without_grad_fn_gives_an_empty_graph(make):
    data = graph_data(make())
    assert data.empty and data.nodes == [] and data.edges == [] and data.root is None
    assert "no grad_fn" in readout(data)


def test_rows_put_inputs_above_the_operations_that_use_them(affine):
    *_, y = affine
    data = graph_data(y)
    rows = {n.index: n.row for n in data.nodes}
    assert all(rows[e.source] < rows[e.target] for e in data.edges)
    assert rows[data.root] == max(rows.values())
    assert [n.index for n in data.nodes if n.row == rows[data.root]] == [data.root]


def test_a_model_graph_names_its_parameters():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
    loss = model(torch.randn(5, 3)).pow(2).mean()
    data = graph_data(loss, names=dict(model.named_parameters()))
    assert sorted(n.name for n in data.leaves()) == ["0.bias", "0.weight", "2.bias", "2.weight"]
    assert {n.shape for n in data.leaves()} == {(4, 3), (4,), (1, 4), (1,)}
    model[0].weight.requires_grad_(False)
    frozen = graph_data(model(torch.randn(5, 3)).sum(), names=dict(model.named_parameters()))
    assert "0.weight" not in {n.name for n in frozen.leaves()}


def test_the_graph_is_rebuilt_on_every_forward_pass():
    w = torch.tensor(1.5, requires_grad=True)

    def f(steps):
        out = w
        for _ in range(steps):
            out = out * 2
        return out

    assert len(graph_data(f(1)).ops()) == 1
    assert len(graph_data(f(4)).ops()) == 4


def test_bad_input_raises_a_clear_error():
    with pytest.raises(TypeError, match="needs a tensor"):
        graph_data([1.0, 2.0])
    with pytest.raises(TypeError, match=r"names\['w'\] should be a tensor"):
        graph_data(torch.ones(2, requires_grad=True) * 2, names={"w": [1.0]})
    out = torch.ones(1, requires_grad=True)
    for _ in range(30):
        out = out * 1.5
    with pytest.raises(ValueError, match="more than 10 nodes"):
        graph_data(out, max_nodes=10)


def test_plot_draws_one_box_per_node_and_one_arrow_per_edge(affine):
    w, b, _, y = affine
    data = graph_data(y, names={"w": w, "b": b})
    fig = plot_graph(data)
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
    assert len(boxes) == len(data.nodes)
    assert len(arrows) == len(data.edges)
    texts = {t.get_text() for t in ax.texts}
    assert "AccumulateGrad\n(w, shape (3,))" in texts
    assert "MulBackward0" in texts
    fill = {p.get_gid(): matplotlib.colors.to_hex(p.get_facecolor()) for p in boxes}
    for n in data.nodes:
        expected = PALETTE["sky"] if n.kind == LEAF else PALETTE["orange"]
        assert fill[f"node-{n.index}"] == expected.lower()
    assert "Computational graph" in ax.get_title()
    assert "forward" in ax.get_xlabel() and "output" in ax.get_ylabel()
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["leaf (AccumulateGrad)", "operation (grad_fn)", "the tensor's own grad_fn"]


def test_plot_marks_repeated_use_and_routes_long_arrows_between_rows():
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    h = (w * w).exp()
    y = h.sum() + w.sum()
    data = graph_data(y)
    ax = plot_graph(data).axes[0]
    assert any(t.get_text() == "used 2×" for t in ax.texts)
    pos, bends, _ = graph._layout(data)
    for e in data.edges:
        ys = [pos[e.source][1], *(y for _, y in bends[(e.source, e.target)]), pos[e.target][1]]
        assert ys == sorted(ys, reverse=True)  # every arrow runs downwards
        skipped = data.nodes[e.target].row - data.nodes[e.source].row - 1
        assert len(bends[(e.source, e.target)]) == 2 * skipped  # a bend in each row it crosses
    assert any(bends.values())  # w -> AddBackward0 crosses the rows of exp and sum


def test_plot_of_an_empty_graph_says_why():
    fig = plot_graph(graph_data(torch.zeros(3)))
    ax = fig.axes[0]
    assert any("no grad_fn" in t.get_text() for t in ax.texts)
    assert any("requires grad" in t.get_text() for t in ax.texts)
    assert not [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    assert ax.get_title()
    # a message, not empty axes with captions: no axis labels, no legend, axes hidden
    assert not ax.get_xlabel() and not ax.get_ylabel() and ax.get_legend() is None
    assert not ax.axison


def test_plot_can_draw_on_given_axes(affine):
    *_, y = affine
    fig, ax = plt.subplots()
    assert plot_graph(graph_data(y), ax=ax, title="mine") is fig
    assert ax.get_title() == "mine"


def test_readout_lists_leaves_and_every_operation_with_its_inputs(affine):
    w, b, _, y = affine
    text = readout(graph_data(y, names={"w": w, "b": b, "y": y}))
    lines = text.splitlines()
    assert lines[0].startswith("y (shape (), requires_grad=True): 3 operation(s), 2 leaf tensor(s)")
    assert "w" in lines[0] and "b" in lines[0]
    assert any(
        "MulBackward0 <-" in line and "AccumulateGrad (w, shape (3,))" in line for line in lines
    )
    assert lines[-1].strip().startswith("[0] AddBackward0 (y) <-")  # the output comes last


def test_show_graph_rebuilds_the_chosen_expression(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    w = torch.tensor([1.0, 2.0], requires_grad=True)
    calls = []

    def square():
        calls.append("square")
        return (w * w).sum()

    box = graph.show_graph({"square": square, "exp": lambda: w.exp().sum()}, names={"w": w})
    dropdown = box.children[1].children[0]
    readout_widget = box.children[2]
    assert list(dropdown.options) == ["square", "exp"]
    assert "MulBackward0" in readout_widget.value and calls == ["square"]
    dropdown.value = "exp"
    assert "ExpBackward0" in readout_widget.value
    dropdown.value = "square"
    assert calls == ["square", "square"]  # a fresh forward pass each time


def test_show_graph_is_a_placeholder_during_grading(monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")
    box = graph.show_graph({"one": lambda: torch.ones(1, requires_grad=True) * 2})
    assert "not drawn during grading" in box.value


def test_show_graph_rejects_bad_examples():
    with pytest.raises(ValueError, match="at least one"):
        graph.show_graph({})
    with pytest.raises(TypeError, match="function of no arguments"):
        graph.show_graph({"y": torch.ones(1)})


def _widget_parts(box):
    return box.children[1].children[0], box.children[2]


def test_show_graph_without_arguments_draws_its_own_examples(monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    dropdown, shown = _widget_parts(graph.show_graph())
    assert list(dropdown.options) == list(graph.EXAMPLES)
    seen = set()
    for label in graph.EXAMPLES:
        dropdown.value = label
        seen.add(shown.value)
        assert "Could not draw" not in shown.value, shown.value
    assert len(seen) == len(graph.EXAMPLES)  # every pick redrew
    dropdown.value = next(label for label in graph.EXAMPLES if "nothing requires grad" in label)
    assert "no grad_fn" in shown.value
    dropdown.value = next(label for label in graph.EXAMPLES if "not a leaf" in label)
    assert "MulBackward0" in shown.value


def test_own_examples_build_fresh_tensors_and_leave_the_random_state_alone():
    for make in graph.EXAMPLES.values():
        first, second = make(), make()
        first = first[0] if isinstance(first, tuple) else first
        second = second[0] if isinstance(second, tuple) else second
        assert first is not second
        assert first.grad_fn is None or first.grad_fn is not second.grad_fn
    torch.manual_seed(3)
    expected = torch.rand(2)
    torch.manual_seed(3)
    for make in graph.EXAMPLES.values():
        make()
    assert torch.equal(torch.rand(2), expected)


def test_an_example_that_fails_is_drawn_as_an_error_not_the_last_picture(monkeypatch):
    """An example that reads a name the notebook rebound (here: to a tensor of another size)
    shows the error; the widget never keeps the previous plot."""
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    state = {"w": torch.ones(3, requires_grad=True)}
    x = torch.ones(3)
    box = graph.show_graph({"ok": lambda: (state["w"] * x).sum(), "other": lambda: state["w"] * 2})
    dropdown, shown = _widget_parts(box)
    state["w"] = torch.ones(2, requires_grad=True)  # what Run All did to the notebook's w
    dropdown.value = "other"
    dropdown.value = "ok"
    assert "Could not draw ok" in shown.value and "RuntimeError" in shown.value
    fig, text = graph.draw_example("ok", lambda: (state["w"] * x).sum())
    assert text == shown.value.removeprefix("<pre style='margin:0'>").removesuffix("</pre>")
    ax = fig.axes[0]
    assert not [p for p in ax.patches if isinstance(p, FancyBboxPatch)]
    assert any("RuntimeError" in t.get_text() for t in ax.texts)
    fig, text = graph.draw_example("not a tensor", lambda: 3.0)
    assert "TypeError" in text


def test_an_example_may_name_its_own_leaves():
    w = torch.ones(2, requires_grad=True)
    _, text = graph.draw_example("mine", lambda: ((w * 2).sum(), {"weights": w}))
    assert "AccumulateGrad (weights, shape (2,))" in text
