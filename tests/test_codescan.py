"""The static scan of student code (course.grading.codescan): every honest answer passes it, in
any style; every handle on the interpreter or the OS is found, however it is reached, with a
reason a student can read."""

from __future__ import annotations

import json
import subprocess
import sys

import nbformat
import pytest

from course.grading.codescan import scan_notebook, scan_source, trusted_cells
from course_testing import CONTRACT, REPO

HONEST = sorted((REPO / "fixtures" / "honest").glob("*/*/*.py"))


@pytest.mark.parametrize(
    "answer",
    HONEST + sorted((REPO / "fixtures" / "answers").glob("*/*/*.py")),
    ids=lambda p: f"{p.parts[-4]}/{p.parts[-3]}/{p.parts[-2]}/{p.stem}",
)
def test_every_honest_or_merely_wrong_answer_passes(answer):
    """Being wrong is not tampering, and no style is: __future__, %timeit, obj?, wraps,
    contextlib, enums, __repr__, setattr with a plain name, module._parameters, _foreach_*."""
    assert scan_source(answer.read_text()) == []


def test_the_honest_corpus_is_the_one_the_issue_measured():
    assert len(HONEST) >= 40
    styles = " ".join(p.read_text() for p in HONEST)
    for style in (
        "from __future__",
        "%timeit",
        "contextlib",
        "wraps",
        "__repr__",
        "setattr(",
        "_parameters",
        "_foreach_",
        "enum",
        "methodcaller",
        "__class__",
    ):
        assert style in styles, f"the corpus has no answer using {style}"


@pytest.mark.parametrize("assignment", sorted(CONTRACT))
def test_the_lessons_own_cells_are_trusted(assignment):
    source = nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    trusted = trusted_cells(source)
    assert trusted and scan_notebook(source, trusted) == []


