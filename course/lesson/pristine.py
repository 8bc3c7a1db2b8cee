"""Are torch and Python's own functions as they were before any student code ran?

The hidden tests' records (`course.lesson.probes`) are made in the student's kernel, by probe code
that calls torch and the builtins. A fact whose right value is a constant (grad mode during a
forward pass, a call count, ``requires_grad``) could be forged by code that replaced what the
probe calls (``torch.is_grad_enabled``, ``torch.Tensor.requires_grad``, ``nn.Linear.forward``,
``json.dumps``) for as long as the probe looks. So `Snapshot` is taken when this package is first
imported (the grader imports it before the first cell a student could have written), and the
probes ask `Snapshot.changed` after every probe and whenever the answer calls back into probe
code; a change makes the probe's record "tampered", which never earns a point.

A library's own change is not a student's: torch wraps some of its own functions while a lesson
runs (``torch._dynamo``, imported by the first optimizer step, wraps ``torch.manual_seed``), and a
wrapper from torch's own files around the original is accepted (`_passes_through`), except
torch's context-manager decorators. The tripwire (`course.grading.guard`) shares `unchanged`, a
looser rule (any library wrapper around the original): it only reports, and no point depends
on it.
"""

from __future__ import annotations

import builtins
import itertools
import json
import json.encoder
import linecache
import math
import operator
import os
import sysconfig
import types

import torch
import torch.nn.functional
import torch.nn.modules.module
import torch.optim
import torch.optim.optimizer as optimizer_module  # torch.optim drops the name

# This module's builtins: a copy, so `builtins.any = ...` in a cell cannot blind the comparison.
__builtins__ = dict(vars(builtins))


