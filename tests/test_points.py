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
from pathlib import Path

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
def made(tmp_path_factory) -> dict[str, dict[int, dict[str, list]]]:
    """assignment -> draw -> grade id -> the reference's records, made by the real route (one
    trusted kernel per notebook)."""
    cache = tmp_path_factory.mktemp("references")
    return {
        a: reference.records(REPO / "source" / a / f"{a}.ipynb", cache / a, DRAWS)
        for a in sorted(CONTRACT)
    }


def _graded(record: dict) -> dict:
    """A probe's record without its teaching keys, by key ("" for a record that is no dict)."""
    value = record["record"]
    if isinstance(value, dict) and "dict" in value:
        return {k: v for k, v in value["dict"].items() if k not in record["teaching"]}
    return {"": value}


def _blocks(made):
    for assignment, by_draw in made.items():
        for grade_id, _ in _cells(assignment):
            if not grade_id.startswith("test_quick_check"):  # a letter: secret, not drawn
                yield assignment, grade_id, {d: by_draw[d][grade_id] for d in DRAWS}


def test_every_probe_draws_its_inputs_per_submission(made):
    fixed = []
    for assignment, grade_id, by_draw in _blocks(made):
        for index, first in enumerate(by_draw[DRAWS[0]]):
            seen = {
                json.dumps(records[index]["record"], sort_keys=True) for records in by_draw.values()
            }
            if len(seen) == 1:
                fixed.append(f"{assignment} {grade_id}: {first['title']}")
    assert not fixed, "these probes record the same on every draw:\n" + "\n".join(fixed)


def test_no_graded_key_has_one_right_value(made):
    constant = []
    for assignment, grade_id, by_draw in _blocks(made):
        values: dict[str, set[str]] = {}
        for records in by_draw.values():
            for record in records:
                for key, value in _graded(record).items():
                    values.setdefault(key, set()).add(json.dumps(value, sort_keys=True))
        constant += [
            f"{assignment} {grade_id}: {k!r}" for k, seen in values.items() if len(seen) < 2
        ]
    assert not constant, (
        "graded keys with one right value (make them teaching lines):\n" + "\n".join(constant)
    )


def test_titles_are_unique_in_each_block(made):
    for assignment, grade_id, by_draw in _blocks(made):
        titles = [r["title"] for r in by_draw[DRAWS[0]]]
        assert len(titles) == len(set(titles)), (assignment, grade_id)


def test_every_teaching_key_says_why(made):
    for assignment, grade_id, by_draw in _blocks(made):
        for record in by_draw[DRAWS[0]]:
            for key, line in record["teaching"].items():
                assert isinstance(line, str) and len(line) > 20, (grade_id, record["title"], key)


def _raise(*args, **kwargs):
    raise RuntimeError("nothing here")


def _raise_key_error(*args, **kwargs):
    raise KeyError("weight")


def _raise_key_error_naming_every_name(model, trainable):
    raise KeyError(repr(sorted(trainable)))  # names the unknown one too, whichever it is


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
    "grad_history": {"returns []": lambda loss_fn, w, n: []},
    "train_step": {"returns 0.0": lambda *args: 0.0},
    "accumulation_step": {"returns 0.0": lambda *args: 0.0},
    "zero_grads": {},
    "grad_report": {
        "labels everything ok": lambda model, explode_at=1e3: {
            name: "ok" for name, _ in model.named_parameters()
        }
    },
    "predict": {"returns zeros": lambda model, x: torch.zeros(1)},
    "sgd_update": {},
    "evaluate": {"returns 0.0": lambda *args: 0.0},
}


def _trivial_cases():
    for assignment, exercises in sorted(CONTRACT.items()):
        for exercise in exercises:
            for kind, answer in {**NOTHING, **OF_ITS_KIND[exercise]}.items():
                yield pytest.param(assignment, exercise, answer, id=f"{exercise}: {kind}")


@pytest.mark.parametrize("assignment, exercise, answer", list(_trivial_cases()))
def test_an_answer_that_computes_nothing_fails_every_cell(made, assignment, exercise, answer):
    cells = [(g, code) for g, code in _cells(assignment) if g.startswith(f"test_{exercise}")]
    assert cells, f"{exercise} has no test cell with hidden tests"
    for draw in DRAWS:
        for grade_id, code in cells:
            got = json.loads(probes.collect(code, {exercise: answer}, draw))
            verdict = judging.judge(got, made[assignment][draw][grade_id])
            assert verdict.problems, f"{grade_id} passed on draw {draw}"


def test_the_check_of_constants_finds_one(made):
    """The known-bad case: a record whose graded key is a flag that is always False."""
    records = [
        {"title": "t", "teaching": {}, "record": {"dict": {"flag": False, "v": float(d)}}}
        for d in DRAWS
    ]
    values = {json.dumps(_graded(r)["flag"]) for r in records}
    assert len(values) == 1  # what test_no_graded_key_has_one_right_value refuses


def test_the_draw_changes_the_inputs_and_zero_is_the_instructors():
    assert probes.seeded(5).initial_seed() == 5  # outside the grader: the source's inputs
    block = '@probe("x")\ndef _(f):\n    return f(torch.randn(3, generator=seeded(5)))\n'
    runs = {d: json.loads(probes.collect(block, {"f": lambda t: t}, d)) for d in (0, 1, 2)}
    values = {d: tuple(r[0]["record"]["values"]) for d, r in runs.items()}
    assert len(set(values.values())) == 3
    assert values[0] == tuple(torch.randn(3, generator=torch.Generator().manual_seed(5)).tolist())


def test_the_reference_is_made_once_per_draw(tmp_path, monkeypatch):
    source = REPO / "source" / "02_backward" / "02_backward.ipynb"
    runs = []
    real = reference._run
    monkeypatch.setattr(reference, "_run", lambda *a, **k: runs.append(a[1]) or real(*a, **k))
    first = reference.records(source, tmp_path, [21, 22])
    again = reference.records(source, tmp_path, [22, 21, 23])
    assert runs == [[21, 22], [23]]  # one kernel for both draws; the third made alone, later
    assert first[21] == again[21] and set(again) == {21, 22, 23}
    assert Path(reference.version_dir(source, tmp_path)).is_dir()
