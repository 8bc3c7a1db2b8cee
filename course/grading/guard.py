"""A tripwire inside the grading kernel: has anything the checks rely on been changed?

The grader (`course.grading.execute.GradingExecute`) calls `snapshot()` before the first cell a
student could have written, and `check()` after every test cell, through the kernel protocol's
user_expressions (never through a notebook cell). `check()` answers "ok" or names what changed:
functions of torch, torch.Tensor, torch.nn.functional, torch.autograd, builtins and the course's
check helpers; PyTorch's global switches, function/dispatch modes and module hooks; Python's
trace, profile, display and exception hooks and import machinery; IPython's input and AST
transformers, event callbacks and traceback display; and the imported helpers the lesson bound.

It runs in the student's process, so it is a tripwire, not a wall: the static scan
(`course.grading.codescan`) keeps student code from reaching what it would take to fool it.
"""

from __future__ import annotations

import builtins
import math
import sys
import types

from .codescan import DENIED_ATTRIBUTES, DENIED_ATTRIBUTE_PREFIXES, DENIED_MODULES

_baseline: dict[str, object] | None = None
_getattr, _setattr, _delattr = builtins.getattr, builtins.setattr, builtins.delattr


def _refused(name: object) -> bool:
    return isinstance(name, str) and (
        name in DENIED_ATTRIBUTES or name in DENIED_MODULES or name.startswith(DENIED_ATTRIBUTE_PREFIXES)
    )


def _gated_getattr(obj, name, *default):
    """getattr for student code: a computed name may not reach what the static scan refuses."""
    if _refused(name):
        raise AttributeError(f"{name!r} is not available to graded code")
    value = _getattr(obj, name, *default)
    if isinstance(value, types.ModuleType) and _refused(value.__name__.split(".")[0]):
        raise AttributeError(f"the module {value.__name__} is not available to graded code")
    return value


def _gated_setattr(obj, name, value):
    if isinstance(name, str) and name.startswith("__"):
        raise AttributeError(f"graded code may not set the special attribute {name}")
    _setattr(obj, name, value)


def _gated_delattr(obj, name):
    if isinstance(name, str) and name.startswith("__"):
        raise AttributeError(f"graded code may not delete the special attribute {name}")
    _delattr(obj, name)


class _Builtins(dict):
    """The notebook's builtins: the interpreter's, with getattr, setattr and delattr gated.
    Names IPython adds to the interpreter's builtins later (``get_ipython`` while a cell runs)
    are looked up there."""

    def __missing__(self, key):
        return vars(builtins)[key]


def _gate(namespace: dict) -> None:
    """Give code compiled in ``namespace`` (the cells, and functions they define) the gated
    builtins; torch's and the lesson's own modules keep the interpreter's."""
    gated = _Builtins(vars(builtins))
    gated.update(getattr=_gated_getattr, setattr=_gated_setattr, delattr=_gated_delattr)
    namespace["__builtins__"] = gated


def _entries(prefix: str, namespace: dict) -> dict[str, object]:
    return {f"{prefix}.{name}": value for name, value in namespace.items()}


def _state() -> dict[str, object]:
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython
    from torch.nn.modules import module

    import course.lesson.checks
    import course.lesson.probes

    state: dict[str, object] = {}
    for name, namespace in [
        ("torch", vars(torch)),
        ("torch.Tensor", vars(torch.Tensor)),
        ("torch.nn.functional", vars(F)),
        ("torch.autograd", vars(torch.autograd)),
        ("torch.nn.Module", vars(torch.nn.Module)),
        ("builtins", vars(builtins)),
        ("math", vars(math)),
        ("course.lesson.checks", vars(course.lesson.checks)),
        ("course.lesson.probes", vars(course.lesson.probes)),
        ("course.grading.guard", {k: v for k, v in globals().items() if k != "_baseline"}),
    ]:
        state.update(_entries(name, namespace))
    state.update(
        {
            "torch grad mode": torch.is_grad_enabled(),
            "torch inference mode": torch.is_inference_mode_enabled(),
            "torch default dtype": str(torch.get_default_dtype()),
            "torch function modes": torch._C._len_torch_function_stack(),
            "torch dispatch modes": torch._C._len_torch_dispatch_stack(),
            "torch anomaly mode": torch.is_anomaly_enabled(),
            "torch global module hooks": tuple(
                len(getattr(module, name))
                for name in dir(module)
                if name.startswith("_global_") and isinstance(getattr(module, name), dict)
            ),
            "sys.trace": sys.gettrace(),
            "sys.profile": sys.getprofile(),
            "sys.displayhook": sys.displayhook,
            "sys.excepthook": sys.excepthook,
            "sys.meta_path": tuple(sys.meta_path),
            "sys.path_hooks": tuple(sys.path_hooks),
            "sys.modules": tuple(
                sys.modules.get(m)
                for m in ("torch", "builtins", "math", "course", "course.lesson.checks")
            ),
        }
    )
    shell = get_ipython()
    if shell is not None:
        state.update(
            {
                "IPython input transformers": tuple(
                    shell.input_transformers_cleanup + shell.input_transformers_post
                ),
                "IPython AST transformers": tuple(shell.ast_transformers),
                "IPython events": tuple(
                    (e, tuple(cbs)) for e, cbs in shell.events.callbacks.items()
                ),
            }
        )
        state.update(
            _entries(
                "IPython shell",
                {k: v for k, v in vars(shell).items() if callable(v) and not isinstance(v, type)},
            )
        )
        # What the lesson imported: modules, and the course's check helpers.
        for name, value in shell.user_ns.items():
            if isinstance(value, types.ModuleType) or (
                callable(value) and str(getattr(value, "__module__", "")).startswith("course")
            ):
                state[f"notebook name {name}"] = value
    return state


def snapshot() -> str:
    """Called before the first cell a student could have written: gate the notebook's builtins
    and record what the checks rely on."""
    global _baseline
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        _gate(shell.user_ns)
    _baseline = _state()
    return "ok"


def _unchanged(before: object, after: object) -> bool:
    """The same object, an equal plain value, or a wrapper around the same object: PyTorch wraps
    some of its own functions when a part of it is first imported (torch.func, dynamo), always
    with functools.wraps; student code cannot (the scan refuses wraps and attribute writes)."""
    if after is before:
        return True
    if isinstance(before, (bool, int, float, str, tuple)):
        return type(after) is type(before) and after == before
    for _ in range(3):
        after = getattr(after, "__wrapped__", None)
        if after is before:
            return True
    return False


def check() -> str:
    """'ok', or what changed since the snapshot (at most ten of them)."""
    if _baseline is None:
        return "no snapshot was taken"
    now = _state()
    missing = object()
    changed = sorted(k for k in _baseline if not _unchanged(_baseline[k], now.get(k, missing)))
    changed += sorted(k for k in now if k.startswith("IPython shell") and k not in _baseline)
    return "ok" if not changed else "changed: " + ", ".join(changed[:10])
