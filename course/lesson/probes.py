"""Hidden tests as probes: draw inputs, call the exercise, describe the result as plain data.

Runs in: the grading kernel and the reference's kernel (the grader's calls), the instructor's or
a student's own kernel (a probe run at once).

A hidden test is written as probes, each a function whose parameters are named after what it
calls (an exercise, or a quick-check answer such as ``q1``). For an exercise ``scale(t, k)``::

    @probe("scale of a hidden vector", hints={"result": "multiply, do not add."},
           teaching={"input after the call": "scale must not change t: work on a copy."})
    def _(scale):
        t = torch.randn(5, dtype=torch.float64, generator=seeded(7))
        return {"result": scale(t, 3), "input after the call": t}

A probe holds no expected value. The grader (`course.grading.probes`) runs every probe twice: in
the student's kernel, with the student's answer, and in a trusted kernel, with the reference
solution, on the same inputs, and compares the two records in its own process. Inputs come from
`seeded` and `manual_seed`, which the grader draws anew for every submission (`draw`), so one
student's feedback ("expected ...") answers nothing on another's inputs. The keys of a record
named in ``teaching`` are facts any kernel could report without solving (a flag that is always
False, how often the answer called a function): the grader shows a difference there as a line
marked "not graded" and grades only the other keys, which hold what the answer computed.

A record is JSON: numbers, strings, bools, None, lists, dicts, and tensors described by their
dtype, shape, values and autograd facts. An object that is none of these (a subclass of tensor,
of float or of list included) is recorded by its plain value or its class name, so an object that
fakes comparisons never matches the reference's plain value. Run anywhere but in the grader (the
instructor's source notebook, a bare nbgrader configuration), a probe runs at once and fails
only when the call raises.
"""

from __future__ import annotations

import hashlib
import json
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch

from .checks import CheckFailed, choice

__all__ = ["probe", "seeded", "manual_seed", "same_memory", "shape_of", "updates"]

RECORDS_MIME = "application/vnd.autograd-course.records+json"
MAX_VALUES = 4096  # a larger tensor is recorded by its sum, sum of squares, min and max
MAX_DEPTH = 6
MAX_ITEMS = 256
MAX_MESSAGE = 300

_draw = 0  # the submission's draw while the grader's probes run; 0 anywhere else


