"""Where points come from: values computed on hidden inputs drawn per submission, nothing a kernel
could state without solving (docs/grading-security.md).

For every test cell of the source notebooks, from the reference's own records on a few draws:
- the probes' inputs differ from draw to draw (a classmate's feedback page is no answer key);
- every graded key of the cell takes more than one value, across its probes and draws, so no
  blanket answer (a constant, None, an error) can match it; a key whose right value is always
  the same (a flag, a count, an error's type) is a teaching line;
- answers that compute nothing (return None, their first argument, a constant; always raise)
  fail every cell of their exercise on every draw.
"""

from __future__ import annotations

import json

import nbformat
import pytest
import torch

from course.grading import hidden, judging, reference
from course.lesson import probes
from course_testing import CONTRACT, REPO

DRAWS = [11, 12, 13, 14]  # a few submissions' draws (fixed: the test is the same every run)


def _cells(assignment: str) -> list[tuple[str, str]]:
    source = REPO / "source" / assignment / f"{assignment}.ipynb"
    return hidden.test_cells(nbformat.read(source, as_version=4))


@pytest.fixture(scope="module")
def references(tmp_path_factory):
    """assignment -> draw -> grade id -> the reference's records, made by the real route (one
    trusted kernel per notebook), when a test first asks for that assignment."""
    cache, made = tmp_path_factory.mktemp("references"), {}

    def of(assignment: str) -> dict[int, dict[str, list]]:
        if assignment not in made:
            source = REPO / "source" / assignment / f"{assignment}.ipynb"
            made[assignment] = reference.records(source, cache / assignment, DRAWS)
        return made[assignment]

    return of


ASSIGNMENTS = sorted(CONTRACT)


def _graded(record: dict) -> dict:
    """A probe's record without its teaching keys, by key ("" for a record that is no dict)."""
    value = record["record"]
    if isinstance(value, dict) and "dict" in value:
        return {k: v for k, v in value["dict"].items() if k not in record["teaching"]}
    return {"": value}


def _blocks(by_draw: dict[int, dict[str, list]], assignment: str):
    """(grade id, draw -> records) of each test cell but the quick checks (a letter is a secret
    answer, not a drawn input)."""
    for grade_id, _ in _cells(assignment):
        if not grade_id.startswith("test_quick_check"):
            yield grade_id, {d: by_draw[d][grade_id] for d in DRAWS}


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_every_probe_draws_its_inputs_per_submission(references, assignment):
    fixed = []
    for grade_id, by_draw in _blocks(references(assignment), assignment):
        for index, first in enumerate(by_draw[DRAWS[0]]):
            seen = {
                json.dumps([records[index]["title"], records[index]["record"]], sort_keys=True)
                for records in by_draw.values()
            }
            if len(seen) == 1:
                fixed.append(f"{grade_id}: {first['title']}")
    assert not fixed, "these probes are the same on every draw:\n" + "\n".join(fixed)


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_no_graded_key_has_one_right_value(references, assignment):
    constant = []
    for grade_id, by_draw in _blocks(references(assignment), assignment):
        values: dict[str, set[str]] = {}
        for records in by_draw.values():
            for record in records:
                for key, value in _graded(record).items():
                    values.setdefault(key, set()).add(json.dumps(value, sort_keys=True))
        constant += [f"{grade_id}: {k!r}" for k, seen in values.items() if len(seen) < 2]
    assert not constant, "graded keys with one right value (teaching lines?):\n" + "\n".join(
        constant
    )


@pytest.mark.parametrize("assignment", ASSIGNMENTS)
def test_titles_are_unique_and_teaching_lines_say_why(references, assignment):
    for grade_id, by_draw in _blocks(references(assignment), assignment):
        titles = [r["title"] for r in by_draw[DRAWS[0]]]
        assert len(titles) == len(set(titles)), grade_id
        for record in by_draw[DRAWS[0]]:
            for key, line in record["teaching"].items():
                assert isinstance(line, str) and len(line) > 20, (grade_id, record["title"], key)


def _raise(*args, **kwargs):
    raise RuntimeError("nothing here")


def _raise_key_error(*args, **kwargs):
    raise KeyError("weight")


def _only_clear_grads(params, lr):
    for p in params:
        p.grad = None


