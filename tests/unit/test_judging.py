"""Judging (course.grading.judging): the student's records against the reference's, in the
grader's process. Only the reference's titles, tolerances, hints and teaching lines count; a
teaching key never decides a point; whatever the student's kernel sends is data, and a records
message that is missing, doubled or malformed fails the block as the student's."""

from __future__ import annotations

import json

import pytest
import torch

from course.grading import hidden, judging
from course.lesson import probes
from course.lesson.probes import RECORDS_MIME

DOUBLE = """
@probe("double of a vector", hints={"result": "multiply by two."},
       teaching={"input after the call": "leave the input as it was: work on a copy."})
def _(double):
    x = torch.tensor([1.0, -2.0, float("nan")])
    return {"result": double(x), "input after the call": x.tolist()}
"""


def _records(source: str, **answers) -> list[dict]:
    return json.loads(probes.collect(source, answers))


def _double(x):
    return x * 2


def _want():
    return _records(DOUBLE, double=_double)


def _judge(answer, **kwargs) -> judging.Verdict:
    return judging.judge(_records(DOUBLE, double=answer), _want(), **kwargs)


def test_the_reference_matches_itself_and_the_records_are_json():
    want = _want()
    assert judging.judge(json.loads(json.dumps(want)), want) == judging.Verdict()
    tensor = want[0]["record"]["dict"]["result"]
    assert tensor["tensor"] == "torch.float32" and tensor["shape"] == [3]
    assert tensor["requires_grad"] is False and tensor["is_leaf"] is True


