"""Hidden tests' code, compiled so that what a probe reads comes from torch's and Python's own
classes, never from the objects the answer was handed or returned.

A probe is ordinary Python (``model.weight.grad is None``, ``[p.requires_grad for p in
model.parameters()]``, ``float(loss)``). The answer is handed the probe's tensors, models and
lists and may change them: an instance attribute shadows a method (``t.item = ...``,
``model.named_parameters = ...``), ``object.__setattr__(t, "__class__", Liar)`` gives a tensor a
class with lying properties, a returned list may be a subclass whose ``__iter__`` lies. So
`compile_probes` rewrites the hidden test's code before it runs:

- an attribute read on a tensor is looked up on ``torch.Tensor`` as torch defines it (captured
  when this module is imported, before any student code), never on the tensor's own class or
  instance dict;
- an attribute of a Python module (``torch.is_grad_enabled``) is read from the module's own
  names, never through a class the module was given;
- on an ``nn.Module``, a parameter, buffer or submodule is read where nn.Module keeps it (an
  instance attribute of the same name, put beside it with ``object.__setattr__``, is not), and
  the walks (``parameters``, ``named_parameters``, ``modules``, ``children``,
  ``buffers`` and their named forms, ``train``, ``eval``) and ``training`` read the modules' own
  dicts (``_modules``, ``_parameters``, ``_buffers``), as nn.Module's code does, without calling
  any method the instance could shadow;
- ``float``, ``int``, ``bool``, ``len``, subscripts and iteration (``for``, comprehensions,
  ``list``, ``tuple``, ``zip``, ``enumerate``, ``sorted``, ``sum``, ``any``, ``all``) on a tensor
  or a subclass of a builtin container use the tensor's or the builtin's own methods.

`course.lesson.probes.run` runs each probe with torch function overrides off (a subclass's
``__torch_function__`` and any mode), and on again only inside calls into the answer, so the
probe's own torch calls compute what torch computes. Comparisons with the reference happen in the
grader's process (`course.grading.probes`), on records.
"""

from __future__ import annotations

import ast
import builtins
import types
from collections.abc import Callable, Iterable, Iterator

import torch

__builtins__ = dict(vars(builtins))  # `builtins.len = ...` in a cell changes nothing here

_real_type, _issubclass, _getattr = builtins.type, builtins.issubclass, builtins.getattr
_Tensor, _Module = torch.Tensor, torch.nn.Module
_instance_dict = _Module.__dict__["__dict__"].__get__  # a module's own dict, whatever its class
# A Python module's own names, whatever class it was given (``object.__setattr__(torch,
# "__class__", Liar)`` puts the class's properties before the module's names).
_ModuleType = types.ModuleType
_module_dict = _ModuleType.__dict__["__dict__"].__get__
_dict_get, _dict_items, _dict_setitem = dict.__getitem__, dict.items, dict.__setitem__
_no_torch_function = torch._C.DisableTorchFunction

# torch.Tensor's attributes by name, the most derived definition first, as Python would find them.
_TENSOR_ATTRIBUTES: dict[str, object] = {}
for _cls in reversed(_Tensor.__mro__):
    _TENSOR_ATTRIBUTES.update(vars(_cls))
_BASES = (bool, int, float, str, bytes, list, tuple, dict)  # builtins whose own methods are used


def _bind(descriptor: object, tensor: torch.Tensor) -> object:
    get = _getattr(_real_type(descriptor), "__get__", None)
    return descriptor if get is None else get(descriptor, tensor, _Tensor)


def _tensor_attribute(tensor: torch.Tensor, name: str) -> object:
    try:
        descriptor = _TENSOR_ATTRIBUTES[name]
    except KeyError:
        raise AttributeError(f"torch.Tensor has no attribute {name!r}") from None
    return _bind(descriptor, tensor)


def _base_of(kind: type) -> type | None:
    for base in _BASES:
        if _issubclass(kind, base):
            return base
    return None


# --- nn.Module's walks, read from each module's own dicts (as torch's own code reads them) ---


def _members(module: torch.nn.Module, field: str) -> list[tuple[str, object]]:
    return list(_dict_items(_dict_get(_instance_dict(module), field)))


