"""The calls the grader makes into a kernel, as code strings (`course.grading.kernelcalls`): each
names a function the kernel's `course` has, and runs it with the arguments given."""

from __future__ import annotations

import ast
import importlib

import pytest

from course.grading import kernelcalls


@pytest.mark.parametrize(("module", "function"), kernelcalls.TARGETS)
def test_every_target_resolves_to_a_function(module, function):
    assert callable(getattr(importlib.import_module(module), function))


@pytest.mark.parametrize(
    ("code", "target", "arguments"),
    [
        (kernelcalls.send_records("x = 1\n", 7), ("course.lesson.probes", "send"), ["x = 1\n", 7]),
        (
            kernelcalls.watch_test_cells(["b", "a", "b"]),
            ("course.lesson.testnames", "watch"),
            [["a", "b"]],
        ),
    ],
)
def test_a_call_runs_its_target_with_its_arguments(code, target, arguments):
    """The string is one call: its callee, evaluated as the kernel would, is the target's
    function; its arguments are the values given (literals: nothing of a student's is code)."""
    call = ast.parse(code, mode="eval").body
    assert isinstance(call, ast.Call) and not call.keywords
    callee = eval(compile(ast.Expression(call.func), "<call>", "eval"))
    module, function = target
    assert callee is getattr(importlib.import_module(module), function)
    assert [ast.literal_eval(a) for a in call.args] == arguments


def test_a_call_to_anything_else_is_refused():
    with pytest.raises(AssertionError):
        kernelcalls._call("course.lesson.probes", "collect", "x = 1\n", 7)
