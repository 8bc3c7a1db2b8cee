"""The check helpers: each passes on a right value and fails, with a helpful message, on a wrong
one."""

import pytest
import torch

from course.lesson.checks import (
    CheckFailed,
    choice,
    expect,
    expect_close,
    expect_float,
    expect_raises,
    expect_runs,
    expect_tensor,
    expect_type,
)


def test_expect_passes_and_fails_with_message():
    expect(True, "unused")
    with pytest.raises(CheckFailed, match="the reason"):
        expect(False, "the reason")


def test_check_failed_is_an_assertion_error_so_nbgrader_counts_it_as_a_failed_test():
    assert issubclass(CheckFailed, AssertionError)


def test_expect_type_rejects_bool_for_numbers_and_names_the_type():
    expect_type(3, int)
    with pytest.raises(CheckFailed, match="should be an int, but it is a bool"):
        expect_type(True, int)
    with pytest.raises(CheckFailed, match="it is a list"):
        expect_type([1], (int, float))


def test_expect_tensor_checks_each_property():
    leaf = torch.zeros(2, 3, requires_grad=True)
    assert (
        expect_tensor(leaf, shape=(2, 3), dtype=torch.float32, requires_grad=True, leaf=True)
        is leaf
    )
    with pytest.raises(CheckFailed, match=r"shape \(2, 3\), expected \(3, 2\)"):
        expect_tensor(leaf, shape=(3, 2))
    with pytest.raises(CheckFailed, match="dtype torch.float32, expected torch.float64"):
        expect_tensor(leaf, dtype=torch.float64)
    with pytest.raises(CheckFailed, match="does not require grad"):
        expect_tensor(torch.zeros(1), requires_grad=True)
    with pytest.raises(CheckFailed, match="still requires grad"):
        expect_tensor(leaf, requires_grad=False)
    with pytest.raises(CheckFailed, match="not a leaf .*MulBackward0.*requires_grad_"):
        expect_tensor(leaf * 2, leaf=True)
    with pytest.raises(CheckFailed, match="should be a Tensor, but it is a list"):
        expect_tensor([1.0])


def test_expect_float_rejects_tensors_with_a_hint():
    assert expect_float(1.5) == 1.5
    with pytest.raises(CheckFailed, match=r"call \.item\(\)"):
        expect_float(torch.tensor(1.5))
    with pytest.raises(CheckFailed, match="should be a float"):
        expect_float(None)


def test_expect_close_accepts_equal_values_in_any_container():
    expect_close(torch.tensor([1.0, 2.0]), [1.0, 2.0])
    expect_close(2.0, torch.tensor(2.0, dtype=torch.float64))
    expect_close(torch.tensor([[1.0]], requires_grad=True), [[1.0]])


def test_expect_close_reports_where_and_hint():
    with pytest.raises(CheckFailed, match=r"got 5 at index \(1,\), expected 2\. did you") as info:
        expect_close(torch.tensor([1.0, 5.0]), [1.0, 2.0], hint="did you forget to zero .grad?")
    assert "the result is wrong" in str(info.value)
    with pytest.raises(CheckFailed, match=r"shape \(2,\), expected \(3,\)"):
        expect_close([1.0, 2.0], [1.0, 2.0, 3.0])
    with pytest.raises(CheckFailed, match="is None: did the function forget to return"):
        expect_close(None, 1.0)
    with pytest.raises(CheckFailed, match="should be numeric"):
        expect_close("abc", 1.0)
    with pytest.raises(CheckFailed):
        expect_close(float("nan"), 1.0)


def test_expect_close_of_none_gives_the_tests_own_hint_not_the_generic_guess():
    """A None that is not a return value (a .grad nothing filled) is explained by the hint the
    test gives, never by "did the function forget to return a value?"."""
    hint = "backward() must run so that w.grad holds the total."
    with pytest.raises(CheckFailed) as info:
        expect_close(None, [9.0, 9.0], "w.grad", hint=hint)
    assert str(info.value) == f"w.grad is None: {hint}"


def test_expect_raises_needs_the_right_exception_and_text():
    def boom():
        raise KeyError("layer9.weight")

    error = expect_raises(KeyError, boom, "should raise", match="layer9")
    assert isinstance(error, KeyError)
    with pytest.raises(CheckFailed, match="should raise"):
        expect_raises(KeyError, lambda: None, "should raise")
    with pytest.raises(CheckFailed, match="should mention 'bias'"):
        expect_raises(KeyError, boom, "should raise", match="bias")
    with pytest.raises(ValueError):  # a different exception is the student's bug, shown as is
        expect_raises(KeyError, lambda: int("x"), "should raise")


def test_expect_raises_never_accepts_a_stub():
    def stub():
        raise NotImplementedError()

    with pytest.raises(NotImplementedError):  # NotImplementedError is a RuntimeError subclass
        expect_raises(RuntimeError, stub, "should raise")
    assert isinstance(expect_raises(NotImplementedError, stub, "x"), NotImplementedError)


@pytest.mark.parametrize("written", ["b", "B", " b ", "b)", "B.", "\tb\n"])
def test_choice_reads_a_letter_in_every_usual_way(written):
    assert choice(written, ("a", "b", "c"), "q1") == "b"


@pytest.mark.parametrize("written", ["d", "", "ab", "b or c", 2, None, ["b"]])
def test_choice_refuses_what_is_not_one_option_and_names_the_options(written):
    with pytest.raises(CheckFailed, match=r"q1 should be .*'a', 'b', 'c'"):
        choice(written, ("a", "b", "c"), "q1")


def test_expect_runs_returns_what_the_call_returns():
    assert expect_runs(lambda: 41 + 1, "f(1)") == 42


def test_expect_runs_turns_a_raw_error_into_a_message_with_the_matching_hint():
    def forgets_none():
        None.zero_()

    hints = {"'zero_'": "a .grad that is None has nothing to zero: check for None first.",
             "never": "an unmatched hint"}  # fmt: skip
    with pytest.raises(CheckFailed) as caught:
        expect_runs(forgets_none, "zero_grads(params)", hints)
    message = str(caught.value)
    assert message.startswith("zero_grads(params) raised AttributeError: 'NoneType' object")
    assert message.endswith("a .grad that is None has nothing to zero: check for None first.")
    assert "unmatched" not in message
    assert isinstance(caught.value.__cause__, AttributeError), "the traceback keeps the cause"


def test_expect_runs_without_a_matching_hint_still_names_the_call_and_the_error():
    with pytest.raises(CheckFailed, match=r"^f\(x\) raised ValueError: bad\.$"):
        expect_runs(lambda: (_ for _ in ()).throw(ValueError("bad")), "f(x)", {"nothing": "x"})


def test_expect_runs_lets_a_stub_and_a_failed_check_through_unchanged():
    def stub():
        raise NotImplementedError

    with pytest.raises(NotImplementedError):
        expect_runs(stub, "f()")
    with pytest.raises(CheckFailed, match="^inner$"):
        expect_runs(lambda: expect(False, "inner"), "f()")


def test_expect_runs_shortens_a_long_error():
    with pytest.raises(CheckFailed) as caught:
        expect_runs(lambda: (_ for _ in ()).throw(RuntimeError("x" * 500)), "f()")
    assert len(str(caught.value)) < 260 and "..." in str(caught.value)
