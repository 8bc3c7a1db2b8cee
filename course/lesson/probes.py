"""Hidden tests as probes: build an input, call the exercise, describe the result as plain data.

A hidden test is written as probes, each a function whose parameters are named after what it
calls (an exercise, or a quick-check answer such as ``q1``). For an exercise ``scale(t, k)``::

    @probe("scale of a float64 tensor", hints={"result": "multiply, do not add."})
    def _(scale):
        t = torch.randn(5, dtype=torch.float64, generator=seeded(7))
        result = scale(t, 3)
        return {"result": result, "input after the call": t,
                "shares memory with the input": same_memory(result, t)}

A probe holds no expected value. The grader (`course.grading.probes`) runs every probe twice: in
the student's kernel, with the student's answer, and in a trusted kernel, with the reference
solution, and compares the two records in its own process. The student's kernel only ever sees
the inputs. Run anywhere else (the instructor's source notebook, a bare nbgrader configuration), a
probe runs at once and fails only when the call raises.

A record is JSON: numbers, strings, bools, None, lists, dicts, and tensors described by the
values, dtype, shape and autograd facts read through ``torch._C.TensorBase``'s own C-level
getters, captured when this module is first imported (the grader imports it before any student
code runs), so neither a patched ``torch.Tensor`` nor a tensor subclass can change what they say.
An object that is none of these is recorded by its class name only, so an object that fakes
comparisons never matches the reference's plain value.

What a probe's own code computes (a call count, grad mode during a forward pass, ``p.requires_grad``
read through ``torch.Tensor``) is protected otherwise: the probes' builtins, and this module's, are
a copy taken at import; the names of torch and of Python's own modules are compared with the
snapshot taken at import (`course.lesson.pristine`) after every probe, and whenever the answer
calls back into probe code (a probe's callbacks call `checkpoint`); and a torch function or
dispatch mode the answer left on counts as well. Any change makes the probe's result
``{"tampered": [what changed]}``, which never earns a point and is flagged for review. The
grader runs a hidden block's code rewritten (`course.lesson.hardened`: what it reads on the
objects the answer touched comes from torch's and Python's own classes) with torch function
overrides off outside the answer's calls, and the records leave by `course.lesson.outbox`
(`send`), never as a cell's value.
"""

from __future__ import annotations

import builtins
import gc
import json
import linecache
import math
import sys
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.utils._device

from . import hardened, outbox, pristine
from .checks import CheckFailed, choice, seeded

# This module's builtins, and the probes': a copy, so `builtins.isinstance = ...` in a cell
# changes neither.
__builtins__ = _BUILTINS = dict(vars(builtins))
_issubclass, _real_type = builtins.issubclass, builtins.type


def _isinstance(value, kinds) -> bool:
    """isinstance by the object's real type: a ``__class__`` property cannot make an ndarray a
    float."""
    return _issubclass(_real_type(value), kinds)


_BUILTINS["isinstance"] = _isinstance

__all__ = ["probe", "same_memory", "shape_of", "seeded", "checkpoint", "updates"]

_SNAPSHOT = pristine.Snapshot()
_set_grad_enabled, _manual_seed, _dumps = torch._C._set_grad_enabled, torch.manual_seed, json.dumps
_set_anomaly_enabled = torch.set_anomaly_enabled
_gc_enabled, _gc_disable, _gc_enable = gc.isenabled, gc.disable, gc.enable
_C = torch._C
_MODE_STACKS = (
    (_C._len_torch_function_stack, _C._get_function_stack_at),
    (_C._len_torch_dispatch_stack, _C._get_dispatch_stack_at),
)
_DEVICE_MODE = torch.utils._device.DeviceContext  # `with torch.device(...)`: torch's own

_Base = torch._C.TensorBase
_get_requires_grad = _Base.requires_grad.__get__
_get_is_leaf = _Base.is_leaf.__get__
_get_grad = _Base.grad.__get__
_get_retains_grad = _Base.retains_grad.__get__
_get_dtype = _Base.dtype.__get__
_get_shape = _Base.shape.__get__
_get_version = _Base._version.__get__
_detach, _tolist, _numel, _storage = _Base.detach, _Base.tolist, _Base.numel, _Base.untyped_storage
_is_complex, _to = _Base.is_complex, _Base.to
_storage_ptr, _storage_bytes = torch.UntypedStorage.data_ptr, torch.UntypedStorage.nbytes
_no_torch_function, _torch_function_on = (
    torch._C.DisableTorchFunction,
    torch._C._EnableTorchFunction,
)
_HELPERS = dict(hardened.HELPERS)  # taken at import, before a cell could replace them
_callable = builtins.callable
_type, _str, _int = builtins.type, builtins.str, builtins.int
_TENSORS = (torch.Tensor, torch.nn.Parameter)