def _only_zero_grads(params, lr):
    for p in params:
        if p.grad is not None:
            p.grad.zero_()


def _raise_key_error_naming_every_name(model, trainable):
    raise KeyError(repr(sorted(trainable)))  # names the unknown one too, whichever it is


def _only_seeds_the_output(output):
    output.grad += 1.0


def _adds_one_to_every_node(output):
    """As if every path from the output had derivative 1: each node's .grad gains 1."""
    todo, seen = [output], set()
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            node.grad += 1.0
            todo.extend(parent for parent, _ in node.parents)


# Answers that compute nothing, of every exercise's kind: each must fail every cell of it.
NOTHING = {
    "returns None": lambda *args, **kwargs: None,
    "returns its first argument": lambda first, *args, **kwargs: first,
    "always raises": _raise,
}
OF_ITS_KIND = {
    "make_trainable": {
        "a float32 copy that does not require grad": lambda v: torch.tensor(0.0),
        "a new 0-d float32 leaf that requires grad": lambda v: torch.zeros((), requires_grad=True),
    },
    "leaf_inputs": {"returns []": lambda y: [], "returns [y]": lambda y: [y]},
    "freeze_all_but": {
        "always raises KeyError": _raise_key_error,
        "returns 0": lambda m, t: 0,
        "always raises KeyError naming every name given": _raise_key_error_naming_every_name,
    },
    "derivative_at": {"returns 0.0": lambda f, x: 0.0},
    "second_derivative": {"returns 0.0": lambda f, x: 0.0},
    "vjp": {"returns zeros": lambda f, x, v: torch.zeros_like(x)},
    "backward_by_hand": {
        "only seeds the output with 1": _only_seeds_the_output,
        "adds 1 to every node's .grad": _adds_one_to_every_node,
    },
    "grad_history": {"returns []": lambda loss_fn, w, n: []},
    "train_step": {"returns 0.0": lambda *args: 0.0},
    "accumulation_step": {"returns 0.0": lambda *args: 0.0},
    "zero_grads": {},
    "grad_report": {
        "labels everything ok": lambda model, explode_at=1e3: {
            name: "ok" for name, _ in model.named_parameters()
        },
        **{
            f"labels everything {label}": lambda model, explode_at=1e3, label=label: {
                name: label for name, _ in model.named_parameters()
            }
            for label in ("dead", "exploding", "missing")
        },
    },
    "predict": {
        "returns zeros": lambda model, x: torch.zeros(1),
        "returns x": lambda model, x: x,
        "returns model(x) with tracking on": lambda model, x: model(x),
    },
    "sgd_update": {
        "only sets every .grad to None": _only_clear_grads,
        "only zeroes every .grad": _only_zero_grads,
    },
    "evaluate": {"returns 0.0": lambda *args: 0.0, "returns nan": lambda *args: float("nan")},
}


def _trivial_cases():
    for assignment, exercises in sorted(CONTRACT.items()):
        for exercise in exercises:
            for kind, answer in {**NOTHING, **OF_ITS_KIND[exercise]}.items():
                yield pytest.param(
                    assignment, exercise, answer, id=f"{assignment} {exercise}: {kind}"
                )


@pytest.mark.parametrize("assignment, exercise, answer", list(_trivial_cases()))
def test_an_answer_that_computes_nothing_fails_every_cell(references, assignment, exercise, answer):
    cells = [(g, code) for g, code in _cells(assignment) if g.startswith(f"test_{exercise}")]
    assert cells, f"{exercise} has no test cell with hidden tests"
    for draw in DRAWS:
        for grade_id, code in cells:
            got = json.loads(probes.collect(code, {exercise: answer}, draw))
            verdict = judging.judge(got, references(assignment)[draw][grade_id])
            assert verdict.problems, f"{grade_id} passed on draw {draw}"


def test_the_check_of_constants_finds_one():
    """The known-bad case: a record whose graded key is a flag that is always False."""
    records = [
        {"title": "t", "teaching": {}, "record": {"dict": {"flag": False, "v": float(d)}}}
        for d in DRAWS
    ]
    values = {json.dumps(_graded(r)["flag"]) for r in records}
    assert len(values) == 1  # what test_no_graded_key_has_one_right_value refuses
