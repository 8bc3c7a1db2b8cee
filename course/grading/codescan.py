"""What student code may do: a static scan of every cell a student could have changed.

Student code runs in the grader's kernel, next to the checks that grade it. The scan keeps it to
the plain Python and PyTorch an exercise needs, so that it has no handle on the grading machinery:

- no reflection or dynamic code (``exec``, ``eval``, ``setattr``, ``globals``, ``__dict__``, dunder
  and private attributes, frame and code objects), no IPython magics or shell escapes;
- imports only from an allow-list (torch, math, collections, ...; not os, sys, IPython, course);
- no writing attributes of anything but tensors' ``grad``/``data``/``requires_grad`` and
  ``self`` (so no ``torch.allclose = ...``, however the module was reached), no rebinding of a
  name the lesson's locked cells define (``expect_close = ...``);
- no tensor subclasses, metaclasses or special methods (``__eq__``, ``__torch_function__``)
  through which a returned value could answer a check; no global PyTorch switches or hooks.

It is an allow-list where it can be (imports, attribute writes), so tricks nobody wrote down are
refused too; what remains is checked at run time by `course.grading.guard`. A finding withholds the
notebook's automatic points for the instructor to review; it never crashes grading.
"""

from __future__ import annotations

import ast
import builtins
from dataclasses import dataclass

from IPython.core.inputtransformer2 import TransformerManager

ALLOWED_MODULES = {
    "torch",
    "math",
    "cmath",
    "random",
    "itertools",
    "functools",
    "collections",
    "typing",
    "dataclasses",
    "copy",
    "operator",
    "numbers",
    "statistics",
    "time",
    "warnings",
    "numpy",
    "fractions",
    "decimal",
    "heapq",
    "bisect",
    "enum",
    "abc",
    "string",
    "re",
}
DENIED_SUBMODULES = {
    "torch.overrides",
    "torch.library",
    "torch.utils",
    "torch.testing._internal",
    "torch.multiprocessing",
    "torch.hub",
    "numpy.ctypeslib",
    "numpy.lib",
}
DENIED_NAMES = {
    "exec",
    "eval",
    "compile",
    "__import__",
    "globals",
    "locals",
    "vars",
    "setattr",
    "delattr",
    "open",
    "breakpoint",
    "get_ipython",
    "__builtins__",
    "builtins",
}
# Attributes that give a handle on frames, code, the interpreter or global behaviour.
DENIED_ATTRIBUTE_PREFIXES = ("f_", "gi_", "cr_", "ag_", "tb_", "co_")
DENIED_ATTRIBUTES = {
    "overrides",
    "library",
    "update_wrapper",
    "wraps",
    "set_default_dtype",
    "set_default_device",
    "set_default_tensor_type",
    "use_deterministic_algorithms",
    "register_module_forward_hook",
    "register_module_forward_pre_hook",
    "register_module_backward_hook",
    "register_module_full_backward_hook",
    "register_module_full_backward_pre_hook",
    "register_module_buffer_registration_hook",
    "register_module_module_registration_hook",
    "register_module_parameter_registration_hook",
    "saved_tensors_hooks",
    "disable_saved_tensors_hooks",
    "register_multi_grad_hook",
    "attrgetter",
    "methodcaller",
}
ALLOWED_DUNDERS = {"__init__", "__name__"}
WRITABLE_ATTRIBUTES = {"grad", "data", "requires_grad"}
ALLOWED_BASES = {
    "object",
    "Exception",
    "ValueError",
    "TypeError",
    "KeyError",
    "RuntimeError",
    "Module",
    "NamedTuple",
}


@dataclass(frozen=True)
class Finding:
    cell: int  # index of the cell in the notebook
    line: int
    reason: str

    def __str__(self) -> str:
        return f"cell {self.cell + 1}, line {self.line}: {self.reason}"