MAX_VALUES = 4096  # a larger tensor is recorded by its sum, sum of squares, min and max
_SUMMARY = (torch.sum, lambda t: torch.sum(t * t), torch.min, torch.max)
MAX_DEPTH = 6
MAX_ITEMS = 256
MAX_MESSAGE = 300


def _tensor(value: torch.Tensor, with_grad: bool = True) -> dict:
    with _no_torch_function():
        data = _detach(value)
        shape = [_int(n) for n in _get_shape(data)]
        dtype = _str(_get_dtype(data))
        if _is_complex(data):
            data = torch.view_as_real(data)
        if _numel(data) <= MAX_VALUES:
            values = _tolist(data)
        else:
            wide = _to(data, torch.float64)
            values = {"summary": [_tolist(f(wide)) for f in _SUMMARY]}
        described = {
            "tensor": dtype,
            "shape": shape,
            "values": values,
            "requires_grad": _get_requires_grad(value),
            "is_leaf": _get_is_leaf(value),
        }
        if with_grad:  # a result keeps no .grad unless asked to (reading it would warn)
            keeps = _get_is_leaf(value) or _get_retains_grad(value)
            grad = _get_grad(value) if keeps else None
            described["grad"] = None if grad is None else _tensor(grad, with_grad=False)
        return described


def record(value: Any, depth: int = 0) -> Any:
    """``value`` as JSON-ready plain data (see the module's docstring)."""
    kind = _type(value)
    if value is None or kind is bool:
        return value
    if kind in _TENSORS:
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
        if all(_type(k) is str for k, _ in pairs):
            return {"dict": {k: record(v, depth + 1) for k, v in pairs}}
        return {"object": "dict with keys that are not strings"}
    if isinstance(value, torch.dtype):
        return {"dtype": _str(value)}
    return {"object": kind.__qualname__}


def shape_of(t: torch.Tensor) -> tuple[int, ...]:
    """A tensor's shape, read through the C-level getter (a subclass's ``shape`` property does
    not count)."""
    with _no_torch_function():
        return tuple(_int(n) for n in _get_shape(t))


