"""A tripwire inside the grading kernel: has anything the checks rely on been changed?

The grader (`course.grading.execute.GradingExecute`) calls `start()` before the first cell a
student could have written, while nothing in the kernel has been touched yet: it gates the
notebook's builtins (and the cells' reads of a few everyday names that other modules give
refused ones, `_AliasGate`), makes string annotations scanned, unpickling and the setting of
version counters refused, takes the baseline and answers the grader from a thread of its own,
over a Unix socket the grader listens on. Question and answer never pass through anything
student code could rebind (the user namespace, ``__import__``, display formatters, the shell).
After every test cell, after the last cell and after the hidden tests the grader asks "check";
the answer is "ok" or names what changed:
functions of torch, torch.Tensor, torch.nn.functional, torch.autograd, builtins and the course's
check and probe helpers; PyTorch's default dtype and global hooks; Python's
import machinery; IPython's input and AST transformers, event callbacks and shell methods; and
the imported helpers the lesson bound; the probes' own modules and tables, the records' channel
(`course.lesson.outbox`) and the notebook's ``__import__``. (What is per thread, such as grad
mode or a trace function, it cannot see from its thread; the probes reset what their records
depend on.)

It also watches itself: this module's functions and their code objects (a function whose
``__code__`` was swapped in place is still the same object). It runs in the student's process,
so it is a tripwire, not a wall: the static scan (`course.grading.codescan`) keeps student code
from reaching what it would take to fool it, and no point depends on it (hidden tests are judged
outside the kernel, `course.grading.probes`).
"""

from __future__ import annotations

import ast
import builtins
import linecache
import math
import socket
import sys
import threading
import types
import typing

from ..lesson.outbox import OUTBOX
from ..lesson.pristine import PER_REQUEST, from_library, global_hooks, unchanged
from .codescan import (
    BY_NAME,
    DENIED_NAMES,
    GATED_ALIASES,
    WRAPPERS,
    WRITABLE_DUNDERS,
    denied_attribute,
    denied_module,
    plain_chain,
    scan_source,
)

_baseline: dict[str, object] | None = None
_getattr, _setattr, _delattr = builtins.getattr, builtins.setattr, builtins.delattr
# The interpreter's functions the notebook has gated or may not name: wherever another module
# keeps one (``numpy.lib._datasource._open``), a computed name may not fetch it.
UNGATED = {"getattr", "setattr", "delattr", *(n for n in DENIED_NAMES if hasattr(builtins, n))}
_UNGATED_IDS = {id(vars(builtins)[name]) for name in UNGATED}  # alive as long as the interpreter


def _refused(name: object) -> bool:
    # attrgetter, methodcaller, wraps and update_wrapper too: fetched by a computed name, they
    # would read any attribute
    return isinstance(name, str) and (denied_attribute(name) or name in BY_NAME or name in WRAPPERS)


def _gated_getattr(obj, name, *default):
    """getattr for student code: a computed name may not reach what the static scan refuses."""
    if _refused(name):
        raise AttributeError(f"{name!r} is not available to graded code")
    value = _getattr(obj, name, *default)
    if isinstance(value, types.ModuleType) and denied_module(value.__name__):
        raise AttributeError(f"the module {value.__name__} is not available to graded code")
    if id(value) in _UNGATED_IDS:
        raise AttributeError(f"{name!r} is not available to graded code")
    return value


def _gated_setattr(obj, name, value):
    # a decorator written by hand copies __name__, __qualname__ and __doc__ as wraps does
    if isinstance(name, str) and name.startswith("__") and name not in WRITABLE_DUNDERS:
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


# The name the cells' compiled code calls the gated getattr by (`_AliasGate`): a special name,
# which graded code may not assign.
GATE = "__graded_getattr__"


def _gate(namespace: dict) -> None:
    """Give code compiled in ``namespace`` (the cells, and functions they define) the gated
    builtins; torch's and the lesson's own modules keep the interpreter's."""
    gated = _Builtins(vars(builtins))
    gated.update(getattr=_gated_getattr, setattr=_gated_setattr, delattr=_gated_delattr)
    gated[GATE] = _gated_getattr
    namespace["__builtins__"] = gated


def _gated_read(obj: ast.expr, name: str, like: ast.AST) -> ast.Call:
    call = ast.Call(ast.Name(GATE, ast.Load()), [obj, ast.Constant(name)], [])
    return ast.copy_location(call, like)