# Each reaches the interpreter or the OS; the reason names what it used.
REFUSED = {
    "import os": ("import os\nos.system('true')", "imports os"),
    "from-import": ("from subprocess import run", "imports from subprocess"),
    "submodule of a denied module": ("import importlib.util", "imports importlib.util"),
    "os as an attribute of torch": ("torch.os.listdir('/')", "uses the attribute os"),
    "sys as an attribute of another module": (
        "import dataclasses\ndataclasses.sys",
        "attribute sys",
    ),
    "builtins through a module": ("import dataclasses\ndataclasses.builtins.exec", "builtins"),
    "inspect through a module": ("import dataclasses\ndataclasses.inspect.stack()", "inspect"),
    "from-import of a module attribute": ("from torch import os", "imports os from torch"),
    "getattr naming a module": ("getattr(torch, 'os')", "names 'os' in a string"),
    "getattr naming a special attribute": ("getattr(f, '__globals__')", "'__globals__'"),
    "format string reaching attributes": ("'{0.__globals__}'.format(f)", "'__globals__'"),
    "setattr of a special attribute": ("setattr(f, '__code__', g)", "special attribute __code__"),
    "writing a special attribute": ("f.__class__ = int", "writes the special attribute"),
    "locals() at the top level (the notebook's namespace)": (
        "locals()['check_leaves'] = print",
        "uses locals",
    ),
    "a field path inside braces of a longer string": (
        "'value: {0.f_globals} and more'.format(f)",
        "'f_globals'",
    ),
    "the shell through a module that imported IPython's": (
        "import matplotlib_inline.backend_inline as b\nb.get_ipython().ex('1')",
        "imports matplotlib_inline.backend_inline",
    ),
    "the shell as another module's attribute": ("m.get_ipython()", "get_ipython"),
    "a class given through object.__setattr__": (
        "object.__setattr__(torch, '__class__', Liar)",
        "__setattr__ on the special attribute __class__",
    ),
    "a class given through a bound __setattr__": (
        "t.__setattr__('__class__', Liar)",
        "__setattr__ on the special attribute __class__",
    ),
    "a special attribute deleted through object.__delattr__": (
        "object.__delattr__(m, '__call__')",
        "__delattr__ on the special attribute __call__",
    ),
    "code object": ("f.__code__", "__code__"),
    "every class": ("().__class__.__base__.__subclasses__()", "__base__"),
    "frames from a generator": ("def g():\n    yield\nf = g().gi_frame.f_back", "gi_frame"),
    "frames from a traceback": (
        "try:\n    1/0\nexcept Exception as e:\n    e.__traceback__",
        "__traceback__",
    ),
    "code attributes": ("f.__code__.co_consts", "co_consts"),
    "exec": ("exec('1')", "uses exec"),
    "eval": ("eval('1')", "uses eval"),
    "dynamic import": ("__import__('o' + 's')", "uses __import__"),
    "open": ("open('/etc/passwd').read()", "uses open"),
    "globals": ("globals()['expect'] = print", "uses globals"),
    "vars of a module": ("vars(torch)['os']", "uses vars"),
    "the builtins name": ("__builtins__['exec']", "__builtins__"),
    "assigning a special name": ("__name__ = 'torch'", "assigns the special name"),
    "the shell": ("get_ipython().run_cell('1')", "uses get_ipython"),
    "a shell escape": ("!cp /dev/null gradebook.db", "runs a shell command"),
    "a shell escape into a name": ("x = !ls", "runs a shell command"),
    "a magic that loads code": ("%load_ext cheat", "uses the IPython magic %load_ext"),
    "a cell magic running bash": ("%%bash\nls", "uses the IPython magic %bash"),
    "code inside %timeit": ("%timeit import os", "imports os"),
    "pickle through torch.load": ("torch.load(b, weights_only=False)", "uses the attribute load"),
    "attrgetter with a computed name": (
        "import operator\noperator.attrgetter('o' + 's')(torch)",
        "attrgetter with an attribute name computed",
    ),
    "the course package": ("import course.lesson.checks", "imports course.lesson.checks"),
    "IPython": ("from IPython import get_ipython", "imports from IPython"),
    "a relative import": ("from . import x", "relative import"),
    "ctypes": ("import ctypes\nctypes.string_at(0)", "imports ctypes"),
    "gc": ("import gc\ngc.get_objects()", "imports gc"),
    "threads": ("import threading", "imports threading"),
    # the fifth red team's ways to run a string or find an object by its dotted name
    "a string run by timeit": ("import timeit\ntimeit.timeit('x', number=1)", "imports timeit"),
    "a string run by the profiler": ("import cProfile", "imports cProfile"),
    "docstring examples run": ("from doctest import run_docstring_examples", "from doctest"),
    "an object found by name": ("import pydoc\npydoc.locate('x')", "imports pydoc"),
    "mock.patch by dotted name": ("from unittest import mock", "imports from unittest"),
    "torch's benchmark Timer": ("from torch.utils import benchmark", "imports benchmark"),
    "a field path in a string": ("string.Formatter().get_field('0._ip', (exit,), {})", "'_ip'"),
    "a special name split in two": ("f(x, '__glo' + 'bals__')", "'__globals__'"),
    # the eighth red team: a redirected stream's saved target is the kernel's, with its session
    "the kernel's stream behind a redirect": (
        "import contextlib\nr = contextlib.redirect_stdout(x)\nr.__enter__()\n"
        "real = r._old_targets[-1]",
        "uses the attribute _old_targets",
    ),
    "the kernel's session": ("stream.session.msg = forge", "uses the attribute session"),
    "the kernel's request": ("shell.kernel.get_parent()", "uses the attribute get_parent"),
    "the wrapper's target, which the tripwire follows": (
        "w.__wrapped__ = f",
        "writes the special attribute __wrapped__",
    ),
    "a magic that changes the shell's settings": (
        "%config InteractiveShell.ast_node_interactivity = 'all'",
        "uses the IPython magic %config",
    ),
    "the debugger on": ("%pdb on", "uses the IPython magic %pdb"),
    "code inside %%capture": ("%%capture out\nimport os", "imports os"),
    "IPython.display beyond display": ("from IPython.display import HTML", "IPython.display"),
    # the ninth red team: attribute readers handed on, a grammar the scan could not read
    "attrgetter under another name": (
        "import operator\nag = operator.attrgetter\nag(''.join(parts))(torch)",
        "uses attrgetter other than called at once",
    ),
    "attrgetter imported under another name": (
        "from operator import attrgetter as ag",
        "imports attrgetter under another name",
    ),
    "attrgetter handed to map": (
        "from operator import attrgetter\nlist(map(attrgetter, names))",
        "uses attrgetter other than called at once",
    ),
    "a future that changes the syntax": (
        "from __future__ import barry_as_FLUFL",
        "imports barry_as_FLUFL from __future__",
    ),
    "a field path read at run time": (
        "import string\nstring.Formatter().get_field('0.' + name, (f,), {})",
        "uses the attribute get_field",
    ),
    "code beside a top-level await": ("await thing()\nimport os", "imports os"),
    "vars called outside the function that binds the name": (
        "def f():\n    vars = []\ndef g(o):\n    return vars(o)",
        "uses vars",
    ),
    "vars bound only by a comprehension": (
        "def f(o):\n    [0 for vars in []]\n    return vars(o)",
        "uses vars",
    ),
    "vars declared global": (
        "def f(o):\n    global vars\n    vars = 1\n    return vars(o)",
        "uses vars",
    ),
    "open as a notebook variable": ("open = None", "uses open"),
    "a builtin handed in as a parameter's default": (
        "def f(open=open):\n    return open(p)",
        "uses open",
    ),
    "locals() as a default, outside the function": ("def f(x=locals()):\n    return x", "locals"),
    # the tenth red team: public helpers that read closures and frames or resolve names
    "torch's closure reader": (
        "from torch._jit_internal import get_closure",
        "imports from torch._jit_internal",
    ),
    "torch's resolver reached as an attribute": (
        "torch.jit._jit_internal.createResolutionCallbackFromEnv(f)(name)",
        "uses the attribute _jit_internal",
    ),
    "torch's dotted-name importer": (
        "torch._utils._import_dotted_name(n)",
        "uses the attribute _import_dotted_name",
    ),
    "dataclasses' code maker": ("dataclasses._create_fn('f', [], body)", "_create_fn"),
    "a Formatter subclass": (
        "import string\nclass F(string.Formatter):\n    pass",
        "uses the attribute Formatter",
    ),
    "logging.config's resolver": (
        "import logging.config\nlogging.config.BaseConfigurator({}).resolve(n)",
        "imports logging.config",
    ),
    # the eleventh red team: text run as code with the interpreter's own builtins, and
    # functools' attribute copiers told which attributes to copy
    "rlcompleter's eval": ("import rlcompleter", "imports rlcompleter"),
    "torch.fx's generated code": ("from torch import fx", "imports fx from torch"),
    "torch.fx as an attribute": ("torch.fx.symbolic_trace(m)", "uses the attribute fx"),
    "numpy.f2py's eval": ("import numpy.f2py.crackfortran", "imports numpy.f2py"),
    "a class body's field table": (
        "class C:\n    __annotations__['x'] = int",
        "uses __annotations__",
    ),
    "update_wrapper told what to copy": (
        "functools.update_wrapper(box, f, assigned=(name,), updated=())",
        "update_wrapper with attribute names to copy",
    ),
    "wraps told what to copy, positionally": (
        "@functools.wraps(f, (name,))\ndef g(): pass",
        "wraps with attribute names to copy",
    ),
    "update_wrapper handed on": (
        "copy_attrs = functools.update_wrapper",
        "uses update_wrapper other than called at once",
    ),
    "wraps imported under another name": ("from functools import wraps as w", "under another name"),
    # the twelfth red team and its review: refused modules under other names, a module's
    # __all__ set from outside, text and pickles run as code
    "builtins as enum keeps it": (
        "import enum\nG = enum.bltns.getattr",
        "uses the attribute bltns",
    ),
    "sys as collections keeps it": (
        "collections._sys.modules['builtins'].exec(text)",
        "uses the attribute _sys",
    ),
    "an alias imported by name": ("from random import _os", "imports _os from random"),
    "an interpreter's private module": ("import _io\n_io.open(path)", "imports _io"),
    "imp": ("import imp", "imports imp"),
    "a pickle of any bytes": ("torch.storage._load_from_bytes(data)", "_load_from_bytes"),
    "sympy's eval": ("import sympy\nsympy.parse_expr(text)", "imports sympy"),
    "optparse's exec of a file": ("import optparse", "imports optparse"),
    "a match pattern reading a refused attribute": (
        "match m:\n    case object(__dict__=d):\n        pass",
        "uses the attribute __dict__",
    ),
    "a match pattern reading an alias": (
        "match collections:\n    case object(_sys=s):\n        pass",
        "uses the attribute _sys",
    ),
    "a module's __all__ set from outside": (
        "object.__setattr__(collections, '__all__', names)",
        "__setattr__ on the special attribute __all__",
    ),
    "object.__setattr__ with a computed name": (
        "object.__setattr__(collections, '__a' + name, names)",
        "__setattr__ with an attribute name computed at run time",
    ),
    "a tensor's version counter set": (
        "torch._C._autograd._unsafe_set_version_counter(params, versions)",
        "uses the attribute _unsafe_set_version_counter",
    ),
    "a match pattern reading an everyday alias": (
        "match logging:\n    case object(config=c):\n        pass",
        "uses the attribute config",
    ),
    "attrgetter of an everyday alias": (
        "operator.attrgetter('lib.format')(np)",
        "attrgetter of 'lib.format'",
    ),
    "an everyday alias augmented on a computed object": (
        "modules()[0].config += 1",
        "augments .config of a computed object",
    ),
    "a bound __setattr__ with a computed name": (
        "collections.__setattr__(name, names)",
        "__setattr__ with an attribute name computed at run time",
    ),
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_each_handle_is_refused_with_its_reason(name):
    code, reason = REFUSED[name]
    found = scan_source(code)
    assert any(reason in r for _, r in found), f"{name}: {found}"


ALLOWED = {
    "a future import": "from __future__ import annotations",
    "tensor attributes": "def f(x):\n    x.grad = None\n    x.requires_grad = False\n    return x",
    "setattr with a plain name": "setattr(p, 'requires_grad', False)",
    "a class body binding a special method by assignment": (
        "import enum\nclass Kind(str, enum.Enum):\n    A = 'a'\n    __str__ = str.__str__"
    ),
    "locals() printed inside a function": "def f(x):\n    y = x + 1\n    print(locals())\n",
    "a docstring that names torch.load": (
        'def f(path):\n    """Like torch.load, but for a plain list of floats."""\n    return path'
    ),
    "a frozen dataclass's own __setattr__ with a plain name": (
        "object.__setattr__(self, 'total', 0.0)"
    ),
    "getattr with a computed name (gated at run time)": "getattr(model, name)",
    "reduce over getattr": "import functools\nfunctools.reduce(getattr, 'a.b'.split('.'), m)",
    "patching torch (judged outside the kernel: it earns nothing)": "torch.allclose = print",
    "a helper named like the lesson's": "def f(x):\n    return x * 2\nmlp = None",
    "special methods": (
        "class A:\n    def __repr__(self):\n        return 'A'\n"
        "    def __eq__(self, o):\n        return True"
    ),
    "class of an object": "type(x).__name__ + x.__class__.__name__",
    "a str enum": "import enum\nclass Health(str, enum.Enum):\n    OK = 'ok'",
    "contextlib and wraps": (
        "import contextlib, functools\n@contextlib.contextmanager\ndef c():\n    yield\n"
        "functools.wraps(print)"
    ),
    "private attributes": "m._parameters\ntorch._foreach_zero_([])",
    "methodcaller with a literal": "import operator\noperator.methodcaller('numel')",
    "%timeit and help lines": "%timeit -n1 sum([1])\nx = 1\nx?",
    "a syntax error": "def f(:\n",  # fails when it runs; nothing to withhold
    # styles the eighth round's honest students wrote
    "display imported from IPython": "from IPython.display import display, clear_output",
    "a hand-written decorator copying the name": (
        "def logged(f):\n    def w(*a):\n        return f(*a)\n"
        "    w.__name__ = f.__name__\n    w.__qualname__ = f.__qualname__\n"
        "    w.__doc__ = f.__doc__\n    return w"
    ),
    "a version string": "__version__ = '0.1'\n__author__ = 'me'",
    "printing and traceback settings": "%precision 4\n%xmode Minimal\n%pdb off\nx = 1",
    "the inline plots' format": "%config InlineBackend.figure_format = 'retina'",
    "a captured cell": "%%capture out\nx = 1",
    # the ninth round's honest students
    "a function's own variable named like a builtin": (
        "def leaf_inputs(y):\n    vars = []\n    vars.append(y)\n    return vars"
    ),
    "a parameter named like a builtin": "def f(open=None, input=0):\n    return open, input",
    "Python 2's futures": "from __future__ import division, print_function, absolute_import",
    "functools.wraps as a decorator": (
        "import functools\ndef deco(f):\n    @functools.wraps(f)\n    def g(*a):\n"
        "        return f(*a)\n    return g"
    ),
    "update_wrapper of a wrapper and a function": "functools.update_wrapper(g, f)",
    "attrgetter imported and called with a literal": (
        "from operator import attrgetter\nsorted(xs, key=attrgetter('name'))"
    ),
    "a class's own __setattr__ calling super's": (
        "class Tracked:\n    def __setattr__(self, name, value):\n"
        "        super().__setattr__(name, value)"
    ),
    "a frozen dataclass setting its own field": (
        "def __post_init__(self):\n    object.__setattr__(self, 'total', self.a + self.b)"
    ),
    "a decorator copying the name by hand": "setattr(wrapper, '__name__', f.__name__)",
    "a tensor's storage and a string's format": (
        "same = x.untyped_storage().data_ptr() == y.storage().data_ptr()\n"
        "print('{:.3f}'.format(x.item()))"
    ),
    "a student's own config, metadata, package and hub": (
        "class Trainer:\n    def __init__(self):\n        self.config = {}\n"
        "        self.metadata = {}\n        self.package = torch\n        self.hub = {}\n"
        "        self.config['lr'] = 0.1\n        self.trainer.config += 1"
    ),
    "a match pattern reading fields": ("match p:\n    case Point(x=0, y=y):\n        print(y)"),
}


def test_a_string_annotation_is_scanned_before_typing_runs_it():
    """typing.get_type_hints evaluates string annotations as code: one built at run time, or one
    that calls anything, is refused in the grading kernel, and a library's own annotations made
    while it is imported are not (run in a process of its own: the gate patches typing)."""
    program = """
import typing
from course.grading import guard
guard._scan_string_annotations()
def f(x: "".join(["__imp", "ort__('o", "s')"])): pass
try:
    typing.get_type_hints(f)
except SyntaxError as error:
    print("refused:", error)
def g(x: "list[int]"): pass
print(typing.get_type_hints(g))
def ungated(x: "getattr"): pass
try:
    print("evaluated:", typing.get_type_hints(ungated, globalns={}))
except SyntaxError as error:
    print("name refused:", error)
import collections  # a forward reference made by the import machinery from a module's __all__
made, kept = [], collections.__all__
collections.__all__ = map(made.append, map(typing.ForwardRef, ["collections.__dict__"]))
try:
    from collections import *
except SyntaxError as error:
    print("__all__ refused:", error)
except TypeError:
    print("__all__ made", made)
collections.__all__ = kept
def h(x: "_take(getattr)"): pass
try:
    typing.get_type_hints(h, globalns={"_take": print})
except SyntaxError as error:
    print("call refused:", error)
import torch  # the first optimizer imports torch._dynamo, whose annotations name torch.fx
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
print("a library's own annotations pass")
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert "refused: a string annotation that graded code may not run" in done.stdout
    assert "{'x': list[int]}" in done.stdout, done.stdout
    assert "call refused: a string annotation that graded code may not run: it calls" in done.stdout
    assert "name refused: a string annotation that graded code may not run: it names getattr" in (
        done.stdout
    )
    assert "__all__ refused: a string annotation that graded code may not run: uses the " in (
        done.stdout
    )
    assert "a library's own annotations pass" in done.stdout


def test_a_test_cells_own_names_never_replace_the_students():
    """A test cell that binds `first` leaves the student's helper `first` as it was (the hidden
    tests call the student's functions after the last cell); what it adds stays for the tests
    below, and the student's value of a lesson name (`probe`) comes back after the test."""
    program = """
from IPython.core.interactiveshell import InteractiveShell
from course.grading import guard
shell = InteractiveShell.instance()
shell.run_cell("probe = 'the lesson'", store_history=True)
guard._lesson.update(probe=shell.user_ns["probe"])
shell.run_cell("first = 'the student'; probe = 'the student'", store_history=True)
guard.lend()
shell.run_cell("assert probe == 'the lesson'; first = 'the test'; helper = 'the test'; 42",
               store_history=True)
guard.give_back()
print(shell.user_ns["first"], "|", shell.user_ns["probe"], "|", shell.user_ns["helper"], "|",
      shell.user_ns["_"])
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.split("\n")[-2] == "the student | the student | the test | 42", done.stdout


def test_a_string_annotation_is_scanned_when_the_answer_runs_inside_an_import(tmp_path):
    """A library's annotations made while it is imported pass unscanned, but not one the
    notebook's own code makes there (a warning hook of the answer's, run by a module's import)."""
    (tmp_path / "warns_on_import.py").write_text("import warnings\nwarnings.warn('imported')\n")
    cell = "\n".join(
        [
            "import typing, warnings",
            'def h(x: "torch" + ".fx"): pass',
            "def hook(*args, **kwargs):",
            "    try:",
            "        typing.get_type_hints(h)",
            "        print('evaluated')",
            "    except SyntaxError as error:",
            "        print('refused:', error)",
            "warnings.showwarning = hook",
            "warnings.simplefilter('always')",
            "import warns_on_import",
        ]
    )
    program = "\n".join(
        [
            "import sys",
            f"sys.path.insert(0, {str(tmp_path)!r})",
            "from IPython.core.interactiveshell import InteractiveShell",
            "from course.grading import guard",
            "guard._scan_string_annotations()",
            f"InteractiveShell.instance().run_cell({cell!r})",
        ]
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert "refused: a string annotation that graded code may not run" in done.stdout, done


def test_computed_names_fetch_none_of_the_interpreters_ungated_functions():
    """Wherever another object keeps the interpreter's getattr, exec or open (numpy's
    `_datasource._open`), a computed name does not fetch it; a hand-written decorator may still
    copy a function's name."""
    import types

    from course.grading.guard import _gated_getattr, _gated_setattr

    for ungated in (getattr, exec, open):
        holder = types.SimpleNamespace(kept=ungated, plain=len)
        with pytest.raises(AttributeError, match="not available to graded code"):
            _gated_getattr(holder, "kept")
        assert _gated_getattr(holder, "plain") is len

    def wrapper():
        pass

    _gated_setattr(wrapper, "__name__", "answer")
    assert wrapper.__name__ == "answer"
    with pytest.raises(AttributeError, match="special attribute __class__"):
        _gated_setattr(wrapper, "__class__", type)


def test_everyday_names_that_are_also_modules_aliases_are_checked_by_value():
    """``self.config`` and ``"{}".format`` are the student's own; ``logging.config`` and
    ``np.lib.format`` are refused modules under the same words: the grading kernel compiles these
    names' reads through its gated getattr, which refuses the module by its value, however the
    object was named (``t = torch; t.package``) and when augmented in place."""
    program = """
from IPython.core.interactiveshell import InteractiveShell
from course.grading import guard
shell = InteractiveShell.instance()
shell.run_cell("import logging, logging.config, numpy as np, torch")
guard.snapshot()
cells = {
    "own": "class T:\\n    def __init__(self):\\n        self.config = {'lr': 0.1}\\n"
           "        self.config |= {'n': 2}\\n"
           "print(T().config, '{:.2f}'.format(1.5), torch.ones(1).untyped_storage().nbytes())",
    "logging.config": "logging.config._resolve('builtins.getattr')",
    "np.lib.format": "np.lib.format.read_array",
    "aliased torch": "t = torch\\nt.package.sys_importer",
    "augmented": "logging.config += 1",
}
for name, cell in cells.items():
    result = shell.run_cell(cell)
    print("|", name, result.error_in_exec)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    verdicts = [line for line in done.stdout.splitlines() if line.startswith("| ")]
    assert verdicts == [
        "| own None",
        "| logging.config the module logging.config is not available to graded code",
        "| np.lib.format the module numpy.lib.format is not available to graded code",
        "| aliased torch the module torch.package is not available to graded code",
        "| augmented the module logging.config is not available to graded code",
    ], done.stdout
    assert "{'lr': 0.1, 'n': 2} 1.50 4" in done.stdout


def test_the_grading_kernel_sets_no_version_counter():
    """The probes count optimizer updates by the parameters' version counters: torch's setter
    refuses in the grading kernel, called directly or by its preserving context; in-place
    operations still move the counter."""
    program = """
import torch
from course.grading import guard
guard._refuse_version_setting()
w = torch.zeros(2, requires_grad=True)
for name, route in {
    "setter": lambda: torch._C._autograd._unsafe_set_version_counter((w,), (0,)),
    "context": lambda: torch.autograd.grad_mode._unsafe_preserve_version_counter(w).__exit__(),
}.items():
    try:
        route()
        print(name, "set")
    except RuntimeError as error:
        print(name, "refused:", error)
with torch.no_grad():
    w.add_(1)
print("version", w._version)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert done.stdout.splitlines() == [
        "setter refused: graded code may not set a tensor's version counter",
        "context refused: graded code may not set a tensor's version counter",
        "version 1",
    ], done.stdout


def test_the_grading_kernel_unpickles_nothing():
    """A pickle calls what it names (``builtins.exec`` with any text): in the grading kernel every
    unpickler refuses, wherever a library keeps it; copying a model still works."""
    program = """
import copy, io, pickle
import numpy, torch, torch.utils.data
from multiprocessing.reduction import ForkingPickler
from course.grading import guard
guard._refuse_unpickling()
buffer = io.BytesIO()
numpy.save(buffer, numpy.array([{"a": 1}], dtype=object), allow_pickle=True)
routes = {
    "pickle.loads": lambda: pickle.loads(pickle.dumps(1)),
    "pickle.Unpickler": lambda: pickle.Unpickler(io.BytesIO(pickle.dumps(1))).load(),
    "the Python unpickler": lambda: pickle._loads(pickle.dumps(1)),
    "torch.storage": lambda: torch.storage._load_from_bytes(pickle.dumps(1)),
    "numpy.load": lambda: numpy.load(io.BytesIO(buffer.getvalue()), allow_pickle=True),
    "ForkingPickler": lambda: ForkingPickler.loads(pickle.dumps(1)),
}
for name, route in routes.items():
    try:
        print(name, "unpickled", route())
    except pickle.UnpicklingError as error:
        print(name, "refused:", error)
print("copied", copy.deepcopy(torch.nn.Linear(2, 1)).weight.shape)
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, cwd=REPO
    )
    lines = done.stdout.splitlines()
    assert [line.split(" refused: ")[0] for line in lines if " refused: " in line] == [
        "pickle.loads",
        "pickle.Unpickler",
        "the Python unpickler",
        "torch.storage",
        "numpy.load",
        "ForkingPickler",
    ], done.stdout
    assert "copied torch.Size([1, 2])" in lines


@pytest.mark.parametrize("name", ["attrgetter", "methodcaller", "get_field", "__globals__"])
def test_computed_names_cannot_fetch_what_the_scan_refuses(name):
    import operator

    from course.grading.guard import _gated_getattr

    with pytest.raises(AttributeError, match="not available to graded code"):
        _gated_getattr(operator, name)
    assert _gated_getattr(operator, "add") is operator.add


ALIAS_SURVEY = """
import builtins, importlib, json, sys, types
import matplotlib.pyplot, numpy, torch, torch.func, torch.nn, torch.optim
from course.grading.codescan import GATED_ALIASES, denied_attribute, denied_module
from course.grading.guard import UNGATED
for name in sorted(sys.stdlib_module_names - {"antigravity", "this", "tkinter", "turtledemo"}):
    if not denied_module(name):
        try:
            importlib.import_module(name)
        except Exception:
            pass
def refused(module):
    top = module.__name__.split(".")[0]
    if top.startswith("_"):  # an accelerator (_random, _sre) is what its public module is
        return denied_module(top.lstrip("_"))
    return denied_module(module.__name__)
ungated = {id(vars(builtins)[name]) for name in UNGATED}
found = set()
for name, module in list(sys.modules.items()):
    if not isinstance(module, types.ModuleType) or denied_module(name):
        continue
    for attribute, value in list(vars(module).items()):
        if attribute[:2] == "__" or denied_attribute(attribute) or attribute in GATED_ALIASES:
            continue
        if isinstance(value, types.ModuleType) and refused(value) or id(value) in ungated:
            found.add(f"{name}.{attribute}")
print(json.dumps(sorted(found)))
"""


def test_no_module_the_kernel_can_import_keeps_a_refused_one_under_another_name():
    """``enum.bltns`` is builtins and ``collections._sys`` is sys (the twelfth red team): every
    module of the standard library, torch, NumPy and matplotlib (and all they import) is read for
    attributes that hold a refused module or one of the interpreter's functions the notebook may
    not call ungated; the scan must refuse each such name (ALIASES). A new version of any of them
    that adds one fails here."""
    done = subprocess.run(
        [sys.executable, "-c", ALIAS_SURVEY], capture_output=True, text=True, check=True, cwd=REPO
    )
    assert json.loads(done.stdout.splitlines()[-1]) == []


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_ordinary_code_is_not_flagged(name):
    assert scan_source(ALLOWED[name]) == []


def test_only_cells_that_differ_from_the_source_are_scanned():
    source = nbformat.read(
        REPO / "source" / "01_requires_grad" / "01_requires_grad.ipynb", as_version=4
    )
    trusted = trusted_cells(source)
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(next(iter(trusted))),  # a locked cell, as released
            nbformat.v4.new_markdown_cell("import os"),  # prose never runs
            nbformat.v4.new_code_cell("x = 1\nimport os"),
        ]
    )
    findings = scan_notebook(nb, trusted)
    assert [(f.cell, f.line) for f in findings] == [(2, 2)]
    assert str(findings[0]) == "cell 3, line 2: imports os"
