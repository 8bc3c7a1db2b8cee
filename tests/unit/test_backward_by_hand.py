"""02_backward's `backward_by_hand`: the hidden tests' graphs are the notebook's `Value` graphs,
and on them the reference walk gives what torch's `backward()` gives, so grading against the
reference is grading against torch.

The hidden blocks build their graphs with `Node`, a copy of the locked cell's `Value` (a hidden
block sees none of the notebook's names). Each graph drawn there is rebuilt in float64 tensors,
node by node from its operations, and torch's `backward()` (with `retain_grad()` on the results)
is the oracle for every node's `.grad`.
"""

from __future__ import annotations

import math
import re

import nbformat
import pytest
import torch

from course.grading import hidden
from course.lesson import probes
from course_testing import REPO

SOURCE = REPO / "source" / "02_backward" / "02_backward.ipynb"
TORCH_OPS = {"+": torch.add, "*": torch.mul, "sin": torch.sin, "tanh": torch.tanh, "exp": torch.exp}


def _cell(grade_id: str) -> str:
    nb = nbformat.read(SOURCE, as_version=4)
    return next(c.source for c in nb.cells if c.metadata["nbgrader"]["grade_id"] == grade_id)


def _class_source(code: str, name: str) -> str:
    found = re.search(rf"^class {name}:\n(?:(?:    .*)?\n)+", code + "\n", re.M)
    assert found, f"no class {name}"
    return found[0].rstrip()


def _hidden_helpers(grade_id: str) -> dict:
    """What a hidden block defines (Node, drawn_graph, ...), its probes left unrun."""
    _, block = hidden.split_hidden(_cell(grade_id))
    namespace = {
        "torch": torch,
        "math": math,
        "seeded": probes.seeded,
        "manual_seed": probes.manual_seed,
        "probe": lambda *args, **kwargs: lambda fn: fn,
    }
    exec(compile(block, f"<hidden block of {grade_id}>", "exec"), namespace)
    return namespace


def _reference():
    solution = re.sub(r"[ \t]*### (BEGIN|END) SOLUTION\n", "", _cell("backward_by_hand"))
    namespace = {}
    exec(solution, namespace)
    return namespace["backward_by_hand"]


def _share_replaces_grad(output):
    """A known-bad walk: each share replaces the one before (=, not +=)."""
    order, seen = [], set()

    def visit(node):
        if node not in seen:
            seen.add(node)
            for parent, _ in node.parents:
                visit(parent)
            order.append(node)

    visit(output)
    output.grad = 1.0
    for node in reversed(order):
        for parent, local in node.parents:
            parent.grad = local * node.grad


def _torch_grads(output) -> dict[int, float]:
    """id(node) -> d output / d node, from torch's backward() on the graph rebuilt in tensors."""
    tensors: dict[int, torch.Tensor] = {}

    def rebuild(node) -> torch.Tensor:
        if id(node) not in tensors:
            if node.is_leaf:
                made = torch.tensor(node.data, dtype=torch.float64, requires_grad=True)
            else:
                inputs = [rebuild(parent) for parent, _ in node.parents]
                if node.op.startswith("** "):
                    made = inputs[0] ** float(node.op[3:])
                else:
                    made = TORCH_OPS[node.op](*inputs)
                made.retain_grad()
            tensors[id(node)] = made
        return tensors[id(node)]

    rebuild(output).backward()
    return {key: t.grad.item() for key, t in tensors.items()}


def _disagreements(walk, helpers, seeds) -> list[str]:
    """Nodes of graphs drawn as the hidden tests draw them where ``walk`` and torch differ."""
    found = []
    for seed in seeds:
        gen = torch.Generator().manual_seed(seed)
        leaves, results, output, text = helpers["drawn_graph"](gen, 2 + seed % 3, 4 + seed % 5)
        walk(output)
        want = _torch_grads(output)
        for node in leaves + results:
            if not math.isclose(node.grad, want[id(node)], rel_tol=1e-9, abs_tol=1e-12):
                found.append(f"seed {seed}: {text}: got {node.grad}, torch {want[id(node)]}")
    return found


@pytest.mark.parametrize("grade_id", ["test_backward_by_hand", "test_backward_by_hand_accumulates"])
def test_the_hidden_graphs_are_made_of_the_notebooks_value_class(grade_id):
    value = _class_source(_cell("value_class"), "Value")
    node = _class_source(hidden.split_hidden(_cell(grade_id))[1], "Node")
    docstring = re.compile(r'    """.*?"""\n', re.S)
    assert docstring.sub("", node.replace("Node", "Value")) == docstring.sub("", value)


@pytest.mark.parametrize("grade_id", ["test_backward_by_hand", "test_backward_by_hand_accumulates"])
def test_the_reference_walk_gives_torchs_gradients_on_the_hidden_graphs(grade_id):
    assert _disagreements(_reference(), _hidden_helpers(grade_id), range(200)) == []


def test_a_walk_that_replaces_shares_disagrees_with_torch():
    """The known-bad case: the comparison with torch finds a wrong walk."""
    assert _disagreements(_share_replaces_grad, _hidden_helpers("test_backward_by_hand"), range(20))