def _mixed(key: int) -> int:
    """``key`` itself outside the grader (the inputs the instructor sees in the source), else a
    seed that depends on the submission's draw and ``key``."""
    if not _draw:
        return key
    digest = hashlib.sha256(f"{_draw}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def seeded(key: int) -> torch.Generator:
    """A CPU random generator for hidden inputs: the same for every regrade of a submission,
    another for every submission."""
    return torch.Generator().manual_seed(_mixed(key))


def manual_seed(key: int) -> None:
    """Seed torch's global generator (a model's initial weights, dropout) as `seeded` does."""
    torch.manual_seed(_mixed(key))


def _tensor(value: torch.Tensor, with_grad: bool = True) -> dict:
    data = value.detach()
    if data.is_complex():
        data = torch.view_as_real(data)
    if data.numel() <= MAX_VALUES:
        values = data.tolist()
    else:
        wide = data.to(torch.float64)
        summary = (torch.sum, _squares, torch.min, torch.max)
        values = {"summary": [f(wide).tolist() for f in summary]}
    described = {
        "tensor": str(value.dtype),
        "shape": list(value.shape),
        "values": values,
        "requires_grad": value.requires_grad,
        "is_leaf": value.is_leaf,
    }
    if with_grad:  # a result keeps no .grad unless asked to (reading it would warn)
        grad = value.grad if value.is_leaf or value.retains_grad else None
        described["grad"] = None if grad is None else _tensor(grad, with_grad=False)
    return described


def _squares(t: torch.Tensor) -> torch.Tensor:
    return torch.sum(t * t)


def record(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready plain data (see the module's docstring)."""
    kind = type(value)
    if value is None or kind is bool:
        return value
    if kind in (torch.Tensor, torch.nn.Parameter):
        return _tensor(value)
    if depth >= MAX_DEPTH:
        return {"object": "nested too deep"}
    # The base classes' own methods read the value, never a subclass's overrides.
    if issubclass(kind, int):
        return int.__int__(value)
    if issubclass(kind, float):
        return float.__float__(value)
    if issubclass(kind, str):
        return str.__str__(value)
    if issubclass(kind, (list, tuple)):
        base = list if issubclass(kind, list) else tuple
        items = base.__getitem__(value, slice(0, MAX_ITEMS))
        return {"list": [record(v, depth + 1) for v in items], "kind": base.__name__}
    if issubclass(kind, dict):
        pairs = [(k, dict.__getitem__(value, k)) for k in dict.keys(value)][:MAX_ITEMS]
        if all(type(k) is str for k, _ in pairs):
            return {"dict": {k: record(v, depth + 1) for k, v in pairs}}
        return {"object": "dict with keys that are not strings"}
    if kind is torch.dtype:
        return {"dtype": str(value)}
    return {"object": kind.__qualname__}


def shape_of(t: torch.Tensor) -> tuple[int, ...]:
    """A tensor's shape as a tuple of ints."""
    return tuple(int(n) for n in t.shape)


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' memory overlaps, by the bytes their storages span (not by which
    storage object holds them: ``torch.from_numpy(t.numpy())`` is a second storage over t's
    bytes)."""
    spans = []
    for t in (a, b):
        storage = t.untyped_storage()
        spans.append((storage.data_ptr(), storage.data_ptr() + storage.nbytes()))
    (a_start, a_end), (b_start, b_end) = spans
    return a_start < b_end and b_start < a_end


def updates(params: list[torch.Tensor], versions: list[int]) -> int:
    """How many times the most changed of ``params`` was changed in place since its version
    counter read ``versions`` (``[p._version for p in params]``): an optimizer step changes each
    parameter that has a gradient once."""
    return max([p._version - v for p, v in zip(params, versions)], default=0)


def _parameters(fn: Callable) -> list[str]:
    """The names a probe asks for: its parameters without a default (a default binds a loop's
    value, e.g. ``def _(make_trainable, n=n)``)."""
    code = fn.__code__
    return list(code.co_varnames[: code.co_argcount - len(fn.__defaults__ or ())])


def _message(error: BaseException) -> str:
    try:
        return str(error)[:MAX_MESSAGE]
    except Exception:  # an error whose text cannot be read is still the answer's error
        return ""


def run(fn: Callable, namespace: dict) -> dict:
    """Call one probe with what its parameters name in ``namespace``: ``{"record": ...}``,
    ``{"raised": <error type>, "message": ...}`` or ``{"missing": <name>}``. Every probe starts
    from the same global state (seed, grad mode, anomaly mode off), whatever the one before it
    did."""
    arguments = []
    for name in _parameters(fn):
        if name not in namespace:
            return {"missing": name}
        arguments.append(namespace[name])
    torch.manual_seed(0)
    torch.set_grad_enabled(True)
    torch.set_anomaly_enabled(False)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a warning is never a failure
            return {"record": record(fn(*arguments))}
    except KeyboardInterrupt:  # the grader's time limit: it stops the probes
        raise
    except BaseException as error:  # the answer's error (any class) is a result, not a crash
        return {"raised": type(error).__name__, "message": _message(error)}


def _options(hints, teaching, rtol: float, atol: float) -> dict:
    hints, teaching = dict(hints or {}), dict(teaching or {})
    return {"hints": hints, "teaching": teaching, "rtol": rtol, "atol": atol}


class _Collector:
    """The ``probe`` decorator while the grader collects records: it runs each probe in turn."""

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.results: list[dict] = []

    def __call__(self, title: str, *, hints=None, teaching=None, rtol=1e-5, atol=1e-6):
        def register(fn):
            outcome = run(fn, self.namespace)
            options = _options(hints, teaching, rtol, atol)
            self.results.append({"title": title, **options, **outcome})
            return fn

        return register


def collect(source: str, answers: dict | None = None, draw: int = 0) -> str:
    """Run the probes that ``source`` (a hidden-test block) defines against ``answers`` (by
    default the notebook's namespace), on the inputs of ``draw``, and return their records as
    JSON text. The block's own code sees torch, math and this module's helpers, none of the
    notebook's other names (`choice` reads a quick-check answer)."""
    global _draw
    if answers is None:
        from IPython import get_ipython

        answers = get_ipython().user_ns
    collector = _Collector(answers)
    namespace = {
        "torch": torch,
        "math": sys.modules["math"],
        "probe": collector,
        "choice": choice,
        **{name: globals()[name] for name in __all__ if name != "probe"},
    }
    _draw = draw
    try:
        exec(compile(source, "<hidden tests>", "exec"), namespace)
    finally:
        _draw = 0
    return json.dumps(collector.results)


def send(source: str, draw: int) -> None:
    """Run a hidden block's probes (`collect`) in the grader's kernel and send their records to
    the grader as a display message of their own type, not as the cell's value."""
    from IPython.display import display

    display({RECORDS_MIME: collect(source, draw=draw)}, raw=True)


def probe(title: str, *, hints=None, teaching=None, rtol: float = 1e-5, atol: float = 1e-6):
    """Declare a probe (see the module's docstring). Outside the grader it runs at once against
    the notebook's own names and fails only if the call raises."""

    def register(fn):
        outcome = run(fn, sys._getframe(1).f_globals)
        if "missing" in outcome:
            raise CheckFailed(f"{title}: {outcome['missing']} is not defined.")
        if "raised" in outcome:
            if outcome["raised"] == "NotImplementedError":
                raise NotImplementedError(f"{title}: not implemented yet")
            raise CheckFailed(f"{title}: {outcome['raised']}: {outcome['message']}")
        json.dumps(outcome["record"])
        return fn

    return register
