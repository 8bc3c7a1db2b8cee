"""What student code may not touch: a static scan for handles on the interpreter and the OS.

Hidden tests are judged outside the student's kernel (`course.grading.probes`), so nothing a
student's code does to torch, to the lesson's helpers or to its own objects can earn a point. What
is left to refuse is what no answer in this course needs and what would reach past the kernel:
the operating system (files, processes, sockets, signals), the interpreter's own machinery
(frames, code objects, the import system, the garbage collector, the shell) and the kernel's
link to the grader. The scan refuses those however they are reached: an import, an attribute of
another module (``torch.os``, ``dataclasses.sys``), a string naming them (``getattr(m, "os")``),
``getattr`` with a name computed at run time, or a special attribute that leads to them
(``__globals__``, ``__subclasses__``). Everything else an honest student writes is allowed:
``__future__`` imports, decorators and ``functools.wraps``, context managers, enums, classes with
special methods, ``setattr`` with a plain name, private attributes such as ``module._parameters``,
``%timeit`` and ``obj?`` lines. The sandbox (`course.grading.sandbox`) is the wall behind it.

A finding withholds the notebook's automatic points for the instructor to review, and names the
cell and line in plain words; it never crashes grading.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from IPython.core.inputtransformer2 import TransformerManager

# Modules that are handles on the OS, the interpreter or the kernel (and their submodules).
DENIED_MODULES = {
    # the operating system
    "os",
    "posix",
    "pathlib",
    "io",
    "shutil",
    "tempfile",
    "glob",
    "fnmatch",
    "socket",
    "ssl",
    "select",
    "selectors",
    "signal",
    "subprocess",
    "pty",
    "tty",
    "fcntl",
    "mmap",
    "resource",
    "multiprocessing",
    "concurrent",
    "asyncio",
    "threading",
    "sqlite3",
    "urllib",
    "http",
    "ftplib",
    "smtplib",
    "webbrowser",
    "zipfile",
    "tarfile",
    "shelve",
    "dbm",
    "atexit",
    # the interpreter
    "sys",
    "builtins",
    "gc",
    "inspect",
    "importlib",
    "pkgutil",
    "runpy",
    "zipimport",
    "ctypes",
    "cffi",
    "types",
    "code",
    "codeop",
    "dis",
    "marshal",
    "pickle",
    "copyreg",
    "dill",
    "cloudpickle",
    "traceback",
    "linecache",
    "pdb",
    "bdb",
    "trace",
    "tracemalloc",
    "faulthandler",
    "sysconfig",
    "site",
    "weakref",
    # standard modules that run a string as code or find any object by its dotted name
    "timeit",
    "cProfile",
    "profile",
    "doctest",
    "pydoc",
    "unittest",
    # the kernel and the grader
    "IPython",
    "ipykernel",
    "jupyter_client",
    "jupyter_core",
    "zmq",
    "traitlets",
    "nbgrader",
    "nbformat",
    "nbclient",
    "nbconvert",
    "course",
    "ipywidgets",
    "comm",
    "matplotlib_inline",  # IPython's inline backend: it holds get_ipython
    # parts of torch and numpy that load code or native libraries
    "torch.utils.cpp_extension",
    "torch.hub",
    "torch.package",
    "torch.multiprocessing",
    "torch.serialization",
    "torch._dynamo",
    "torch.utils.benchmark",  # its Timer runs a string as code
    "torch._jit_internal",
    "torch._utils",
    "logging.config",
    "numpy.ctypeslib",
    "numpy.lib.format",
    # the eleventh red team: each runs text as code with the interpreter's own builtins
    "rlcompleter",  # Completer.attr_matches: eval in the namespace it is handed
    "torch.fx",  # code generated from a graph whose nodes name any method
    "numpy.f2py",  # crackfortran's myeval
    # the twelfth red team and its review: text or files run as code, objects unpickled
    "sympy",  # sympify and parse_expr: eval with the interpreter's builtins
    "mpmath",  # its exec_
    "imp",  # importlib's predecessor
    "distutils",  # run_setup: exec of a file
    "setuptools",
    "pkg_resources",
    "ensurepip",
    "optparse",  # Values.read_file: exec of a file
    "torch.storage",  # _load_from_bytes: unpickles any bytes
    "torch._guards",  # Source.get_value: eval of a name given as text
}
# Names other modules give a refused module or one of the interpreter's functions the notebook
# may not call ungated (getattr, exec, open, ...): ``enum.bltns`` is builtins, ``collections._sys``
# is sys (the twelfth red team). `tests/test_codescan.py` looks for every such name in the modules
# the course's kernel can import and fails on one this list misses.
ALIASES = {
    "bltns",  # enum: builtins
    "_sys",  # collections, pprint, argparse: sys
    "_os",  # random, argparse, importlib: os
    "_open",  # numpy.lib._datasource: open
    "_builtin_open",  # tokenize, bz2: open
    "bltn_open",  # backports.tarfile: open
    "exec_",  # mpmath: exec
    "_imp",
    "_io",
    "_thread",
    "_types",
    "_weakref",
    "_socket",
    "_bootstrap",
    "_bootstrap_external",
    "mp",  # torch.cuda.tunable: multiprocessing
    "python_multiprocessing",  # torch.utils.data.dataloader: multiprocessing
    "_utils",  # torch._utils, torch._guards
    "_guards",
    "const_fold",  # torch.fx, under other names
    "exp_config",
    "fx_pytree",
    "fx_traceback",
    "_load_from_bytes",  # torch.storage's unpickler of any bytes, wherever it is kept
    # a tensor's version counter, by which the probes count optimizer updates (the thirteenth
    # red team): only torch's own in-place operations may move it
    "_unsafe_set_version_counter",
    "_unsafe_preserve_version_counter",
    "parse_expr",  # sympy's eval of text, wherever it is kept
    "sympify",
}
# Names that are everyday words for a student's own attributes (``self.config``, ``"{}".format``,
# ``x.storage()``) and also other modules' names for refused ones (``logging.config``,
# ``np.lib.format``, ``torch.hub``, ``torch.package``): not refused by name; the grading kernel
# reads each of them through its gated getattr, which refuses a refused module by its value
# (`course.grading.guard`). The scan refuses what that cannot see: such a name read by a match
# pattern or by attrgetter, or augmented in place on anything but a plain name.
GATED_ALIASES = {
    "config",
    "format",
    "hub",
    "machinery",
    "metadata",
    "package",
    "resources",
    "serialization",
    "storage",
    "util",
}
# Harmless names of a refused module, allowed in ``from MODULE import NAME``.
HARMLESS_IMPORTS = {"types": {"SimpleNamespace"}, "IPython.display": {"display", "clear_output"}}
# Special names a class body or a notebook may assign as ordinary Python does.
HARMLESS_DUNDERS = {
    "__slots__",
    "__match_args__",
    "__hash__",
    "__doc__",
    "__all__",
    "__version__",
    "__author__",
}
# Special attributes a hand-written decorator copies onto its wrapper (as functools.wraps does,
# without ``__wrapped__``, which the tripwire follows).
WRITABLE_DUNDERS = {"__name__", "__qualname__", "__doc__"}
DENIED_NAMES = {
    "exec": "runs code given as text",
    "eval": "runs code given as text",
    "compile": "makes code objects",
    "__import__": "imports modules by name",
    "globals": "reads the notebook's namespace directly",
    "locals": "reads a namespace directly (outside a function, the notebook's)",
    "vars": "reads objects' namespaces directly",
    "open": "opens files",
    "breakpoint": "starts the debugger",
    "get_ipython": "reaches the kernel's shell",
    "__builtins__": "reaches the interpreter's builtins",
    # a class body's table of fields: a dataclass pastes each key into code it runs
    "__annotations__": "names a class's fields as any text",
}
# Attributes (never needed here) that lead to frames, code, module namespaces or every class.
DENIED_ATTRIBUTES = {
    "_ip",  # IPython's `exit`, `quit` and display hooks hold the shell as `_ip`
    "get_ipython",  # the shell, as a name that modules importing IPython keep
    "__globals__",
    "__builtins__",
    "__subclasses__",
    "__code__",
    "__closure__",
    "__func__",
    "__self__",
    "__dict__",
    "__getattribute__",
    "__reduce__",
    "__reduce_ex__",
    "__import__",
    "__loader__",
    "__spec__",
    "__mro__",
    "__bases__",
    "__base__",
    "__traceback__",
    "__frame__",
    "__defaults__",
    "__kwdefaults__",
    "__objclass__",
    "__setstate__",
    "__getstate__",
    "__init_subclass__",
    "__subclasshook__",
    "__class_getitem__",
    "__set_name__",
    "__annotations__",
    "f_back",
    "f_globals",
    "f_locals",
    "f_builtins",
    "f_code",
    "f_trace",
    "tb_frame",
    "tb_next",
    "gi_frame",
    "gi_code",
    "cr_frame",
    "cr_code",
    "ag_frame",
    "ag_code",
    "with_traceback",
    "get_field",  # string.Formatter's: reads an attribute path given as text, at run time
    # the tenth red team: public helpers that read closures and frames, fetch any attribute or
    # object by a name given as text, or run text as code, with their own module's builtins
    "Formatter",  # string's: vformat fetches the path, a subclass's format_field keeps it
    "_jit_internal",  # torch's: get_closure, createResolutionCallbackFrom{Env,Frame,Closure}
    "get_closure",
    "createResolutionCallbackFromEnv",
    "createResolutionCallbackFromFrame",
    "createResolutionCallbackFromClosure",
    "_import_dotted_name",  # torch._utils': an import and a getattr chain
    "_create_fn",  # dataclasses': exec of the text it is given
    "BaseConfigurator",  # logging.config's: resolve() imports any dotted name
    "DictConfigurator",
    "dictConfig",
    "fileConfig",
    "fx",  # torch.fx and numpy.f2py, reached as attributes of the packages that import them
    "f2py",
    "_getframe",
    "_current_frames",
    "load_library",
    "set_eval_frame",
    "eval_frame",
    "load",
    "ctypeslib",
    # the kernel's link to the grader: a redirected stream's saved target is the kernel's own
    # stream, which holds the session that signs every message (the eighth red team)
    "_old_targets",
    "_new_target",
    "session",
    "pub_socket",
    "iopub_socket",
    "iopub_thread",
    "parent_header",
    "get_parent",
}
DENIED_ATTRIBUTE_PREFIXES = ("co_",)
# Strings that name a way out (``getattr(torch, "os")``, ``"{0.__globals__}".format(f)``).
DENIED_STRINGS = {
    "os",
    "sys",
    "builtins",
    "gc",
    "inspect",
    "importlib",
    "subprocess",
    "ctypes",
    "pickle",
    "marshal",
    "posix",
    "IPython",
    "course",
}
# operator's callables that reach attributes by name: called at once, with literal names, and
# never handed on under another name (``ag = operator.attrgetter; ag(name)``, the ninth red team).
# (getattr, setattr and delattr may take computed names: the kernel's are gated,
# `course.grading.guard`.)
BY_NAME = {"attrgetter", "methodcaller"}
# functools' copiers of attributes: with ``assigned`` or ``updated`` they read any attribute by
# name with the interpreter's getattr (the eleventh red team), so they take only the wrapped
# function (and the wrapper), called at once.
WRAPPERS = {"wraps": 1, "update_wrapper": 2}
# ``from __future__ import`` features that change nothing in Python 3 but annotations; the others
# (``barry_as_FLUFL``) change the grammar of later cells, which the scan would then not read.
HARMLESS_FUTURES = {
    "annotations",
    "nested_scopes",
    "generators",
    "division",
    "absolute_import",
    "with_statement",
    "print_function",
    "unicode_literals",
    "generator_stop",
}
# What writes or deletes an attribute by name: a special one (``object.__setattr__(torch,
# "__class__", Liar)`` gives a module a lying class) is refused like ``x.__class__ = ...``.
SETTERS = {"setattr", "delattr", "__setattr__", "__delattr__"}
# IPython line and cell magics an answer may keep (timing, help, listing variables).
ALLOWED_MAGICS = {
    "timeit",
    "time",
    "capture",
    "pinfo",
    "pinfo2",
    "who",
    "whos",
    "who_ls",
    "matplotlib",
}
CODE_MAGICS = {"timeit", "time", "capture"}  # their arguments are code, scanned like the rest
# Magics allowed with these arguments only: IPython's own autoreload (it re-imports modules whose
# files changed, and none can change in the sandbox), printing and traceback styles, the inline
# plots' format, the debugger turned off; any other extension or setting is code.
MAGIC_ARGUMENTS = {
    "load_ext": re.compile(r"\s*autoreload\s*"),
    "autoreload": re.compile(r"[\w\s-]*"),
    "precision": re.compile(r"\s*\d{0,2}\s*"),
    "xmode": re.compile(r"\s*(Plain|Context|Verbose|Minimal|Docs)?\s*"),
    "pdb": re.compile(r"\s*(off|0)\s*"),
    "config": re.compile(r"\s*InlineBackend\.figure_formats?\s*=\s*[\w'\"{}\[\], -]*"),
}


@dataclass(frozen=True)
class Finding:
    cell: int  # index of the cell in the notebook
    line: int
    reason: str

    def __str__(self) -> str:
        return f"cell {self.cell + 1}, line {self.line}: {self.reason}"


def denied_module(name: str) -> bool:
    """Whether graded code may not import a module: a refused one, one inside it, or one of the
    interpreter's private modules (``_io``, ``_thread``, ``_pickle``: the refused ones' insides)."""
    parts = name.split(".")
    private = parts[0].startswith("_") and parts[0] != "__future__"
    return private or any(".".join(parts[:n]) in DENIED_MODULES for n in range(1, len(parts) + 1))


def denied_attribute(name: str) -> bool:
    """Whether an attribute (or module) name is one graded code may not reach."""
    return (
        name in DENIED_ATTRIBUTES
        or name in DENIED_MODULES
        or name in ALIASES
        or name.startswith(DENIED_ATTRIBUTE_PREFIXES)
    )


def _joined(node: ast.AST) -> str | None:
    """The text of string constants joined by +, or None when it is anything else."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _joined(node.left), _joined(node.right)
        return None if left is None or right is None else left + right
    return None


