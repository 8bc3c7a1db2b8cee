"""The computational graph behind a tensor, drawn with matplotlib alone (no graphviz binary).

Runs in: a student's kernel, and a grading kernel running the same notebook.

``graph_data`` walks ``tensor.grad_fn.next_functions`` down to the ``AccumulateGrad`` nodes of
the leaves and lays the nodes out in rows: inputs towards the top, the tensor's own ``grad_fn``
at the bottom, arrows in the direction the forward pass went (``backward()`` walks them in
reverse). Leaf tensors are drawn in one colour, operations in another.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch
from matplotlib.path import Path

from .base import PALETTE, interactive_plot, new_figure

LEAF, OP = "leaf", "op"
COLOURS = {LEAF: PALETTE["sky"], OP: PALETTE["orange"]}
ROOT_EDGE = PALETTE["vermillion"]
MAX_NODES = 200


@dataclass(frozen=True)
class GraphNode:
    """One node of the graph: an operation (``MulBackward0``) or a leaf's ``AccumulateGrad``."""

    index: int
    kind: str  # LEAF or OP
    op: str  # the class name, e.g. "MulBackward0" or "AccumulateGrad"
    label: str  # what the box says, e.g. "AccumulateGrad (w, shape (3,))"
    row: int  # 0 = top row; the root is alone in the last row, a leaf sits above its users
    name: str | None = None  # the name given for this tensor in ``names``, if any
    shape: tuple[int, ...] | None = None  # the leaf tensor's shape (leaves only)


@dataclass(frozen=True)
class GraphEdge:
    """An arrow from an input node to the node that used it, ``uses`` times (``w * w``: 2)."""

    source: int
    target: int
    uses: int = 1


@dataclass(frozen=True)
class GraphData:
    """The nodes and edges of a tensor's graph; empty when the tensor has no ``grad_fn``."""

    nodes: list[GraphNode]
    edges: list[GraphEdge]
    root: int | None  # index of the tensor's own grad_fn, None for an empty graph
    description: str  # e.g. "y (shape (), requires_grad=True)"

    @property
    def empty(self) -> bool:
        return not self.nodes

    def leaves(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.kind == LEAF]

    def ops(self) -> list[GraphNode]:
        return [n for n in self.nodes if n.kind == OP]


def _shape(t: torch.Tensor) -> tuple[int, ...]:
    return tuple(int(s) for s in t.shape)


def _describe(t: torch.Tensor, name: str | None) -> str:
    who = f"{name} " if name else "tensor "
    return f"{who}(shape {_shape(t)}, requires_grad={t.requires_grad})"