def _named_modules(module, memo=None, prefix="", remove_duplicate=True) -> Iterator:
    memo = set() if memo is None else memo
    if id(module) in memo:
        return
    if remove_duplicate:
        memo.add(id(module))
    yield prefix, module
    for name, child in _members(module, "_modules"):
        if child is not None:
            yield from _named_modules(child, memo, prefix + ("." if prefix else "") + name)


def _named_members(field: str) -> Callable:
    def named(module, prefix="", recurse=True, remove_duplicate=True) -> Iterator:
        seen = set()
        walk = (
            _named_modules(module, None, prefix, remove_duplicate)
            if recurse
            else [(prefix, module)]
        )
        for module_prefix, owner in walk:
            for name, value in _members(owner, field):
                if value is None or id(value) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(value))
                yield module_prefix + ("." if module_prefix else "") + name, value

    return named


def _values(named: Callable) -> Callable:
    return lambda module, *args, **kwargs: (value for _, value in named(module, *args, **kwargs))


def _named_children(module) -> Iterator:
    seen = set()
    for name, child in _members(module, "_modules"):
        if child is not None and id(child) not in seen:
            seen.add(id(child))
            yield name, child


def _train(module, mode=True):
    if _real_type(mode) is not bool:
        raise ValueError("training mode is expected to be boolean")
    for _, inner in _named_modules(module):
        _dict_setitem(_instance_dict(inner), "training", mode)
    return module


_named_parameters, _named_buffers = _named_members("_parameters"), _named_members("_buffers")
_MODULE_METHODS = {
    "named_modules": _named_modules,
    "modules": _values(_named_modules),
    "named_parameters": _named_parameters,
    "parameters": _values(_named_parameters),
    "named_buffers": _named_buffers,
    "buffers": _values(_named_buffers),
    "named_children": _named_children,
    "children": _values(_named_children),
    "train": _train,
    "eval": lambda module: _train(module, False),
}


# --- what the rewritten code calls ---


def attribute(obj: object, name: str) -> object:
    """``obj.name``, read through torch.Tensor's or nn.Module's own code where obj is one."""
    kind = _real_type(obj)
    if _issubclass(kind, _Tensor):
        with _no_torch_function():  # a getter reads at once: no subclass override intercepts it
            return _tensor_attribute(obj, name)
    if _issubclass(kind, _Module):
        method = _MODULE_METHODS.get(name)
        if method is not None:
            return lambda *args, **kwargs: method(obj, *args, **kwargs)
        own = _instance_dict(obj)
        if name == "training":
            return _dict_get(own, "training")
        # Where nn.Module keeps them: an instance attribute of the same name, which only
        # object.__setattr__ can add beside one, shadows them for ordinary code.
        for field in ("_parameters", "_buffers", "_modules"):
            members = own.get(field)
            if _real_type(members) is dict and name in members:
                return _dict_get(members, name)
    if _issubclass(kind, _ModuleType):
        names = _module_dict(obj)
        if name in names:  # else a lazy submodule, which the module's __getattr__ imports
            return _dict_get(names, name)
    return _getattr(obj, name)


def _own_method(obj: object, name: str) -> Callable | None:
    """``obj.name`` as torch.Tensor or obj's builtin base class defines it, bound; None for any
    other object (its own class decides, as usual)."""
    kind = _real_type(obj)
    if _issubclass(kind, _Tensor):
        return _tensor_attribute(obj, name)
    base = _base_of(kind)
    if base is not None and name in vars(base):
        return vars(base)[name].__get__(obj, base)
    return None


def iterated(obj: object) -> Iterable:
    """What ``for x in obj`` walks: a tensor's rows or a builtin container's own items."""
    walk = _own_method(obj, "__iter__")
    return obj if walk is None else walk()


def subscript(obj: object, key: object) -> object:
    """``obj[key]``: a tensor's or a builtin container's own item."""
    item = _own_method(obj, "__getitem__")
    return obj[key] if item is None else item(key)


_len = builtins.len
_SPECIAL = {builtins.float: "__float__", builtins.int: "__int__", builtins.bool: "__bool__"}


