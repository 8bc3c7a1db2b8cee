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

_baseline: dict[str, object] | None = None


def _entries(prefix: str, namespace: dict) -> dict[str, object]:
    return {f"{prefix}.{name}": value for name, value in namespace.items()}


def _state() -> dict[str, object]:
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython
    from torch.nn.modules import module

    import course.lesson.checks

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
    global _baseline
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