class _AliasGate(ast.NodeTransformer):
    """Compiles each cell's ``obj.config`` (`codescan.GATED_ALIASES`: everyday words that other
    modules also use as names for refused ones) as ``__graded_getattr__(obj, "config")``: the
    student's own attribute is read as before, ``logging.config`` or ``np.lib.format`` is refused
    by its value."""

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if node.attr in GATED_ALIASES and isinstance(node.ctx, ast.Load):
            return _gated_read(node.value, node.attr, node)
        return node

    def visit_AugAssign(self, node):
        """``obj.config += x`` reads it without a Load: read it through the gate first (the
        scan refuses it on anything but a name or a chain of attributes)."""
        target = node.target
        check = None
        if isinstance(target, ast.Attribute) and target.attr in GATED_ALIASES:
            if plain_chain(target.value):
                read = self.visit(_as_load(target.value))
                check = ast.copy_location(ast.Expr(_gated_read(read, target.attr, node)), node)
        self.generic_visit(node)
        return node if check is None else [check, node]


def _as_load(node: ast.expr) -> ast.expr:
    """A copy of a name or a chain of attributes, to be read."""
    if isinstance(node, ast.Attribute):
        return ast.Attribute(_as_load(node.value), node.attr, ast.Load())
    return ast.Name(node.id, ast.Load())


def _annotation_findings(annotation: str) -> list[tuple[int, str]]:
    """What no annotation, a library's included, may do: a type is named, never computed, and
    typing may evaluate the text with the interpreter's own builtins (``get_type_hints(f,
    globalns={})``): a call (the eleventh red team), an assignment, or a name of the functions
    the notebook has gated or may not name (``"getattr"``: the twelfth)."""
    try:
        tree = ast.parse(annotation, mode="eval")
    except SyntaxError:
        return []  # typing refuses it itself
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            return [(1, "it calls something")]
        if isinstance(node, (ast.NamedExpr, ast.Lambda)):
            return [(1, "it assigns or defines something")]
        if isinstance(node, ast.Name) and node.id in UNGATED:
            return [(1, f"it names {node.id}")]
    return []


def _library_import() -> bool:
    """Whether a library's module, being imported, makes the annotation: its annotations are the
    library's (the first optimizer imports torch._dynamo, whose NamedTuples name
    `torch.fx.GraphModule`, which the scan refuses). The first caller outside typing must be a
    library's own file, not text run as code and not the import machinery itself (which calls
    what a module's ``__all__`` holds: the twelfth red team), and no code of the notebook's may
    be on the way from the import to here (a warning hook of the answer's, run while a module
    imports)."""
    notebook = _namespace()
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename == typing.__file__:
        frame = frame.f_back
    if frame is None or frame.f_code.co_filename.startswith("<"):
        return False
    while frame is not None:
        if frame.f_globals is notebook:
            return False
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def _scan_string_annotations() -> None:
    """typing evaluates a string annotation as code (``get_type_hints``, and through it
    ``functools.singledispatch``'s ``register``): a string built at run time would be code the
    scan never read. Each forward reference is scanned as it is made and refused like a cell."""
    made = typing.ForwardRef.__init__
    if getattr(made, "scans", False):
        return

    def init(self, arg, *args, **kwargs):
        found = isinstance(arg, str) and (
            _annotation_findings(arg) or ([] if _library_import() else scan_source(arg))
        )
        if found:
            raise SyntaxError(f"a string annotation that graded code may not run: {found[0][1]}")
        made(self, arg, *args, **kwargs)

    init.scans = True
    typing.ForwardRef.__init__ = init


