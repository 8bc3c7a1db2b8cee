"""The static scan of student code (course.grading.codescan): every correct answer passes it;
every way of reaching for the grading machinery we could think of is found, each with a reason a
reviewer can read."""

from __future__ import annotations

import nbformat
import pytest

from course.grading.codescan import scan_notebook, scan_source, trusted_cells
from course_testing import CONTRACT, REPO


def _protected(assignment: str = "01_requires_grad"):
    source = REPO / "source" / assignment / f"{assignment}.ipynb"
    return trusted_cells(nbformat.read(source, as_version=4))


@pytest.mark.parametrize(
    "answer",
    sorted((REPO / "fixtures" / "answers").glob("*/*/*.py")),
    ids=lambda p: f"{p.parts[-3]}/{p.parts[-2]}/{p.stem}",
)
def test_every_answer_fixture_passes(answer):
    """Correct or wrong, an honest answer is never flagged: being wrong is not tampering."""
    _, protected = _protected(answer.parts[-3])
    assert scan_source(answer.read_text(), protected) == []


@pytest.mark.parametrize("assignment", sorted(CONTRACT))
def test_the_lessons_own_cells_are_trusted(assignment):
    source = nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", as_version=4)
    trusted, protected = trusted_cells(source)
    assert scan_notebook(source, trusted, protected) == []
    assert {"torch", "expect", "expect_close", "print", "isinstance"} <= set(protected)
    assert not set(CONTRACT[assignment]) & set(protected), "the exercises' names are the student's"


ATTACKS = {
    "patch torch": ("torch.allclose = lambda *a, **k: True", "writes the attribute torch.allclose"),
    "patch through an alias": (
        "t = torch\nt.equal = lambda *a: True",
        "writes the attribute t.equal",
    ),
    "patch a method": ("torch.Tensor.sub = lambda *a: 0", "writes the attribute torch.Tensor.sub"),
    "patch a check helper": ("import course.lesson.checks", "imports course.lesson.checks"),
    "rebind a check helper": ("expect_close = lambda *a, **k: None", "rebinds expect_close"),
    "rebind a builtin": ("isinstance = lambda *a: True", "rebinds isinstance"),
    "rebind from a function": ("def f():\n    global expect\n    expect = print", "rebinds expect"),
    "rebind by import": ("from math import isclose as expect_close", "rebinds expect_close"),
    "input transformer": (
        "get_ipython().input_transformers_cleanup.append(str.upper)",
        "uses get_ipython",
    ),
    "magic": ("%load_ext cheat", "IPython magic or shell command"),
    "shell escape": ("!cp /dev/null gradebook.db", "IPython magic or shell command"),
    "os": ("import os\nos.system('true')", "imports os"),
    "dynamic import": ("m = __import__('o' + 's')", "uses __import__"),
    "exec": ("exec('torch.allclose = len')", "uses exec"),
    "computed getattr": ("getattr(torch, 'all' + 'close')", "getattr with a computed name"),
    "private torch": ("torch._C._set_grad_enabled(False)", "private attribute _C"),
    "dunder escape": ("().__class__.__base__.__subclasses__()", "special attribute __class__"),
    "frame walk": ("def g():\n    yield\nf = g().gi_frame.f_back", "uses gi_frame"),
    "tensor subclass": ("class T(torch.Tensor):\n    pass", "subclasses torch.Tensor"),
    "special method": (
        "class A:\n    def __eq__(self, other):\n        return True",
        "defines the special method __eq__",
    ),
    "type() class": ("T = type('T', (torch.Tensor,), {})", "creates a class with type"),
    "metaclass": ("class A(metaclass=abc.ABCMeta):\n    pass", "metaclass"),
    "update_wrapper": (
        "import functools\nfunctools.update_wrapper(torch, object)",
        "uses update_wrapper",
    ),
    "torch function mode": ("import torch.overrides", "imports torch.overrides"),
    "global module hook": (
        "torch.nn.modules.module.register_module_forward_hook(print)",
        "uses register_module_forward_hook",
    ),
    "default dtype": ("torch.set_default_dtype(torch.float64)", "uses set_default_dtype"),
    "read a file": ("open('../../source/x.ipynb').read()", "uses open"),
    "globals": ("globals()['expect'] = print", "uses globals"),
}


@pytest.mark.parametrize("name", sorted(ATTACKS))
def test_each_attack_is_found_with_its_reason(name):
    code, reason = ATTACKS[name]
    _, protected = _protected()
    found = scan_source(code, protected)
    assert found, f"{name} was not found"
    assert any(reason in r for _, r in found), found


ALLOWED = {
    "tensor attributes": "def f(x):\n    x.grad = None\n    x.requires_grad = False\n    return x",
    "a module of one's own": (
        "class Net(torch.nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.layer = torch.nn.Linear(1, 1)"
    ),
    "local names shadowing builtins": (
        "def f(values):\n    max = 0\n    input = values\n    return max"
    ),
    "the lesson's imports again": "import torch\nimport math",
    "getattr with a plain name": "getattr(torch, 'float32')",
    "no_grad as a context": "def f(m, x):\n    with torch.no_grad():\n        return m(x)",
    "a syntax error": "def f(:\n",  # fails when it runs; nothing to withhold
}


@pytest.mark.parametrize("name", sorted(ALLOWED))
def test_ordinary_code_is_not_flagged(name):
    _, protected = _protected()
    assert scan_source(ALLOWED[name], protected) == []


def test_only_cells_that_differ_from_the_source_are_scanned():
    source = nbformat.read(
        REPO / "source" / "01_requires_grad" / "01_requires_grad.ipynb", as_version=4
    )
    trusted, protected = trusted_cells(source)
    nb = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(next(iter(trusted))),  # a locked cell, as released
            nbformat.v4.new_markdown_cell("torch.allclose = None"),  # prose never runs
            nbformat.v4.new_code_cell("x = 1\ntorch.allclose = None"),
        ]
    )
    findings = scan_notebook(nb, trusted, protected)
    assert [(f.cell, f.line) for f in findings] == [(2, 2)]
    assert str(findings[0]).startswith("cell 3, line 2: writes the attribute torch.allclose")