def converted(function: Callable, value: object) -> object:
    """``float(x)``, ``int(x)``, ``bool(x)`` or ``len(x)`` by the value's real type (int(2.5) and
    float("nan") as Python gives them); any other function as it is."""
    if function is _len:
        size = _own_method(value, "__len__")
        return len(value) if size is None else size()
    name = _SPECIAL.get(function) if _real_type(function) is type else None
    method = None if name is None else _own_method(value, name)
    return function(value) if method is None else function(method())


HELPERS = {
    "_probe_attribute_": attribute,
    "_probe_iterated_": iterated,
    "_probe_converted_": converted,
    "_probe_subscript_": subscript,
}
_CONVERTERS = {"float", "int", "bool", "len"}
_ITERATING = {
    "list",
    "tuple",
    "set",
    "frozenset",
    "zip",
    "enumerate",
    "sorted",
    "sum",
    "any",
    "all",
}


def _is_probe(node: ast.AST) -> bool:
    """A function decorated ``@probe(...)``."""
    return isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and any(
        isinstance(d, ast.Call) and isinstance(d.func, ast.Name) and d.func.id == "probe"
        for d in node.decorator_list
    )


class _RecordReturns(ast.NodeTransformer):
    """``return value`` in a probe's own body becomes ``return _probe_recorded_(value)``: what it
    returns is read while its locals (the model it built, ...) still live, before code of the
    answer's that runs when they go (a ``__del__``) could change it."""

    def visit_Return(self, node: ast.Return) -> ast.AST:
        value = node.value or ast.Constant(None)
        node.value = _call("_probe_recorded_", value, like=value)
        return node

    def visit_FunctionDef(self, node: ast.AST) -> ast.AST:
        return node  # a function defined inside the probe returns as written

    visit_AsyncFunctionDef = visit_Lambda = visit_ClassDef = visit_FunctionDef


class _Rewrite(ast.NodeTransformer):
    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        self.generic_visit(node)
        if _is_probe(node):
            node.body = [_RecordReturns().visit(statement) for statement in node.body]
        return node

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return _call("_probe_attribute_", node.value, ast.Constant(node.attr), like=node)

    def visit_Subscript(self, node: ast.Subscript) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return _call("_probe_subscript_", node.value, _key(node.slice), like=node)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name = node.func.id if isinstance(node.func, ast.Name) else None
        if name in _CONVERTERS and len(node.args) == 1 and not node.keywords:
            return _call("_probe_converted_", node.func, node.args[0], like=node)
        if name in _ITERATING or (name in ("min", "max") and len(node.args) == 1):
            node.args = [_iterate_node(a) for a in node.args]
        return node

    def visit_For(self, node: ast.For) -> ast.AST:
        self.generic_visit(node)
        node.iter = _iterate_node(node.iter)
        return node

    def visit_comprehension(self, node: ast.comprehension) -> ast.AST:
        self.generic_visit(node)
        node.iter = _iterate_node(node.iter)
        return node


def _key(node: ast.expr) -> ast.expr:
    """A subscript's key as an ordinary expression: ``a:b`` is only valid inside brackets."""
    if isinstance(node, ast.Slice):
        bounds = [b or ast.Constant(None) for b in (node.lower, node.upper, node.step)]
        return ast.copy_location(
            ast.Call(func=ast.Name("slice", ast.Load()), args=bounds, keywords=[]), node
        )
    if isinstance(node, ast.Tuple):
        node.elts = [_key(e) for e in node.elts]
    return node


def _iterate_node(node: ast.expr) -> ast.expr:
    if isinstance(node, ast.Starred):
        node.value = _call("_probe_iterated_", node.value, like=node.value)
        return node
    return _call("_probe_iterated_", node, like=node)


def _call(helper: str, *args: ast.expr, like: ast.AST) -> ast.Call:
    call = ast.Call(func=ast.Name(helper, ast.Load()), args=list(args), keywords=[])
    return ast.copy_location(call, like)


def compile_probes(source: str, filename: str = "<hidden tests>"):
    """The code object of a hidden-test block, rewritten as the module's docstring says; run it
    in a namespace that holds `HELPERS`."""
    tree = _Rewrite().visit(ast.parse(source, filename))
    return compile(ast.fix_missing_locations(tree), filename, "exec")