def _parameters(arguments: ast.arguments) -> list[ast.arg]:
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
    return every + [a for a in (arguments.vararg, arguments.kwarg) if a is not None]


def _local_names(function: ast.AST) -> set[str]:
    """The variables a function (or lambda) binds for itself: its parameters and the names it
    assigns, not those it declares global or nonlocal, not those of the functions, classes and
    comprehensions inside it. In that function and the ones inside it, such a name is never the
    builtin."""
    names = {parameter.arg for parameter in _parameters(function.args)}
    declared: set[str] = set()
    body = function.body if isinstance(function.body, list) else [function.body]
    todo = list(body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            names.add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)  # its own scope is not this one: only its name is bound here
            todo.extend(node.decorator_list)
            continue
        elif isinstance(
            node, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
        ):
            continue  # scopes of their own: what they bind is not this function's
        todo.extend(ast.iter_child_nodes(node))
    return names - declared


def _is_shell_call(node: ast.AST) -> bool:
    """``get_ipython().<something>``: what IPython turns ``%``, ``!`` and ``?`` lines into."""
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Call)
        and isinstance(node.value.func, ast.Name)
        and node.value.func.id == "get_ipython"
    )


class _Scanner(ast.NodeVisitor):
    def __init__(self, magic_lines: bool):
        self.found: list[tuple[int, str]] = []
        self.magic_lines = magic_lines  # the cell's source has IPython syntax of its own
        self.functions = 0  # how deep in function bodies the visit is
        self.local_names: list[set[str]] = []  # each enclosing function's own variables
        self.class_names: set[int] = set()  # names a class body binds (ids of their nodes)
        self.called_by_name: set[int] = set()  # BY_NAME and WRAPPERS called as they may be

    def flag(self, node: ast.AST, reason: str) -> None:
        self.found.append((getattr(node, "lineno", 0), reason))

    def visit_Import(self, node):
        for alias in node.names:
            if denied_module(alias.name):
                self.flag(node, f"imports {alias.name}")

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if node.level:
            self.flag(node, "uses a relative import")
        if module == "__future__":
            for alias in node.names:
                if alias.name not in HARMLESS_FUTURES:
                    self.flag(node, f"imports {alias.name} from __future__ (it changes the syntax)")
            return
        for alias in node.names:
            if (alias.name in BY_NAME or alias.name in WRAPPERS) and alias.asname not in (
                None,
                alias.name,
            ):
                self.flag(node, f"imports {alias.name} under another name")
        harmless = HARMLESS_IMPORTS.get(module, set())
        if harmless and all(alias.name in harmless for alias in node.names):
            return
        if denied_module(module):
            self.flag(node, f"imports from {module}")
            return
        for alias in node.names:
            if alias.name != "*" and (
                denied_module(f"{module}.{alias.name}") or denied_attribute(alias.name)
            ):
                self.flag(node, f"imports {alias.name} from {module}")

    def visit_FunctionDef(self, node):
        arguments = node.args
        # Decorators, defaults and annotations run where the function is defined, not in it:
        # ``def f(open=open)`` hands the builtin in.
        for outside in [
            *getattr(node, "decorator_list", []),
            *arguments.defaults,
            *(d for d in arguments.kw_defaults if d is not None),
            *(p.annotation for p in _parameters(arguments) if p.annotation is not None),
            *([node.returns] if getattr(node, "returns", None) else []),
        ]:
            self.visit(outside)
        self.functions += 1
        self.local_names.append(_local_names(node))
        for statement in node.body if isinstance(node.body, list) else [node.body]:
            self.visit(statement)
        self.local_names.pop()
        self.functions -= 1

    def visit_ClassDef(self, node):
        """A class body may bind special methods by assignment as by ``def`` (``__str__ =
        str.__str__``); a special name the scan refuses stays refused."""
        for statement in node.body:
            targets = statement.targets if isinstance(statement, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Name) and target.id not in DENIED_NAMES:
                    self.class_names.add(id(target))
        self.generic_visit(node)

    visit_AsyncFunctionDef = visit_Lambda = visit_FunctionDef

    def _by_name(self, node: ast.AST, name: str) -> None:
        if (name in BY_NAME or name in WRAPPERS) and id(node) not in self.called_by_name:
            self.flag(node, f"uses {name} other than called at once")

    def visit_Name(self, node):
        if node.id == "locals" and self.functions:
            return  # a function's own names, copied: a debug print, never the notebook's
        self._by_name(node, node.id)
        if node.id in DENIED_NAMES and any(node.id in names for names in self.local_names):
            return  # a function's own variable (``vars = []``): the builtin is out of its reach
        if node.id in DENIED_NAMES:
            self.flag(node, f"uses {node.id}, which {DENIED_NAMES[node.id]}")
        elif (
            isinstance(node.ctx, ast.Store)
            and node.id.startswith("__")
            and node.id not in HARMLESS_DUNDERS
            and id(node) not in self.class_names
        ):
            self.flag(node, f"assigns the special name {node.id}")

    def visit_Attribute(self, node):
        self._by_name(node, node.attr)
        if denied_attribute(node.attr):
            self.flag(node, f"uses the attribute {node.attr}")
        elif (
            isinstance(node.ctx, (ast.Store, ast.Del))
            and node.attr.startswith("__")
            and not (isinstance(node.ctx, ast.Store) and node.attr in WRITABLE_DUNDERS)
        ):
            self.flag(node, f"writes the special attribute {node.attr}")
        self.generic_visit(node)

    def visit_Constant(self, node):
        if isinstance(node.value, str):
            self._string(node, node.value)

    def visit_BinOp(self, node):
        """Strings joined with + are read joined (``"__glo" + "bals__"``)."""
        if isinstance(node.op, ast.Add) and (text := _joined(node)) is not None:
            self._string(node, text)
        self.generic_visit(node)

    def _string(self, node: ast.AST, value: str) -> None:
        text = value.strip()
        named = [a for a in DENIED_ATTRIBUTES if a.startswith("__") and a in text]
        # A field path for str.format or string.Formatter ("0._ip", "{0.f_globals}") has no
        # space, outside or inside its braces; prose ("a docstring on torch.load") is not one.
        paths = re.findall(r"\{([^{}\s]*)\}", text) + ([] if re.search(r"\s", text) else [text])
        named += [
            a for path in paths for a in re.findall(r"\.(\w+)", path) if a in DENIED_ATTRIBUTES
        ]
        if named or text in DENIED_STRINGS or (text in DENIED_ATTRIBUTES and "_" in text):
            self.flag(node, f"names {(named or [text])[0]!r} in a string")

    def visit_Call(self, node):
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called in BY_NAME:
            names = node.args[:1] if called == "methodcaller" else node.args
            if not names or not all(
                isinstance(n, ast.Constant) and isinstance(n.value, str) for n in names
            ):
                self.flag(node, f"{called} with an attribute name computed at run time")
            elif gated := [n.value for n in names if n.value.split(".")[-1] in GATED_ALIASES]:
                self.flag(node, f"{called} of {gated[0]!r} (use the attribute itself)")
            self.called_by_name.add(id(func))
        elif called in WRAPPERS:
            if len(node.args) > WRAPPERS[called] or node.keywords:
                self.flag(node, f"{called} with attribute names to copy")
            self.called_by_name.add(id(func))
        elif called in SETTERS:
            # setattr(obj, name, ...) and object.__setattr__(obj, name, ...) name it second,
            # obj.__setattr__(name, ...) first: a special name in either place is refused but
            # those a decorator copies (``object.__setattr__(collections, "__all__", ...)`` made
            # ``from collections import *`` call what the answer chose: the twelfth red team).
            names = [n for n in node.args[:2] if isinstance(n, ast.Constant)]
            special = [n.value for n in names if str(n.value).startswith("__")]
            if special and special[0] not in WRITABLE_DUNDERS:
                self.flag(node, f"{called} on the special attribute {special[0]}")
            elif isinstance(func, ast.Attribute) and called[:2] == "__" and not _names_itself(node):
                # object.__setattr__ is not gated as the notebook's setattr is
                self.flag(node, f"{called} with an attribute name computed at run time")
        if _is_shell_call(func):
            self._shell(node)
            return
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        """``obj.config += x`` reads the attribute without the kernel's gate (`GATED_ALIASES`):
        the kernel checks it first when ``obj`` is a name or a chain of attributes."""
        target = node.target
        if isinstance(target, ast.Attribute) and target.attr in GATED_ALIASES:
            if not plain_chain(target.value):
                self.flag(node, f"augments .{target.attr} of a computed object")
        self.generic_visit(node)

    def visit_MatchClass(self, node):
        """``case object(__dict__=d)`` reads the attribute as ``x.__dict__`` would."""
        for name in node.kwd_attrs:
            if denied_attribute(name) or name in GATED_ALIASES:
                self.flag(node, f"uses the attribute {name}")
        self.generic_visit(node)

    def _shell(self, node: ast.Call) -> None:
        """A ``%magic``, ``!command`` or ``obj?`` line, as IPython rewrote it."""
        kind = node.func.attr
        magic = node.args[0].value if node.args and isinstance(node.args[0], ast.Constant) else ""
        if not self.magic_lines:
            self.flag(node, "uses get_ipython, which reaches the kernel's shell")
        elif kind == "run_line_magic" and _allowed_arguments(magic, node.args[1:]):
            pass
        elif kind in ("run_line_magic", "run_cell_magic") and magic in ALLOWED_MAGICS:
            if magic in CODE_MAGICS:
                for argument in node.args[1:]:
                    if isinstance(argument, ast.Constant) and isinstance(argument.value, str):
                        self._code(argument.value, node.lineno)
        elif kind in ("system", "getoutput"):
            self.flag(node, "runs a shell command (a ! line)")
        else:
            self.flag(node, f"uses the IPython magic %{magic or kind}")

    def _code(self, source: str, line: int) -> None:
        for _, reason in scan_source(source):
            self.found.append((line, reason))