def _refuse_unpickling() -> None:
    """No answer unpickles, and a pickle calls whatever it names (``builtins.exec`` with any
    text): ``torch.storage._load_from_bytes(data)`` would run it (the twelfth red team's review).
    Every unpickler the kernel holds refuses, wherever a module keeps it, and in the one class
    that keeps one (multiprocessing's ForkingPickler, which torch's DataLoader imports)."""
    import _pickle
    import pickle

    def refuse(*args, **kwargs):
        raise pickle.UnpicklingError("graded code may not unpickle")

    class Unpickler(_pickle.Unpickler):
        load = refuse

    pickle._Unpickler.load = refuse  # the Python unpickler, and every subclass of it
    subclasses = [_pickle.Unpickler]
    while subclasses:
        for subclass in type.__subclasses__(subclasses.pop()):
            if subclass is not Unpickler:
                subclass.load = refuse
                subclasses.append(subclass)
    loaders = [(_pickle.load, refuse), (_pickle.loads, refuse), (_pickle.Unpickler, Unpickler)]
    replaced = {id(old): (old, new) for old, new in loaders}
    if (reduction := sys.modules.get("multiprocessing.reduction")) is not None:
        reduction.ForkingPickler.loads = refuse
    for module in list(sys.modules.values()):
        if isinstance(module, types.ModuleType):
            namespace = vars(module)
            for name, value in list(namespace.items()):
                old, new = replaced.get(id(value), (None, None))
                if value is old:
                    namespace[name] = new


def _refuse_version_setting() -> None:
    """The probes count optimizer updates by how far each parameter's version counter moved:
    torch's setter of that counter (and the context that calls it) refuses in the grading kernel,
    however it is reached (the thirteenth red team set it back after a second step)."""
    import torch

    def refuse(*args, **kwargs):
        raise RuntimeError("graded code may not set a tensor's version counter")

    torch._C._autograd._unsafe_set_version_counter = refuse


def _entries(prefix: str, namespace: dict) -> dict[str, object]:
    return {f"{prefix}.{name}": value for name, value in namespace.items()}