def _imported(node: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """Name -> what an import binds it to (``import numpy as np``: np -> numpy)."""
    if isinstance(node, ast.Import):
        return {
            a.asname or a.name.split(".")[0]: a.name if a.asname else a.name.split(".")[0]
            for a in node.names
        }
    return {a.asname or a.name: f"{node.module}.{a.name}" for a in node.names}


def bound_names(source: str) -> dict[str, str | None]:
    """The modules, functions and classes a (trusted) cell binds at the top level, with the module
    path an import binds them to (None for defs and classes). Plain variables are not the
    grading machinery: a student may reuse ``x``."""
    try:
        tree = ast.parse(TransformerManager().transform_cell(source))
    except SyntaxError:
        return {}
    names: dict[str, str | None] = {}
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(_imported(node))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names[node.name] = None
    return names


def _dotted(node: ast.AST) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        return ".".join([node.id, *reversed(parts)])
    return None


class _Scanner(ast.NodeVisitor):
    def __init__(self, protected: dict[str, str | None]):
        self.protected = protected
        self.found: list[tuple[int, str]] = []
        self.depth = 0  # > 0 inside a function, class or lambda: names bound there are local

    def _nested(self, node: ast.AST) -> None:
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_Lambda = visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _nested

    def flag(self, node: ast.AST, reason: str) -> None:
        self.found.append((getattr(node, "lineno", 0), reason))

    # -- imports
    def _module(self, node: ast.AST, name: str) -> None:
        top = name.split(".")[0]
        if top not in ALLOWED_MODULES:
            self.flag(node, f"imports {name} (only {', '.join(sorted(ALLOWED_MODULES))})")
        elif any(name == d or name.startswith(d + ".") for d in DENIED_SUBMODULES) or any(
            part.startswith("_") for part in name.split(".")
        ):
            self.flag(node, f"imports {name}")

    def _bind_import(self, node: ast.Import | ast.ImportFrom) -> None:
        for name, target in _imported(node).items():
            if self.protected.get(name) != target:  # the same import again is harmless
                self._bind(node, name)

    def visit_Import(self, node):
        for alias in node.names:
            self._module(node, alias.name)
        self._bind_import(node)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level:
            self.flag(node, "relative import")
        self._module(node, module)
        for alias in node.names:
            if alias.name == "*":
                self.flag(node, f"from {module} import *")
            else:
                self._module(node, f"{module}.{alias.name}")
                self._attribute_name(node, alias.name)
        self._bind_import(node)

    # -- names
    def _bind(self, node: ast.AST, name: str, anywhere: bool = False) -> None:
        if name in self.protected and (anywhere or self.depth == 0):
            self.flag(node, f"rebinds {name}, which the lesson's locked cells define")

    def visit_Name(self, node):
        if node.id in DENIED_NAMES:
            self.flag(node, f"uses {node.id}")
        elif node.id.startswith("__") and node.id not in ALLOWED_DUNDERS:
            self.flag(node, f"uses {node.id}")
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._bind(node, node.id)

    def visit_Global(self, node):
        for name in node.names:
            self._bind(node, name, anywhere=True)

    # -- attributes
    def _attribute_name(self, node: ast.AST, name: str) -> None:
        if name.startswith("__") and name.endswith("__"):
            if name not in ALLOWED_DUNDERS:
                self.flag(node, f"uses the special attribute {name}")
        elif name.startswith("_"):
            self.flag(node, f"uses the private attribute {name}")
        elif name.startswith(DENIED_ATTRIBUTE_PREFIXES) or name in DENIED_ATTRIBUTES:
            self.flag(node, f"uses {name}")

    def visit_Attribute(self, node):
        self._attribute_name(node, node.attr)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = node.value
            on_self = isinstance(base, ast.Name) and base.id == "self"
            if node.attr not in WRITABLE_ATTRIBUTES and not on_self:
                self.flag(
                    node,
                    f"writes the attribute {_dotted(node) or node.attr} "
                    "(only .grad, .data, .requires_grad and self.<name> may be set)",
                )
        self.generic_visit(node)

    def visit_Call(self, node):
        func = node.func
        if isinstance(func, ast.Name) and func.id == "getattr":
            name = node.args[1] if len(node.args) > 1 else None
            if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
                self.flag(node, "getattr with a computed name")
            else:
                self._attribute_name(node, name.value)
        if isinstance(func, ast.Name) and func.id == "type" and len(node.args) > 1:
            self.flag(node, "creates a class with type(...)")
        self.generic_visit(node)

    # -- definitions
    def _function(self, node):
        self._bind(node, node.name)
        if node.name.startswith("__") and node.name not in ALLOWED_DUNDERS:
            self.flag(node, f"defines the special method {node.name}")
        self._nested(node)

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_ClassDef(self, node):
        self._bind(node, node.name)
        for base in node.bases:
            name = _dotted(base)
            last = name.split(".")[-1] if name else None
            if last not in ALLOWED_BASES or (name and name.split(".")[0] in DENIED_NAMES):
                self.flag(
                    base,
                    f"subclasses {name or 'an expression'} "
                    f"(only {', '.join(sorted(ALLOWED_BASES))})",
                )
        for keyword in node.keywords:
            self.flag(keyword, f"class keyword {keyword.arg} (metaclass)")
        self._nested(node)


def scan_source(
    source: str, protected: dict[str, str | None] | None = None
) -> list[tuple[int, str]]:
    """(line, reason) for each thing in one cell's code that student code may not do."""
    python = TransformerManager().transform_cell(source)
    if "get_ipython()" in python and "get_ipython" not in source:
        return [(1, "uses an IPython magic or shell command (% or !)")]
    try:
        tree = ast.parse(python)
    except SyntaxError:
        return []  # it fails when it runs, like any syntax error; nothing to withhold
    scanner = _Scanner(protected or {})
    scanner.visit(tree)
    return sorted(set(scanner.found))


def scan_notebook(
    notebook, trusted_sources: set[str], protected: dict[str, str | None]
) -> list[Finding]:
    """Findings in every code cell whose source is not one of the trusted (locked or test)
    cells of the assignment's source: those are the cells a student wrote or changed."""
    findings = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or cell.source in trusted_sources:
            continue
        findings += [
            Finding(index, line, reason) for line, reason in scan_source(cell.source, protected)
        ]
    return findings


def trusted_cells(source_notebook) -> tuple[set[str], dict[str, str | None]]:
    """The sources of the locked and test cells of the assignment's own notebook, and the names
    a student's cells must not rebind at the top level: what those cells define (the exercises'
    own names excepted) and the builtins."""
    trusted, defined, answers = set(), {}, set()
    for cell in source_notebook.cells:
        if cell.cell_type != "code":
            continue
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("solution"):
            answers |= set(bound_names(cell.source))
        elif meta.get("locked") or meta.get("grade"):
            trusted.add(cell.source)
            defined.update(bound_names(cell.source))
    protected = {name: None for name in dir(builtins)} | defined
    for name in answers | DENIED_NAMES | {"_"}:
        protected.pop(name, None)
    return trusted, protected