def _library_roots() -> tuple[str, ...]:
    """Where the interpreter's and the installed packages' code lies (read-only in the sandbox);
    a cell's code never lies there (IPython compiles cells under the kernel's own TMPDIR)."""
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    roots.add(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the course package
    return tuple(os.path.realpath(r) + os.sep for r in roots)


_LIBRARY_ROOTS = _library_roots()


def _code(function: object) -> types.CodeType | None:
    """The code object of a Python function (or of a method of one), else None."""
    code = getattr(getattr(function, "__func__", function), "__code__", None)
    return code if isinstance(code, types.CodeType) else None


def _defined_under(function: object, roots: tuple[str, ...]) -> bool:
    code = _code(function)
    return code is not None and os.path.realpath(code.co_filename).startswith(roots)


def from_library(function: object) -> bool:
    """Whether a Python function (or a method of one) was defined in a library's own files."""
    return _defined_under(function, _LIBRARY_ROOTS)


def _wrapped(function: object) -> list[object]:
    """What a function wraps: its ``__wrapped__`` (functools.wraps) and what its closure holds."""
    function = getattr(function, "__func__", function)
    cells = getattr(function, "__closure__", None) or ()
    inner = []
    for cell in cells:
        try:
            inner.append(cell.cell_contents)
        except ValueError:  # an empty cell
            pass
    return [*filter(None, [getattr(function, "__wrapped__", None)]), *inner]


def unchanged(before: object, after: object) -> bool:
    """The same object, an equal plain value, or a library's own wrapper around the same object:
    libraries wrap some of their own functions when a part of them is first used (torch.compile
    wraps nn.Module.__init__ in a closure), always in their own files; a wrapper a student wrote
    lives in a cell."""
    if after is before:
        return True
    if isinstance(before, (bool, int, float, str, tuple)):
        return type(after) is type(before) and after == before
    layer = [after]
    for _ in range(3):
        layer = [inner for f in layer if from_library(f) for inner in _wrapped(f)]
        if any(inner is before for inner in layer):
            return True
    return False


# What probe code and the records rely on. A module may gain names later (lazy submodules); a
# class may not: a name added to a class shadows the one it inherits.
MODULES = (
    builtins,
    math,
    json,
    json.encoder,
    linecache,  # where the probes' cell text is forgotten (`course.lesson.probes.send`)
    torch,
    torch._C,
    torch.nn,
    torch.nn.functional,
    torch.nn.modules.module,
    torch.autograd,
    torch.autograd.grad_mode,
    torch.optim,
)
# What the kernel itself sets anew in builtins for each request (and unsets between them).
PER_REQUEST = {"get_ipython", "input", "exit", "quit", "display", "displayhook", "excepthook"}
# Names that their own library rebinds: torch.set_default_dtype points torch.Storage at the
# storage class of the new dtype (an answer that sets float64 and puts it back is honest).
UNWATCHED = {"builtins": PER_REQUEST, "torch": {"Storage"}}
_MISSING = object()
_map, _len, _any, _is_not, _type = map, len, any, operator.is_not, type
_repeat = itertools.repeat


def _classes() -> list[type]:
    """torch's own Python classes that these modules name (torch.Tensor, nn.Linear, no_grad,
    the optimizers, ...); builtin types cannot be changed at all."""
    found = {}
    for module in [m for m in MODULES if m.__name__.startswith("torch")]:
        for value in vars(module).values():
            ours = isinstance(value, type) and str(getattr(value, "__module__", "")).startswith(
                "torch"
            )
            if ours and not value.__flags__ & (1 << 8):  # Py_TPFLAGS_IMMUTABLETYPE: C types
                found[id(value)] = value
    return list(found.values())


# Torch wraps some of its own functions while a lesson runs, each wrapper calling the function it
# wraps: importing torch._dynamo (the first optimizer step, torch.compile) wraps
# torch.manual_seed, optimizers' _init_group and nn.Module.__init__; an optimizer class's first
# instance wraps its step() to run the step hooks. So a wrapper whose code lies in torch's own
# files and that wraps the original is accepted, except torch's context-manager decorators
# (`torch.no_grad()(f)`), which change what the function sees. A wrapper from anywhere else
# (contextlib's, functools', a cell's) counts as a change.
_TORCH_ROOT = (os.path.realpath(os.path.dirname(torch.__file__)) + os.sep,)
_DECORATORS = {torch.no_grad()(lambda: None).__code__, torch.enable_grad()(lambda: None).__code__}


def _passes_through(before: object, after: object) -> bool:
    if _code(after) in _DECORATORS or not _defined_under(after, _TORCH_ROOT):
        return False
    return any(inner is before for inner in _wrapped(after))


def _data(value: object) -> bool:
    """A plain value (a counter such as RemovableHandle.next_id, a flag): what functions do does
    not change with it, and libraries update their own."""
    return value is None or type(value) in (bool, int, float, str)


class _Namespace:
    """One module's or class's names and values, compared by identity in one C-level pass, and
    the module's or class's own class (``object.__setattr__(torch, "__class__", Liar)`` puts a
    property of Liar's before every name of the module's)."""

    def __init__(self, label: str, mapping, closed: bool, owner: object = None):
        self.label, self.mapping, self.closed, self.owner = label, mapping, closed, owner
        self.kind = _type(owner)
        self.keys = tuple(k for k in mapping.keys() if k not in UNWATCHED.get(label, ()))
        self.read = operator.itemgetter(*self.keys) if len(self.keys) > 1 else None
        self.values = self._read()

    def _inherits(self, name: str) -> bool:
        """Whether the class's bases define ``name`` (a name added here would shadow it)."""
        return any(name in vars(base) for base in getattr(self.owner, "__mro__", ())[1:])

    def _read(self) -> tuple:
        # itemgetter of one key returns the value itself, not a tuple; a deleted name raises
        if self.read is not None:
            try:
                return self.read(self.mapping)
            except KeyError:
                pass
        return tuple(_map(self.mapping.get, self.keys, _repeat(_MISSING)))

    def changed(self) -> list[str]:
        if _type(self.owner) is not self.kind:
            return [f"{self.label}.__class__"]
        now = self._read()
        grew = self.closed and _len(self.mapping) != _len(self.keys)
        if not grew and not _any(_map(_is_not, now, self.values)):
            return []
        found = [
            f"{self.label}.{k}"
            for k, before, after in zip(self.keys, self.values, now)
            if after is not before
            and not (_data(before) and _data(after))
            and not _passes_through(before, after)
        ]
        if grew:
            known = set(self.keys)
            found += [
                f"{self.label}.{k}"
                for k, v in list(self.mapping.items())
                if k not in known
                and not (from_library(v) or isinstance(v, types.ModuleType))
                and not (_data(v) and not self._inherits(k))  # a new flag shadows nothing
            ]
        if not found:  # torch's own change: accept it once, then compare against it
            self.__init__(self.label, self.mapping, self.closed, self.owner)
        return found


def global_hooks() -> tuple:
    """torch's global hook tables (every module's forward hooks, every optimizer's step hooks):
    a hook added there runs inside the probe's own model or optimizer."""
    return tuple(
        (f"global {name.removeprefix('_global_')}", table)  # short: the feedback names it
        for owner in (torch.nn.modules.module, optimizer_module)
        for name, table in vars(owner).items()
        if name.startswith("_global_") and isinstance(table, dict)
    )


class Snapshot:
    """The names of ``modules`` and ``classes`` as they are now: by default `MODULES`, torch's
    classes in them and its global hook tables."""

    def __init__(
        self,
        modules: tuple = MODULES,
        classes: list[type] | None = None,
        mappings: tuple | None = None,
    ):
        """``mappings``: (label, dict) pairs compared like classes (a name added counts)."""
        classes = _classes() if classes is None else classes
        mappings = global_hooks() if mappings is None else mappings
        self.namespaces = (
            [_Namespace(m.__name__, vars(m), closed=False, owner=m) for m in modules]
            + [
                _Namespace(f"{c.__module__}.{c.__qualname__}", vars(c), closed=True, owner=c)
                for c in classes
            ]
            + [_Namespace(label, mapping, closed=True) for label, mapping in mappings]
        )

    def changed(self) -> list[str]:
        """What was replaced or added since (at most ten names): [] when nothing was."""
        found = []
        for namespace in self.namespaces:
            found += namespace.changed()
        return sorted(found)[:10]