def _state() -> dict[str, object]:
    import torch
    import torch.nn.functional as F
    from IPython import get_ipython

    import course.lesson.checks
    import course.lesson.hardened
    import course.lesson.outbox
    import course.lesson.pristine
    import course.lesson.probes

    state: dict[str, object] = {}
    for name, namespace in [
        ("torch", vars(torch)),
        ("torch.Tensor", vars(torch.Tensor)),
        ("torch.nn.functional", vars(F)),
        ("torch.autograd", vars(torch.autograd)),
        ("torch.nn.Module", vars(torch.nn.Module)),
        ("builtins", {k: v for k, v in vars(builtins).items() if k not in PER_REQUEST}),
        ("math", vars(math)),
        ("linecache", vars(linecache)),
        ("typing.ForwardRef", vars(typing.ForwardRef)),
        ("course.lesson.checks", vars(course.lesson.checks)),
        ("course.lesson.probes", vars(course.lesson.probes)),
        ("course.lesson.hardened", vars(course.lesson.hardened)),
        ("course.lesson.outbox", vars(course.lesson.outbox)),
        ("course.lesson.pristine", vars(course.lesson.pristine)),
        *((label, mapping) for label, mapping in _closed()),
        ("course.grading.guard", {k: v for k, v in globals().items() if k != "_baseline"}),
    ]:
        state.update(_entries(name, namespace))
    state.update(
        {
            "torch default dtype": str(torch.get_default_dtype()),
            "torch global hooks": tuple(len(table) for _, table in global_hooks()),
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
        state.update(_entries("notebook name", _helpers(shell.user_ns)))
        # What the grader's own code looks up in the notebook's namespace first (the probes are
        # started by `__import__(...)` there).
        state.update(
            {
                f"notebook's {k}": shell.user_ns.get(k, _UNBOUND)
                for k in ("__import__", "__builtins__")
            }
        )
    return state


def _closed() -> list[tuple[str, dict]]:
    """The probes' own tables and the records' channel: a name added there counts as well."""
    from course.lesson import probes

    return [*probes.OWN_TABLES, ("the records' channel", vars(OUTBOX))]


def _helpers(namespace: dict) -> dict[str, object]:
    """What the lesson imported: modules, and the course's check helpers."""
    return {
        name: value
        for name, value in namespace.items()
        if isinstance(value, types.ModuleType)
        or (callable(value) and str(getattr(value, "__module__", "")).startswith("course"))
    }


# The lesson's helpers as the snapshot found them, and the student's own values of those names
# while a test runs: a student may name a variable `probe` or `copy`, and the tests must still
# find the lesson's.
_lesson: dict[str, object] = {}
_students: dict[str, object] = {}
# Every name as it was when the test cell started: what the test's own code rebinds is put back
# after it, so a test's `first = ...` never replaces the student's helper `first` (the hidden
# tests, which run after the last cell, call the student's functions among these names).
_before: dict[str, object] = {}
_UNBOUND = object()
# What IPython itself rebinds after every cell: the last results and the last inputs.
_IPYTHON_OWN = {"_", "__", "___", "_i", "_ii", "_iii"}


def lend() -> str:
    """Before a test cell (or the probes) runs: bind the lesson's helpers again, keeping the
    student's values of those names aside."""
    namespace = _namespace()
    for name, value in _lesson.items():
        current = namespace.get(name, _UNBOUND)
        if current is not value:
            _students.setdefault(name, current)
            namespace[name] = value
    _before.clear()
    _before.update(namespace)
    return "ok"


def give_back() -> str:
    """After the test cell: every name it rebound as it was before (names it added stay, for the
    tests below; IPython's own, such as `_` and `_i`, are IPython's), then the student's values of
    the lesson's names."""
    namespace = _namespace()
    for name, value in _before.items():
        if name not in _IPYTHON_OWN and namespace.get(name, _UNBOUND) is not value:
            namespace[name] = value
    _before.clear()
    for name, value in _students.items():
        if value is _UNBOUND:
            namespace.pop(name, None)
        else:
            namespace[name] = value
    _students.clear()
    return "ok"


def _namespace() -> dict:
    from IPython import get_ipython

    shell = get_ipython()
    return shell.user_ns if shell is not None else {}


def _with_code(state: dict[str, object]) -> dict[str, object]:
    """Each Python function's code object too: swapping ``f.__code__`` keeps ``f`` itself."""
    codes = {f"{k} code": v.__code__ for k, v in state.items() if isinstance(v, types.FunctionType)}
    return {**state, **codes}


def start(path: str) -> None:
    """Take the baseline, then answer the grader over the Unix socket at ``path``: "ok" for the
    snapshot, then one line for each request line: ``check`` (`check`), ``lend`` (`lend`),
    ``give back`` (`give_back`)."""
    channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    channel.connect(path)
    stream = channel.makefile("rwb", buffering=0)

    def answer(text: str) -> None:
        stream.write(text.replace("\n", " ").encode() + b"\n")

    requests = {b"check": check, b"lend": lend, b"give back": give_back}

    def serve() -> None:
        # Between cells, while the kernel is idle: changing the namespace races nothing.
        for line in stream:
            if (request := requests.get(line.strip())) is not None:
                answer(request())

    answer(snapshot())
    threading.Thread(target=serve, name="course-tripwire", daemon=True).start()


def snapshot() -> str:
    """Called before the first cell a student could have written: gate the notebook's builtins
    and record what the checks rely on."""
    global _baseline
    from IPython import get_ipython

    shell = get_ipython()
    if shell is not None:
        _gate(shell.user_ns)
        shell.ast_transformers.append(_AliasGate())
        _lesson.update(_helpers(shell.user_ns))
    _scan_string_annotations()
    _refuse_unpickling()
    _refuse_version_setting()
    OUTBOX.attach()  # the channel the probes' records will leave by, as it is now
    _baseline = _with_code(_state())
    return "ok"


def _callbacks(state: dict[str, object]) -> set[tuple[str, object]]:
    events = state.get("IPython events", ())
    return {(event, callback) for event, callbacks in events for callback in callbacks}


def check() -> str:
    """'ok', or what changed since the snapshot (at most ten of them)."""
    if _baseline is None:
        return "no snapshot was taken"
    now = _state()
    missing = object()
    changed = sorted(
        k
        for k, before in _baseline.items()
        if not k.endswith(" code")
        and k != "IPython events"
        and not unchanged(before, now.get(k, missing))
    )
    # A function whose code was swapped in place is still the same object.
    changed += sorted(
        k
        for k, code in _baseline.items()
        if k.endswith(" code") and _baseline[k[:-5]].__code__ is not code
    )
    # IPython's own extensions (autoreload, the inline backend) register callbacks when loaded.
    before, after = _callbacks(_baseline), _callbacks(now)
    if before - after or any(not from_library(cb) for _, cb in after - before):
        changed.append("IPython events")
    closed = ("IPython shell", *(label for label, _ in _closed()))
    changed += sorted(k for k in now if k.startswith(closed) and k not in _baseline)
    return "ok" if not changed else "changed: " + ", ".join(changed[:10])