def plain_chain(node: ast.AST) -> bool:
    """A name, or attributes of a name (``self.trainer``): read again, it is what it was."""
    while isinstance(node, ast.Attribute):
        node = node.value
    return isinstance(node, ast.Name)


def _names_itself(call: ast.Call) -> bool:
    """``X.__setattr__`` called with its attribute's name as a string, or as ``super()``'s in a
    class's own ``__setattr__`` (it sets the instance's own attribute)."""
    receiver = call.func.value
    if isinstance(receiver, ast.Call) and getattr(receiver.func, "id", None) == "super":
        return not receiver.args
    name = call.args[1] if len(call.args) > 2 else call.args[0] if call.args else None
    return isinstance(name, ast.Constant) and isinstance(name.value, str)


def _allowed_arguments(magic: str, arguments: list[ast.expr]) -> bool:
    pattern = MAGIC_ARGUMENTS.get(magic)
    return bool(
        pattern
        and len(arguments) == 1
        and isinstance(arguments[0], ast.Constant)
        and isinstance(arguments[0].value, str)
        and pattern.fullmatch(arguments[0].value)
    )


def scan_source(source: str) -> list[tuple[int, str]]:
    """(line, reason) for each thing in one cell's code that student code may not do."""
    python = TransformerManager().transform_cell(source)
    try:  # as the kernel compiles a cell: an ``await`` at the top level runs there
        tree = compile(python, "<cell>", "exec", ast.PyCF_ONLY_AST | ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return []  # it fails when it runs, like any syntax error; nothing to withhold
    magic_lines = python.strip() != source.strip() and "get_ipython" not in source
    scanner = _Scanner(magic_lines)
    scanner.visit(tree)
    return sorted(set(scanner.found))


def scan_notebook(notebook, trusted_sources: set[str]) -> list[Finding]:
    """Findings in every code cell whose source is not one of the trusted (locked or test)
    cells of the assignment's source: those are the cells a student wrote or changed."""
    findings = []
    for index, cell in enumerate(notebook.cells):
        if cell.cell_type != "code" or cell.source in trusted_sources:
            continue
        findings += [Finding(index, line, reason) for line, reason in scan_source(cell.source)]
    return findings


def trusted_cells(source_notebook) -> set[str]:
    """The sources of the locked and test cells of the assignment's own notebook."""
    trusted = set()
    for cell in source_notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and not meta.get("solution"):
            if meta.get("locked") or meta.get("grade"):
                trusted.add(cell.source)
    return trusted
