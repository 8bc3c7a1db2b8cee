"""Hidden tests read facts through torch's and Python's own classes (course.lesson.hardened): an
answer that shadows a method on the probe's objects, gives them another class, or returns a
container or tensor subclass that lies gets the facts as they are; honest objects read as usual."""

from __future__ import annotations

import json

import pytest
import torch

from course.grading import probes as grading
from course.lesson import probes


def _records(source: str, **answers) -> list[dict]:
    return json.loads(probes.collect(source, answers))


def _facts(source: str, **answers) -> dict:
    """The one probe's record, as plain data (a tensor as its dict)."""
    (result,) = _records(source, **answers)
    assert "record" in result, result
    return {k: v for k, v in result["record"]["dict"].items()}


class Liar(torch.Tensor):
    """A tensor class that lies to attribute reads and to torch's functions."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in ("item", "equal", "sum"):
            return 42.0 if func.__name__ != "equal" else True
        with torch._C.DisableTorchFunction():
            return func(*args, **(kwargs or {}))

    @property
    def grad(self):
        return None

    @property
    def requires_grad(self):
        return False

    def __len__(self):
        return 99


GRAD_FACTS = """
@probe("facts of a tensor after the call")
def _(touch):
    t = torch.ones(3, requires_grad=True)
    t.grad = torch.full((3,), 2.0)
    touch(t)
    return {"grad is None": t.grad is None, "requires grad": t.requires_grad,
            "item": t.sum().item(), "length": len(t), "equal": torch.equal(t, t * 0)}
"""
HONEST_GRAD_FACTS = {
    "grad is None": False,
    "requires grad": True,
    "item": 3.0,
    "length": 3,
    "equal": False,
}


def _reclass(t):
    object.__setattr__(t, "__class__", Liar)


def _shadow(t):
    t.sum = lambda: torch.tensor(42.0)
    t.item = lambda: 42.0


@pytest.mark.parametrize(
    "touch", [lambda t: None, _reclass, _shadow], ids=["honest", "reclass", "shadow"]
)
def test_a_tensors_facts_are_read_from_torch_whatever_its_class_or_instance_says(touch):
    assert _facts(GRAD_FACTS, touch=touch) == HONEST_GRAD_FACTS


def test_the_forgeries_work_on_unhardened_code():
    """The known-bad fixture: read the ordinary way, the same tensors lie."""
    t = torch.ones(3, requires_grad=True)
    t.grad = torch.full((3,), 2.0)
    _reclass(t)
    assert t.grad is None and t.requires_grad is False and len(t) == 99
    u = torch.ones(3)
    _shadow(u)
    assert u.item() == 42.0


MODULE_FACTS = """
@probe("a model's parameters and modes after the call")
def _(touch):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(), torch.nn.Linear(2, 1))
    model[2].weight = model[0].weight  # shared: listed once, as torch lists it
    for p in model.parameters():
        p.grad = torch.ones_like(p)
    touch(model)
    return {"names": [n for n, _ in model.named_parameters()],
            "grads kept": [p.grad is not None for p in model.parameters()],
            "modes": [m.training for m in model.modules()],
            "children": len(list(model.children())),
            "top level only": [n for n, _ in model.named_parameters(recurse=False)],
            "prefixed": [n for n, _ in model.named_modules(prefix="net")]}
"""


def _torch_says() -> dict:
    """The same facts read by nn.Module's own methods on an untouched model."""
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(), torch.nn.Linear(2, 1))
    model[2].weight = model[0].weight
    return {
        "names": [n for n, _ in model.named_parameters()],
        "grads kept": [True] * len(list(model.parameters())),
        "modes": [m.training for m in model.modules()],
        "children": len(list(model.children())),
        "top level only": [n for n, _ in model.named_parameters(recurse=False)],
        "prefixed": [n for n, _ in model.named_modules(prefix="net")],
    }


def _plain(facts: dict) -> dict:
    return {k: [x for x in v["list"]] if isinstance(v, dict) else v for k, v in facts.items()}


def test_an_untouched_models_walks_read_as_torch_reads_them():
    assert _plain(_facts(MODULE_FACTS, touch=lambda m: None)) == _torch_says()


