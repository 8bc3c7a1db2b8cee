"""The probes as they run in a kernel (course.lesson.probes): plain data out, inputs drawn per
submission, the same starting state for every probe, and, outside the grader, a probe that runs
at once and fails only when the call raises."""

from __future__ import annotations

import json

import pytest
import torch

from course.lesson import probes
from course.lesson.checks import CheckFailed

DOUBLE = """
@probe("double of a vector", hints={"result": "multiply by two."})
def _(double):
    return {"result": double(torch.tensor([1.0, 2.0]))}
"""


def _records(source: str, draw: int = 0, **answers) -> list[dict]:
    return json.loads(probes.collect(source, answers, draw))


def test_probes_see_none_of_the_notebooks_state():
    found = _records(
        '@probe("uses a lesson helper")\ndef _(double):\n    return expect_close\n',
        double=lambda x: x,
    )
    assert found[0]["raised"] == "NameError"


def test_a_probe_run_in_a_notebook_fails_only_when_the_call_raises():
    """Outside the grader (the source notebook, stock nbgrader) a probe runs at once."""
    namespace = {"probe": probes.probe, "torch": torch, "double": lambda x: x * 2}
    exec(DOUBLE, namespace)  # the reference: passes
    namespace["double"] = lambda x: 1 / 0
    with pytest.raises(CheckFailed, match="ZeroDivisionError"):
        exec(DOUBLE, namespace)
    namespace["double"] = lambda x: (_ for _ in ()).throw(NotImplementedError())
    with pytest.raises(NotImplementedError):
        exec(DOUBLE, namespace)


DRAWN = """
@probe("drawn inputs")
def _(f):
    manual_seed(3)
    return {"generator": f(torch.randn(2, generator=seeded(7))), "global": torch.randn(2)}
"""


def test_inputs_are_drawn_per_submission_and_draw_zero_is_the_sources():
    runs = {d: _records(DRAWN, d, f=lambda t: t)[0]["record"]["dict"] for d in (0, 1, 2, 1)}
    first = {d: tuple(r["generator"]["values"]) for d, r in runs.items()}
    assert len(set(first.values())) == 3, "each draw its own inputs"
    assert first[0] == tuple(torch.randn(2, generator=torch.Generator().manual_seed(7)).tolist())
    torch.manual_seed(3)
    assert runs[0]["global"]["values"] == torch.randn(2).tolist()
    assert runs[1]["global"]["values"] != runs[0]["global"]["values"]
    assert probes.seeded(7).initial_seed() == 7, "after the probes: the source's inputs again"


def test_every_probe_starts_from_the_same_state():
    """An answer may leave grad mode off, anomaly mode on or the seed moved: the next probe
    starts as the reference's did."""
    source = """
@probe("a careless answer")
def _(careless):
    careless()
    return 0

@probe("the state the next probe finds")
def _(state):
    return state()
"""

    def careless():
        torch.set_grad_enabled(False)
        torch.autograd.set_detect_anomaly(True)
        torch.manual_seed(99)

    def state():
        return [torch.is_grad_enabled(), torch.is_anomaly_enabled(), torch.randn(1).item()]

    try:
        found = _records(source, careless=careless, state=state)
    finally:
        torch.set_grad_enabled(True)
        torch.autograd.set_detect_anomaly(False)
    torch.manual_seed(0)
    assert found[1]["record"] == {"list": [True, False, torch.randn(1).item()], "kind": "list"}


MEMORY = """
@probe("memory shared with the input")
def _(alias):
    t = torch.arange(6.0)[2:]
    return {"shares": same_memory(alias(t), t)}
"""


def test_memory_is_shared_by_the_bytes_two_tensors_span_not_by_their_storage_object():
    """A second storage over the same bytes (through numpy) shares memory too."""
    for alias, shares in [
        (lambda t: torch.from_numpy(t.numpy()), True),
        (lambda t: t[1:], True),
        (lambda t: t.clone(), False),
    ]:
        assert _records(MEMORY, alias=alias)[0]["record"]["dict"]["shares"] is shares
    t = torch.arange(6.0)[2:]  # the known-bad case: comparing the storages' first bytes
    other = torch.from_numpy(t.numpy())
    assert other.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


def test_an_error_whose_text_cannot_be_read_is_still_the_answers_error():
    class Unreadable(Exception):
        def __str__(self):
            raise RuntimeError("no")

    def raises():
        raise Unreadable()

    (found,) = _records('@probe("t")\ndef _(f):\n    return f()\n', f=raises)
    assert found["raised"] == "Unreadable" and found["message"] == ""
