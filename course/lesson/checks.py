"""Tensor-aware checks for the notebooks' test cells.

Runs in: a student's kernel, and a grading kernel running the same notebook.

Each check raises :class:`CheckFailed` with a message written for the student (what is wrong and,
where we can guess it, the likely mistake) instead of a bare ``AssertionError``. The module holds
no answers: expected values are computed by the test cells themselves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = [
    "CheckFailed",
    "expect",
    "expect_type",
    "expect_tensor",
    "expect_float",
    "expect_close",
    "expect_raises",
    "choice",
    "expect_runs",
]


class CheckFailed(AssertionError):
    """A test-cell check failed; the message says what is wrong in the student's terms."""


def expect(condition: Any, message: str) -> None:
    """Fail with ``message`` unless ``condition`` is true."""
    if not condition:
        raise CheckFailed(message)


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)} and dtype {value.dtype}"
    if value is None:
        return "None"
    kind = type(value).__name__
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def expect_type(value: Any, kind: type | tuple[type, ...], name: str = "the result") -> None:
    """Fail unless ``value`` is an instance of ``kind`` (bools are not accepted as numbers)."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        ok = False
    else:
        ok = isinstance(value, kinds)
    names = " or ".join(k.__name__ for k in kinds)
    article = "an" if names[0] in "aeiou" else "a"
    expect(ok, f"{name} should be {article} {names}, but it is {_describe(value)}.")


def expect_tensor(
    value: Any,
    name: str = "the result",
    *,
    shape: Sequence[int] | None = None,
    dtype: torch.dtype | None = None,
    requires_grad: bool | None = None,
    leaf: bool | None = None,
) -> torch.Tensor:
    """Check that ``value`` is a tensor with the given properties and return it."""
    expect_type(value, torch.Tensor, name)
    if shape is not None:
        expect(
            tuple(value.shape) == tuple(shape),
            f"{name} has shape {tuple(value.shape)}, expected {tuple(shape)}.",
        )
    if dtype is not None:
        expect(value.dtype == dtype, f"{name} has dtype {value.dtype}, expected {dtype}.")
    if requires_grad is not None:
        if requires_grad:
            expect(
                value.requires_grad,
                f"{name} does not require grad: use requires_grad=True or .requires_grad_().",
            )
        else:
            expect(
                not value.requires_grad,
                f"{name} still requires grad: compute it with gradient tracking off "
                "(inside torch.no_grad()).",
            )
    if leaf is not None:
        if leaf:
            expect(
                value.is_leaf,
                f"{name} is not a leaf (it has grad_fn={type(value.grad_fn).__name__}): it is "
                "the result of an operation recorded on a tensor that requires grad. Compute on "
                "tensors that do not require grad (detach() a tracked one, or work inside "
                "torch.no_grad()) and call requires_grad_() last: on a result, requires_grad_() "
                "changes nothing.",
            )
        else:
            expect(not value.is_leaf, f"{name} is a leaf, expected the result of an operation.")
    return value


def expect_float(value: Any, name: str = "the result") -> float:
    """Check that ``value`` is a Python float (not a tensor) and return it."""
    if isinstance(value, torch.Tensor):
        raise CheckFailed(
            f"{name} should be a Python float, but it is {_describe(value)}: call .item() on it."
        )
    expect_type(value, float, name)
    return value


def _as_tensor(value: Any) -> torch.Tensor:
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", torch.float64)
    return torch.as_tensor(value, dtype=torch.float64)


def _first_difference(
    actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol: float
) -> str:
    bad = ~torch.isclose(actual, expected, rtol=rtol, atol=atol, equal_nan=True)
    where = tuple(int(i) for i in bad.nonzero()[0].tolist()) if actual.dim() else ()
    got, want = actual[where].item(), expected[where].item()
    place = f" at index {where}" if where else ""
    return f"got {got:.6g}{place}, expected {want:.6g}"


def expect_close(
    actual: Any,
    expected: Any,
    name: str = "the result",
    *,
    hint: str | None = None,
    rtol: float = 1e-5,
    atol: float = 1e-6,
) -> None:
    """Check that ``actual`` matches ``expected`` (numbers, lists or tensors) within tolerance.

    ``hint`` names the likely mistake; it is added to the message when the values differ, and
    when ``actual`` is None it replaces the generic guess (a forgotten ``return``), which is wrong
    where ``actual`` is not a return value (a ``.grad`` that nothing filled, say).
    """
    if expected is not None and actual is None:
        guess = hint or "did the function forget to return a value?"
        raise CheckFailed(f"{name} is None: {guess}")
    try:
        got = _as_tensor(actual)
    except (TypeError, ValueError, RuntimeError):
        raise CheckFailed(f"{name} should be numeric, but it is {_describe(actual)}.") from None
    want = _as_tensor(expected)
    expect(
        got.shape == want.shape,
        f"{name} has shape {tuple(got.shape)}, expected {tuple(want.shape)}.",
    )
    if not torch.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
        message = f"{name} is wrong: {_first_difference(got, want, rtol, atol)}."
        if hint:
            message += f" {hint}"
        raise CheckFailed(message)


def expect_raises(
    exception: type[BaseException],
    call: Callable[[], Any],
    message: str,
    *,
    match: str | None = None,
) -> BaseException:
    """Run ``call`` and fail with ``message`` unless it raises ``exception`` (containing ``match``).

    An unfinished stub's NotImplementedError never counts as the expected error, even where
    ``exception`` is its base class RuntimeError.
    """
    try:
        call()
    except exception as error:
        if isinstance(error, NotImplementedError) and exception is not NotImplementedError:
            raise
        if match is not None and match not in str(error):
            raise CheckFailed(f"{message} (the error should mention {match!r}, it says {error})")
        return error
    raise CheckFailed(message)


def choice(answer: Any, options: Sequence[str], name: str) -> str:
    """A quick-check answer, read the one way every notebook reads it: a string naming one of
    ``options`` in either case, surrounding spaces and a closing ``)`` or ``.`` ignored ("B",
    " b", "b)"). Returns the option in lower case; fails, naming the options, otherwise."""
    allowed = ", ".join(repr(o) for o in options)
    expect(
        isinstance(answer, str), f"{name} should be a string, one of {allowed}; it is {answer!r}."
    )
    letter = answer.strip().rstrip(").").strip().lower()
    expect(letter in options, f"{name} should be one of {allowed}; it is {answer!r}.")
    return letter


def expect_runs(call: Callable[[], Any], name: str, hints: dict[str, str] | None = None) -> Any:
    """Return ``call()``; an error it raises becomes a :class:`CheckFailed` for the student.

    The message names ``name`` and the error, and adds the explanation from ``hints`` whose key
    occurs in ``"<ErrorType>: <message>"`` (the first that does), so a raw error such as
    ``'NoneType' object has no attribute 'zero_'`` comes with the likely mistake behind it. The
    original error stays attached as the cause, so the traceback still shows the line that failed.
    An unfinished stub's NotImplementedError and a failed check pass through unchanged.
    """
    try:
        return call()
    except (NotImplementedError, CheckFailed):
        raise
    except Exception as error:
        text = f"{type(error).__name__}: {error}"
        first_line = text.strip().splitlines()[0] if text.strip() else type(error).__name__
        if len(first_line) > 200:
            first_line = first_line[:197] + "..."
        hint = next((h for key, h in (hints or {}).items() if key in text), None)
        message = f"{name} raised {first_line}"
        message += "" if message.endswith((".", "!", "?")) else "."
        if hint:
            message += f" {hint}"
        raise CheckFailed(message) from error