@pytest.mark.parametrize(
    "answer, problem",
    [
        (lambda x: x * 3, "result: entry 0 (in row-major order) is 3, expected 2"),
        (lambda x: (x * 2).double(), "result: its dtype is torch.float64, expected torch.float32"),
        (lambda x: (x * 2)[:2], "result: its shape is [2], expected [3]"),
        (lambda x: (x * 2).tolist(), "result: got a list of 3, expected a torch.float32 tensor"),
        (lambda x: None, "result: got None, expected a torch.float32 tensor"),
        (lambda x: (x * 2).requires_grad_(), "result: its requires_grad is true, expected False"),
        (lambda x: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_a_wrong_value_fails_and_says_where(answer, problem):
    verdict = _judge(answer)
    (found,) = verdict.problems
    assert problem in found, found
    if "result" in problem:
        assert verdict.why == ["multiply by two."], "the reference's hint names the mistake"


def test_a_teaching_fact_alone_costs_nothing_and_is_shown():
    def changes_its_input(x):
        result = x * 2
        x.zero_()
        return result

    verdict = _judge(changes_its_input)
    assert verdict.problems == [] and verdict.why == []
    (line,) = verdict.teaching
    assert line == "double of a vector: input after the call[0]: got 0.0, expected 1.0"
    assert verdict.teaching_why == ["leave the input as it was: work on a copy."]
    text = judging.teaching_output(verdict).text
    assert text.startswith("Not graded, for learning") and line in text and "work on a copy" in text


def test_a_teaching_fact_beside_a_wrong_value_says_why_in_the_failure():
    def wrong_and_changes_its_input(x):
        result = x * 3
        x.zero_()
        return result

    verdict = _judge(wrong_and_changes_its_input)
    (problem,) = verdict.problems
    assert "result: entry 0" in problem and "also, input after the call[0]" in problem
    assert verdict.why == ["multiply by two.", "leave the input as it was: work on a copy."]
    assert verdict.teaching == []


def test_a_failure_names_each_likely_mistake_once_and_the_report_can_count_them():
    many = DOUBLE + DOUBLE.replace("double of a vector", "double again")
    got = _records(many, double=lambda x: x * 3)
    verdict = judging.judge(got, _records(many, double=_double))
    assert len(verdict.problems) == 2 and verdict.why == ["multiply by two."]
    evalue = judging.failure_output(verdict).evalue
    assert evalue.count("multiply by two.") == 1
    assert judging.likely_mistakes(evalue) == ["multiply by two."]
    stub = judging.judge(
        _records(many, double=lambda x: (_ for _ in ()).throw(NotImplementedError())),
        _records(many, double=_double),
    )
    (mistake,) = judging.likely_mistakes(judging.failure_output(stub).evalue)
    assert mistake.startswith("NotImplementedError: this exercise still raises")


def test_a_tensor_record_with_too_few_values_never_matches():
    """An empty list of values broadcast against one expected value compared nothing (a
    red team's record passed a 0-d probe that way)."""
    want = _records('@probe("one")\ndef _(f):\n    return f()\n', f=lambda: torch.tensor(2.0))
    forged = json.loads(json.dumps(want))
    forged[0]["record"]["values"] = []
    (problem,) = judging.judge(forged, want).problems
    assert "it has 0 values, expected 1" in problem


def test_nan_matches_nan_only():
    (problem,) = _judge(lambda x: torch.nan_to_num(x * 2)).problems
    assert "entry 2" in problem


class Liar(torch.Tensor):
    """A tensor whose every comparison says yes."""

    def __eq__(self, other):
        return True

    __hash__ = torch.Tensor.__hash__


class Always(float):
    def __eq__(self, other):
        return True

    __hash__ = float.__hash__


def test_objects_that_fake_comparisons_become_plain_data_or_fail():
    (problem,) = _judge(lambda x: (x * 3).as_subclass(Liar)).problems
    assert "an object of class Liar" in problem
    number = probes.record(Always(1.5))
    assert type(number) is float and number == 1.5  # the value, never the subclass
    assert judging.difference(number, 2.0, 1e-5, 1e-6) == "got 1.5, expected 2.0"
    text = probes.record(type("S", (str,), {"__eq__": lambda s, o: True})("b"))
    assert type(text) is str and judging.difference(text, "a", 0, 0) == 'got "b", not the answer'


def test_only_the_references_titles_tolerances_hints_and_teaching_count():
    want = _want()
    got = _records(DOUBLE, double=lambda x: x * 2.001)
    got[0].update(rtol=1.0, atol=1.0, hints={}, teaching={"result": "forged"})
    assert "entry" in judging.judge(got, want).problems[0]
    renamed = [{**got[0], "title": "something else"}]
    assert judging.judge(renamed, want).problems == ["double of a vector: no result"]


def _sent(text):
    return {"output_type": "display_data", "data": {RECORDS_MIME: text}}


def test_a_missing_doubled_or_malformed_records_message_fails_plainly():
    want = _want()
    good = json.dumps(want)
    assert judging.read_records([_sent(good)]) == want
    for text in ("[1", "{}", "__import__('os')", "[1, 2]", ["not", "text"]):
        assert judging.read_records([_sent(text)]) is None
    assert judging.read_records([]) is None
    assert judging.read_records([_sent(good), _sent(good)]) is None, "one more, from the answer"
    as_value = {"output_type": "execute_result", "data": {"text/plain": repr(good)}}
    assert judging.read_records([as_value]) is None, "a cell's value is not the channel"
    (problem,) = judging.judge(None, want).problems
    assert problem == judging.NO_RECORDS and "earns no points" in problem


def test_a_name_the_notebook_lacks_is_named_only_when_a_probe_asks_for_it():
    want = _want()
    asked = hidden.asked_names(DOUBLE)
    assert asked == {"double"}
    missing = judging.judge(_records(DOUBLE), want, asked=asked).problems
    assert missing == ["double of a vector: double is not defined"]
    # a name the probes never ask for is the kernel's text: it is not repeated (it could carry
    # the hidden block, 20 characters a probe)
    forged = [{**record, "missing": "for x, y in batches:"} for record in _records(DOUBLE)]
    assert judging.judge(forged, want, asked=asked).problems == [
        "double of a vector: a function it calls is not defined"
    ]
    stub = _judge(lambda x: (_ for _ in ()).throw(NotImplementedError())).problems
    assert stub == ["double of a vector: not implemented yet"]


def test_what_the_answer_raises_is_named_never_quoted():
    """An exception's message (and a class the answer made) is the kernel's text, free to carry
    the hidden inputs: a failing probe names only a built-in error class."""

    def leaky(x):
        raise ValueError(f"the input was {x.tolist()}")

    (line,) = _judge(leaky).problems
    assert line.endswith("raised ValueError") and "input was" not in line, line
    own = type("Leak_" + "1_5_2_0", (Exception,), {})

    def own_class(x):
        raise own("x")

    (line,) = _judge(own_class).problems
    assert "Leak_" not in line and "raised an exception" in line, line