def graph_data(
    tensor: torch.Tensor,
    names: Mapping[str, torch.Tensor] | None = None,
    max_nodes: int = MAX_NODES,
) -> GraphData:
    """The graph that ``tensor.backward()`` would walk, as nodes, edges and rows.

    ``names`` maps display names to tensors (``{"w": w, "h": h}``): a leaf's box then reads
    ``AccumulateGrad (w, shape (3,))`` and an intermediate's ``MulBackward0 (h)``. Every node
    appears once however often its tensor is used. A tensor with no ``grad_fn`` (a leaf, or one
    computed from tensors that do not require grad) gives an empty graph.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"graph_data needs a tensor, got {type(tensor).__name__}")
    names = dict(names or {})
    for name, value in names.items():
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"names[{name!r}] should be a tensor, got {type(value).__name__}")
    own_name = next((n for n, v in names.items() if v is tensor), None)
    description = _describe(tensor, own_name)
    if tensor.grad_fn is None:
        return GraphData([], [], None, description)

    # Discover every node once, keyed by the autograd node object (stable while the graph lives).
    order: list = []  # autograd nodes in discovery order
    index: dict[int, int] = {}
    inputs: dict[int, list[int]] = {}  # node index -> input node indices, one per use
    stack = [tensor.grad_fn]
    index[id(tensor.grad_fn)] = 0
    order.append(tensor.grad_fn)
    while stack:
        fn = stack.pop()
        here = index[id(fn)]
        inputs[here] = []
        for child, _ in fn.next_functions:
            if child is None:  # an input that does not require grad: no node
                continue
            if id(child) not in index:
                if len(order) >= max_nodes:
                    raise ValueError(
                        f"the graph has more than {max_nodes} nodes: too big to draw; "
                        "pass a smaller expression or raise max_nodes"
                    )
                index[id(child)] = len(order)
                order.append(child)
                stack.append(child)
            inputs[here].append(index[id(child)])

    # Longest distance of every node from the root (the root first, then its inputs).
    depth = [0] * len(order)
    for i in _topological(inputs, len(order)):
        for j in inputs[i]:
            depth[j] = max(depth[j], depth[i] + 1)
    bottom = max(depth)

    # Rows from the top: an operation by its longest distance from the root, a leaf just above
    # the highest operation that uses it (so its arrows are short); then close any gaps.
    is_leaf = [isinstance(getattr(fn, "variable", None), torch.Tensor) for fn in order]
    raw = [bottom + 1 if is_leaf[i] else bottom - depth[i] for i in range(len(order))]
    for i in range(len(order)):
        for j in inputs[i]:
            if is_leaf[j]:
                raw[j] = min(raw[j], raw[i] - 1)
    row_of = {r: k for k, r in enumerate(sorted(set(raw)))}

    nodes = []
    for i, fn in enumerate(order):
        op = type(fn).__name__
        if is_leaf[i]:
            variable = fn.variable
            name = next((n for n, v in names.items() if v is variable), None)
            shape = _shape(variable)
            detail = f"{name}, shape {shape}" if name else f"shape {shape}"
            nodes.append(GraphNode(i, LEAF, op, f"{op} ({detail})", row_of[raw[i]], name, shape))
        else:
            name = next((n for n, v in names.items() if v.grad_fn is fn), None)
            label = f"{op} ({name})" if name else op
            nodes.append(GraphNode(i, OP, op, label, row_of[raw[i]], name))

    edges = []
    for target in range(len(order)):
        counts: dict[int, int] = {}
        for source in inputs[target]:
            counts[source] = counts.get(source, 0) + 1
        edges += [GraphEdge(source, target, uses) for source, uses in counts.items()]
    return GraphData(nodes, edges, 0, description)


def _topological(inputs: dict[int, list[int]], count: int) -> list[int]:
    """Node indices ordered so that every node comes before all of its inputs (root first)."""
    consumers = [0] * count
    for i in range(count):
        for j in set(inputs[i]):
            consumers[j] += 1
    ready = [i for i in range(count) if consumers[i] == 0]
    ordered = []
    while ready:
        i = ready.pop()
        ordered.append(i)
        for j in set(inputs[i]):
            consumers[j] -= 1
            if consumers[j] == 0:
                ready.append(j)
    return ordered


Point = tuple[float, float]
DUMMY_WIDTH = 0.4  # room a long arrow takes when it passes through a row
BOX_HALF_WIDTH, BOX_HALF_HEIGHT = 0.44, 0.27


def _layout(data: GraphData) -> tuple[dict[int, Point], dict[tuple[int, int], list[Point]], float]:
    """Where to draw: box centres, the bends of each arrow, and the width of the widest row.

    A layered (Sugiyama-style) layout: an arrow that skips rows gets a waypoint in each row it
    crosses, so it is routed between the boxes instead of behind them; rows are ordered by the
    mean x of their neighbours to keep arrows short and crossings few.
    """
    row_of: dict = {}
    below: dict = {}  # item -> items in the next row down it feeds
    above: dict = {}  # item -> items in the row above that feed it
    for n in data.nodes:
        row_of[("n", n.index)] = n.row
    chains: dict[tuple[int, int], list] = {}
    for e in data.edges:
        chain = [("n", e.source)]
        for r in range(data.nodes[e.source].row + 1, data.nodes[e.target].row):
            dummy = ("d", e.source, e.target, r)
            row_of[dummy] = r
            chain.append(dummy)
        chain.append(("n", e.target))
        chains[(e.source, e.target)] = chain
        for a, b in zip(chain, chain[1:]):
            below.setdefault(a, []).append(b)
            above.setdefault(b, []).append(a)
    rows: dict[int, list] = {}
    for item, r in sorted(row_of.items(), key=lambda kv: (kv[0][0] == "d", kv[0][1:])):
        rows.setdefault(r, []).append(item)
    last = max(rows)
    x: dict = {}

    def width(item) -> float:
        return 1.0 if item[0] == "n" else DUMMY_WIDTH

    def place(r: int, neighbours: dict) -> None:
        def desired(item) -> float:
            xs = [x[m] for m in neighbours.get(item, []) if m in x]
            return sum(xs) / len(xs) if xs else x.get(item, 0.0)

        want = {item: desired(item) for item in rows[r]}
        order = sorted(rows[r], key=lambda item: want[item])
        placed: list[float] = []
        for k, item in enumerate(order):
            target = want[item]
            if k:
                target = max(target, placed[-1] + (width(order[k - 1]) + width(item)) / 2)
            placed.append(target)
        shift = sum(want[i] - p for i, p in zip(order, placed)) / len(order)
        rows[r] = order
        for item, p in zip(order, placed):
            x[item] = p + shift

    for r in range(last, -1, -1):  # first pass: from the root up
        place(r, below)
    for _ in range(2):
        for r in range(1, last + 1):
            place(r, above)
        for r in range(last - 1, -1, -1):
            place(r, below)
    left = min(x[i] - width(i) / 2 for i in x)
    right = max(x[i] + width(i) / 2 for i in x)
    pos = {item[1]: (x[item] - left, float(last - row_of[item])) for item in x if item[0] == "n"}
    bends = {
        key: [
            (x[d] - left, float(last - row_of[d]) + dy)
            for d in chain[1:-1]
            for dy in (BOX_HALF_HEIGHT, -BOX_HALF_HEIGHT)
        ]
        for key, chain in chains.items()
    }
    return pos, bends, right - left


def _box_text(label: str) -> str:
    """Two lines for a labelled box: ``AccumulateGrad`` over ``(w, shape (3,))``."""
    op, sep, rest = label.partition(" (")
    return f"{op}\n({rest}" if sep else label


NO_GRAPH = (
    "Nothing to draw: {description} has no grad_fn.\n\n"
    "None of the tensors it was computed from requires grad (or it is a leaf),\n"
    "so autograd recorded no graph and backward() would have nothing to walk."
)


def _message(ax, text: str, colour: str = "#333333"):
    """Replace whatever the axes would show by a centred message (no axis captions or legend)."""
    ax.set_axis_off()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=11, color=colour, wrap=True)
    return ax.figure


def plot_graph(data: GraphData, ax=None, title: str | None = None):
    """Boxes and arrows: leaves (``AccumulateGrad``) in one colour, operations in another."""
    rows = max((n.row for n in data.nodes), default=0) + 1
    if data.empty:
        pos, bends, per_row = {}, {}, 1.0
    else:
        pos, bends, per_row = _layout(data)
    if ax is None:
        fig, ax = new_figure(width=max(6.5, 2.2 * per_row), height=max(2.6, 1.1 * rows + 1.2))
    else:
        fig = ax.figure
    ax.set_title(title or f"Computational graph of {data.description}")
    ax.set_xticks([])
    ax.set_yticks([])
    for spine in ax.spines.values():
        spine.set_visible(False)
    if data.empty:
        return _message(ax, NO_GRAPH.format(description=data.description))
    ax.set_xlabel("arrows follow the forward pass; backward() walks them in reverse")
    ax.set_ylabel("inputs (top) to output (bottom)")
    ax.set_xlim(0, per_row)
    ax.set_ylim(-0.6, rows - 0.4)
    handles = [
        Patch(facecolor=COLOURS[LEAF], edgecolor="black", label="leaf (AccumulateGrad)"),
        Patch(facecolor=COLOURS[OP], edgecolor="black", label="operation (grad_fn)"),
        Patch(
            facecolor="white", edgecolor=ROOT_EDGE, linewidth=2.5, label="the tensor's own grad_fn"
        ),
    ]
    half_w, half_h = BOX_HALF_WIDTH, BOX_HALF_HEIGHT
    for n in data.nodes:
        x, y = pos[n.index]
        root = n.index == data.root
        ax.add_patch(
            FancyBboxPatch(
                (x - half_w, y - half_h),
                2 * half_w,
                2 * half_h,
                boxstyle="round,pad=0.02",
                facecolor=COLOURS[n.kind],
                edgecolor=ROOT_EDGE if root else "black",
                linewidth=2.5 if root else 1.0,
                gid=f"node-{n.index}",
                zorder=2,
            )
        )
        text = _box_text(n.label)
        size = 8 if max(len(line) for line in text.splitlines()) <= 26 else 6.5
        ax.text(
            x, y, text, ha="center", va="center", fontsize=size, zorder=3, gid=f"label-{n.index}"
        )
    for e in data.edges:
        (x0, y0), (x1, y1) = pos[e.source], pos[e.target]
        points = [(x0, y0 - half_h - 0.02), *bends[(e.source, e.target)], (x1, y1 + half_h + 0.02)]
        codes = [Path.MOVETO] + [Path.LINETO] * (len(points) - 1)
        ax.add_patch(
            FancyArrowPatch(
                path=Path(points, codes),
                arrowstyle="-|>",
                mutation_scale=12,
                color="#444444",
                linewidth=1.0,
                zorder=1,
                gid=f"edge-{e.source}-{e.target}",
            )
        )
        if e.uses > 1:
            (xa, ya), (xb, yb) = points[-2], points[-1]
            ax.text(
                (xa + xb) / 2 + 0.04,
                (ya + yb) / 2,
                f"used {e.uses}×",
                fontsize=8,
                color=PALETTE["vermillion"],
                ha="left",
                va="center",
                zorder=3,
            )
    ax.legend(
        handles=handles,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.12),
        ncol=3,
        fontsize="small",
        frameon=False,
    )
    return fig


def readout(data: GraphData) -> str:
    """The graph as text: its leaves, and every operation with the nodes it takes inputs from."""
    if data.empty:
        return (
            f"{data.description}: no grad_fn, so there is no graph (backward() has nothing to walk)"
        )
    tag = {n.index: f"[{n.index}] {n.label}" for n in data.nodes}
    leaves = [n.name or n.label for n in data.leaves()]
    lines = [
        f"{data.description}: {len(data.ops())} operation(s), {len(leaves)} leaf tensor(s)"
        + (f": {', '.join(leaves)}" if leaves else ""),
        "each operation, from the inputs down to the output, with the nodes it takes inputs from:",
    ]
    for n in sorted(data.ops(), key=lambda n: (n.row, -n.index)):
        ins = [
            tag[e.source] + (f" (used {e.uses}×)" if e.uses > 1 else "")
            for e in data.edges
            if e.target == n.index
        ]
        lines.append(
            f"  {tag[n.index]} <- {', '.join(ins) if ins else '(nothing that needs grad)'}"
        )
    return "\n".join(lines)


# What an example function returns: the tensor to draw, or the tensor and names for its leaves.
Example = torch.Tensor | tuple[torch.Tensor, Mapping[str, torch.Tensor]]


def _fresh_examples() -> dict[str, Callable[[], Example]]:
    """The widget's own expressions: each call builds new tensors, so nothing a notebook rebinds
    later (``w = ...``) can change what the widget draws."""

    def leaves() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        w = torch.tensor([0.5, -1.0, 2.0], requires_grad=True)
        b = torch.tensor(0.1, requires_grad=True)
        return w, b, torch.tensor([1.0, 2.0, 3.0])

    def affine() -> Example:
        w, b, x = leaves()
        return (w * x).sum() + b, {"w": w, "b": b}

    def squared() -> Example:
        w, _, _ = leaves()
        return (w * w).sum(), {"w": w}

    def tanh_squared() -> Example:
        w, b, x = leaves()
        return torch.tanh(w @ x + b) ** 2, {"w": w, "b": b}

    def linear_layer() -> Example:
        with torch.random.fork_rng(devices=[]):  # the student's random numbers stay untouched
            torch.manual_seed(0)
            layer = torch.nn.Linear(3, 2)
        return layer(leaves()[2]).sum(), dict(layer.named_parameters())

    def scaled_leaf() -> Example:
        return torch.ones(3, requires_grad=True) * 0.01, {}

    def nothing_tracked() -> Example:
        return leaves()[2] * 2, {}

    return {
        "(w * x).sum() + b": affine,
        "(w * w).sum()   (w used twice)": squared,
        "torch.tanh(w @ x + b) ** 2": tanh_squared,
        "layer(x).sum()   (a linear layer)": linear_layer,
        "torch.ones(3, requires_grad=True) * 0.01   (not a leaf)": scaled_leaf,
        "x * 2   (nothing requires grad)": nothing_tracked,
    }


#: The expressions ``show_graph()`` offers when it is given none.
EXAMPLES = _fresh_examples()


def draw_example(
    label: str,
    make: Callable[[], Example],
    names: Mapping[str, torch.Tensor] | None = None,
):
    """Run ``make()`` (a fresh forward pass) and draw its graph: ``(figure, readout text)``.

    ``make`` returns a tensor or ``(tensor, names)``. Whatever goes wrong (the expression raises,
    it returns something that is not a tensor) is drawn as a message naming the error, so the
    widget never keeps showing the previous picture.
    """
    try:
        made = make()
        if isinstance(made, tuple):
            tensor, own = made
            names = {**(names or {}), **own}
        else:
            tensor = made
        data = graph_data(tensor, names)
    except Exception as error:  # shown to the student instead of a stale picture
        message = f"Could not draw {label}:\n{type(error).__name__}: {error}"
        fig, ax = new_figure(width=6.5, height=2.6)
        ax.set_title(f"Graph of {label}")
        return _message(ax, message, PALETTE["vermillion"]), message
    return plot_graph(data, title=f"Graph of {label}"), readout(data)


def show_graph(
    examples: Mapping[str, Callable[[], Example]] | None = None,
    names: Mapping[str, torch.Tensor] | None = None,
):
    """A dropdown of example expressions; picking one rebuilds it and redraws its graph.

    ``examples`` maps a label to a zero-argument function returning a tensor, or a tensor and the
    names of its leaves (``(y, {"w": w})``), so every pick runs a fresh forward pass on tensors
    the function made itself; ``names`` labels leaves for every example, as in
    :func:`graph_data`. Without ``examples`` the widget shows its own (:data:`EXAMPLES`).
    """
    import ipywidgets as widgets

    examples = EXAMPLES if examples is None else examples
    if not examples:
        raise ValueError("show_graph needs at least one example expression")
    for label, make in examples.items():
        if not callable(make):
            raise TypeError(f"examples[{label!r}] should be a function of no arguments")
    dropdown = widgets.Dropdown(
        options=list(examples), description="expression", layout=widgets.Layout(width="max-content")
    )

    def draw(expression: str):
        return draw_example(expression, examples[expression], names)

    return interactive_plot({"expression": dropdown}, draw, "Computational graph")