def same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether two tensors' storages (their memory) overlap, read through C-level getters with no
    torch function mode or subclass in the way: by the bytes they span, not by which storage
    object holds them (``torch.from_numpy(t.numpy())`` is a second storage over t's bytes)."""
    with _no_torch_function():
        spans = []
        for t in (a, b):
            storage = _storage(t)
            start = _storage_ptr(storage)
            spans.append((start, start + _storage_bytes(storage)))
        (a_start, a_end), (b_start, b_end) = spans
        return a_start < b_end and b_start < a_end


def updates(params: list[torch.Tensor], versions: list[int]) -> int:
    """How many times the most changed of ``params`` was changed in place since its version
    counter read ``versions`` (``[p._version for p in params]``): an optimizer step changes each
    parameter that has a gradient once, and only torch's C code moves the counter, whichever way
    ``step()`` was reached."""
    with _no_torch_function():
        return max([_get_version(p) - v for p, v in zip(params, versions)], default=0)


def _parameters(fn: Callable) -> list[str]:
    """The names a probe asks for: its parameters without a default (a default binds a loop's
    value, e.g. ``def _(make_trainable, n=n)``)."""
    code = fn.__code__
    return list(code.co_varnames[: code.co_argcount - len(fn.__defaults__ or ())])


_tampered: list[str] = []  # what `checkpoint` found while the current probe ran


def checkpoint() -> None:
    """Called by probe code that the answer calls back (a model's forward, a loss function, an
    optimizer hook): note whether torch's or Python's functions are replaced right now."""
    _tampered.extend(_SNAPSHOT.changed() + _OWN.changed() + _modes())


def _modes() -> list[str]:
    """The torch function and dispatch modes that are on, other than torch's own."""
    found = []
    for length, mode_at in _MODE_STACKS:
        for index in range(length()):
            mode = _real_type(mode_at(index))
            if mode is not _DEVICE_MODE:  # by identity: a metaclass could fake equality
                found.append(f"a mode of class {mode.__name__} left on")
    return found


def _as_answer(value: Any) -> Any:
    """The answer's function called with torch function overrides on, as in the notebook (the
    probe's own code runs with them off)."""
    if not _callable(value):
        return value

    def answer(*args, **kwargs):
        with _torch_function_on():
            return value(*args, **kwargs)

    return answer


class _Recorded:
    """What a probe returned, already recorded (`recorded`)."""

    __slots__ = ("record",)

    def __init__(self, record: Any):
        self.record = record


def recorded(value: Any) -> _Recorded:
    """A probe's ``return value``, as the grader rewrites it (`course.lesson.hardened`): recorded
    inside the probe, while its locals still live, after a check that nothing was replaced (a
    mode left on could change what a read returns)."""
    checkpoint()
    return _Recorded(None if _tampered else record(value))


def run(fn: Callable, namespace: dict) -> dict:
    """Call one probe with what its parameters name in ``namespace``: ``{"record": ...}``,
    ``{"raised": <error type>, "message": ...}``, ``{"missing": <name>}`` or ``{"tampered":
    [names]}``. Every probe starts from the same global state (seed, grad mode, anomaly mode
    off: an answer may debug with it, and it only adds checks), whatever the one before it
    did."""
    arguments = []
    for name in _parameters(fn):
        if name not in namespace:
            return {"missing": name}
        arguments.append(_as_answer(namespace[name]))
    _tampered.clear()  # a change made before this probe persists, and its check below sees it
    _manual_seed(0)
    _set_grad_enabled(True)
    _set_anomaly_enabled(False)
    collecting = _gc_enabled()
    _gc_disable()  # no finalizer of the answer's runs at a moment a cycle collection picks
    try:
        with warnings.catch_warnings(), _no_torch_function():
            warnings.simplefilter("ignore")  # a warning is never a failure
            value = fn(*arguments)
        outcome = None
    except KeyboardInterrupt:  # the grader's time limit: it stops the probes
        raise
    except BaseException as error:  # the answer's error (any class) is a result, not a crash
        outcome = {"raised": _type(error).__name__, "message": _str(error)[:MAX_MESSAGE]}
    finally:
        if collecting:
            _gc_enable()
    checkpoint()  # before anything is read: a mode left on could change what a read returns
    if _tampered:
        return {"tampered": sorted(set(_tampered))[:10]}
    if outcome is None and _type(value) is _Recorded:
        return {"record": value.record}
    return outcome or {"record": record(value)}


def _options(hints: dict[str, str] | None, rtol: float, atol: float) -> dict:
    return {"hints": dict(hints or {}), "rtol": rtol, "atol": atol}


class _Collector:
    """The ``probe`` decorator while the grader collects records: it runs each probe in turn."""

    def __init__(self, namespace: dict):
        self.namespace = namespace
        self.results: list[dict] = []

    def __call__(self, title: str, *, hints=None, rtol: float = 1e-5, atol: float = 1e-6):
        def register(fn):
            outcome = run(fn, self.namespace)
            self.results.append({"title": title, **_options(hints, rtol, atol), **outcome})
            return fn

        return register


def probe_namespace(collector: Callable) -> dict:
    """What a probe's own code may use: torch, math and these helpers, nothing of the notebook's
    state (a student's later cell may have changed any notebook variable). Outside the grader a
    probe runs among the notebook's names, so the lesson's setup cell imports these too."""
    return {
        **_HELPERS,
        "__builtins__": _BUILTINS,
        "torch": torch,
        "math": math,
        "seeded": seeded,
        "choice": choice,
        "same_memory": same_memory,
        "shape_of": shape_of,
        "checkpoint": checkpoint,
        "updates": updates,
        "probe": collector,
        "_probe_recorded_": recorded,
    }


def collect(source: str, answers: dict | None = None) -> str:
    """Run the probes that ``source`` (a hidden-test block) defines against ``answers`` (by
    default the notebook's namespace) and return their records as JSON text."""
    if answers is None:
        from IPython import get_ipython

        answers = get_ipython().user_ns
    collector = _Collector(answers)
    exec(hardened.compile_probes(source), probe_namespace(collector))
    return _dumps(collector.results)


_send = outbox.OUTBOX.send
_source_lines, _caller = linecache.cache, sys._getframe


def send(source: str) -> None:
    """Run a hidden block's probes (`collect`) in the grader's kernel and send their records to
    the grader as a message of their own (`course.lesson.outbox`), not as the cell's value.

    The cell that calls it holds the block's code as text, which IPython keeps in linecache for
    tracebacks: it is forgotten first, so that the answer, which runs inside, cannot read the
    hidden tests from a stack it prints or returns (``logging``'s ``findCaller``, warnings)."""
    _source_lines.pop(_caller(1).f_code.co_filename, None)
    _send(collect(source))


def probe(title: str, *, hints=None, rtol: float = 1e-5, atol: float = 1e-6):
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
        if "tampered" in outcome:
            raise CheckFailed(f"{title}: changed by code in the notebook: {outcome['tampered']}")
        _dumps(outcome["record"])
        return fn

    return register


# The builtins and lookup tables the probes read through, compared as closed namespaces (a name
# added counts): here at every checkpoint, and by the tripwire (`course.grading.guard`).
OWN_TABLES = (
    ("the probes' builtins", _BUILTINS),
    ("the probes' helpers", _HELPERS),
    ("hardened's builtins", vars(hardened)["__builtins__"]),
    ("torch.Tensor's attributes as captured", hardened._TENSOR_ATTRIBUTES),
    ("nn.Module's walks as captured", hardened._MODULE_METHODS),
    ("outbox's builtins", vars(outbox)["__builtins__"]),
)
# The probes' own code and state, as this module left them.
_OWN = pristine.Snapshot(
    (sys.modules[__name__], hardened, outbox, sys.modules[CheckFailed.__module__]), [], OWN_TABLES
)