def _stand_ins(model):
    """Break the clauses (eval mode, .grad wiped), then shadow the walks with what was before."""
    before_modes = [m.training for m in model.modules()]
    kept = list(model.named_parameters())
    for p in model.parameters():
        p.grad = None
    model.eval()
    fakes = [torch.nn.Module() for _ in before_modes]
    for fake, mode in zip(fakes, before_modes):
        fake.training = mode
    model.named_modules = lambda *a, **k: iter(list(zip(map(str, range(len(fakes))), fakes)))
    model.named_parameters = lambda *a, **k: iter(
        [(n, torch.nn.Parameter(p.detach(), requires_grad=True)) for n, p in kept]
    )
    for n, p in model.named_parameters():
        p.grad = torch.ones_like(p)


def test_instance_attributes_that_shadow_a_models_walks_are_not_what_the_probe_reads():
    facts = _plain(_facts(MODULE_FACTS, touch=_stand_ins))
    assert facts["modes"] == [False, False, False, False]
    assert facts["grads kept"] == [False, False, False]


class LyingList(list):
    def __iter__(self):
        return iter([1, 2, 3])

    def __len__(self):
        return 3

    def __getitem__(self, index):
        return 1


class LyingFloat(float):
    def __float__(self):
        return 4.0


CONTAINERS = """
@probe("what an answer returned, read by the probe")
def _(answer):
    found, loss = answer()
    return {"items": [x for x in found], "length": len(found), "first": found[0],
            "as list": list(found), "sum": sum(found), "loss": float(loss)}
"""


def test_a_returned_subclass_of_a_builtin_is_read_through_the_builtins_own_methods():
    facts = _facts(CONTAINERS, answer=lambda: (LyingList([7, 8]), LyingFloat(0.5)))
    assert facts["length"] == 2 and facts["first"] == 7 and facts["sum"] == 15
    assert facts["items"]["list"] == [7, 8] and facts["loss"] == 0.5
    honest = _facts(CONTAINERS, answer=lambda: ([7, 8], 0.5))
    assert facts == honest


CONVERSIONS = """
@probe("conversions as Python gives them")
def _(answer):
    t = answer()
    return {"float": float(t), "int of a float": int(2.5), "float of a string": float("nan") != 0,
            "bool": bool(t), "len of a string": len("abc"), "int of a string": int("12"),
            "min": min([3, 1]), "max of two": max(2, 5), "every other": [1, 2, 3][::2],
            "last column": torch.arange(6).reshape(2, 3)[..., -1:].flatten().tolist()}
"""


def test_conversions_and_builtins_keep_their_meaning():
    facts = _facts(CONVERSIONS, answer=lambda: torch.tensor(1.5))
    assert facts == {
        "float": 1.5,
        "int of a float": 2,
        "float of a string": True,
        "bool": True,
        "len of a string": 3,
        "int of a string": 12,
        "min": 1,
        "max of two": 5,
        "every other": {"list": [1, 3], "kind": "list"},
        "last column": {"list": [2, 5], "kind": "list"},
    }


MODE_INSIDE = """
@probe("an answer that uses torch's device context")
def _(make):
    return {"made": make()}
"""


def test_the_answer_runs_with_torch_function_overrides_as_in_the_notebook():
    def make():
        with torch.device("cpu"):
            on = torch._C._is_torch_function_enabled()
            return torch.ones(2) * (2 if on else 0)

    (result,) = _records(MODE_INSIDE, make=make)
    assert result["record"]["dict"]["made"]["values"] == [2.0, 2.0]


STEPS = """
@probe("updates per call")
def _(train):
    model = torch.nn.Linear(2, 1)
    frozen = torch.nn.Linear(2, 1).requires_grad_(False)
    optimizer = torch.optim.SGD(list(model.parameters()) + list(frozen.parameters()), lr=0.1)
    params = list(model.parameters()) + list(frozen.parameters())
    counts = []
    for _ in range(2):
        versions = [p._version for p in params]
        train(model, optimizer)
        counts.append(updates(params, versions))
    return {"updates": counts}
"""


def _one_step(model, optimizer):
    optimizer.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    optimizer.step()


def _two_half_steps(model, optimizer):
    optimizer.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    for group in optimizer.param_groups:
        group["lr"] /= 2
    optimizer.step()
    type(optimizer).step.__wrapped__(optimizer)  # no step hook runs
    for group in optimizer.param_groups:
        group["lr"] *= 2


def _step_then_no_op(model, optimizer):
    _one_step(model, optimizer)
    optimizer.zero_grad(set_to_none=True)
    optimizer.step()  # every .grad is None: SGD changes nothing


@pytest.mark.parametrize(
    "train, expected",
    [(_one_step, [1, 1]), (_two_half_steps, [2, 2]), (_step_then_no_op, [1, 1])],
    ids=["one step", "a raw second step", "a second step with nothing to apply"],
)
def test_updates_count_what_changed_the_parameters_however_step_was_reached(train, expected):
    assert _facts(STEPS, train=train)["updates"]["list"] == expected


def test_a_judged_forgery_of_an_updated_count_fails():
    want = _records(STEPS, train=_one_step)
    assert grading.judge(_records(STEPS, train=_two_half_steps), want)
    assert grading.judge(_records(STEPS, train=_step_then_no_op), want) == []


def test_store_and_delete_are_left_as_written():
    source = """
@probe("a probe that assigns attributes")
def _(answer):
    t = torch.zeros(2, requires_grad=True)
    t.grad = torch.ones(2)
    del t.grad
    model = torch.nn.Linear(1, 1)
    model.train(False)
    return {"grad": t.grad, "training": model.training, "answer": answer()}
"""
    facts = _facts(source, answer=lambda: 1)
    assert facts == {"grad": None, "training": False, "answer": 1}


class LyingTorch(type(torch)):
    """A class for torch's module object whose property answers before the module's own name."""

    @property
    def is_grad_enabled(self):
        return lambda: False


GRAD_MODE_IN_THE_CALL = """
@probe("grad mode while the answer's callback runs")
def _(answer):
    seen = []
    answer(lambda: seen.append(torch.is_grad_enabled()))
    return {"tracking": seen}
"""


def _under_a_lying_class(callback):
    """Tracking stays on; torch's module object is given a lying class while the callback runs."""
    object.__setattr__(torch, "__class__", LyingTorch)
    try:
        callback()
    finally:
        object.__setattr__(torch, "__class__", type(json))


def test_a_class_given_to_torchs_module_object_is_not_what_the_probe_reads_and_is_tampering():
    honest = _records(GRAD_MODE_IN_THE_CALL, answer=lambda callback: callback())
    assert honest[0]["record"]["dict"]["tracking"]["list"] == [True]
    # The probe reads torch's own name: the property is never consulted (the same read done the
    # ordinary way is fooled, the known-bad case), and the class swap is seen at the checkpoint.
    fooled = []
    _under_a_lying_class(lambda: fooled.append(torch.is_grad_enabled()))
    assert fooled == [False]
    source = GRAD_MODE_IN_THE_CALL.replace("seen.append(", "seen.append(checkpoint() or ")
    (forged,) = _records(source, answer=_under_a_lying_class)
    assert forged["tampered"] == ["torch.__class__"]
    (unseen,) = _records(GRAD_MODE_IN_THE_CALL, answer=_under_a_lying_class)
    assert unseen["record"]["dict"]["tracking"]["list"] == [True]


WEIGHT = """
@probe("a linear model's weight after the call")
def _(touch):
    model = torch.nn.Linear(1, 1, bias=False)
    with torch.no_grad():
        model.weight.fill_(1.0)
    touch(model)
    return {"weight": model.weight.item(), "layer": model.weight is model._parameters["weight"]}
"""


def _shadow_weight(model):
    """The real weight made wrong; a right-looking one put beside it in the instance dict
    (object.__setattr__ skips nn.Module's own bookkeeping, as the sixth red team did)."""
    with torch.no_grad():
        model.weight.fill_(-5.0)
    object.__setattr__(model, "weight", torch.nn.Parameter(torch.ones(1, 1)))


def test_a_parameter_is_read_where_nn_module_keeps_it_not_from_an_instance_attribute():
    assert _facts(WEIGHT, touch=lambda m: None) == {"weight": 1.0, "layer": True}
    assert _facts(WEIGHT, touch=_shadow_weight) == {"weight": -5.0, "layer": True}
    model = torch.nn.Linear(1, 1, bias=False)
    _shadow_weight(model)  # the known-bad case: ordinary code reads the shadow
    assert model.weight.item() == 1.0
