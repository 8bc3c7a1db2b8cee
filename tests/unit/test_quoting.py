"""What of a student's records a feedback page may quote (course.grading.quoting): a record the
student's kernel crafted to carry the hidden tests' source puts none of its text in a message."""

from __future__ import annotations

import json

from course.grading import judging
from course.lesson import probes

SECRET = "gen = seeded(2021) for trial in range(5): a, b, c = torch.randin"
BLOCK = """
@probe("double of a vector", hints={"result": "multiply by two."})
def _(double):
    return {"result": double(torch.tensor([1.0, -2.0]))}
"""
WANT = json.loads(probes.collect(BLOCK, {"double": lambda x: x * 2}))
TENSOR = WANT[0]["record"]["dict"]["result"]


def _with(result) -> list[dict]:
    return [{**WANT[0], "record": {"dict": {"result": result}}}]


def _lines(result) -> str:
    return " ".join(judging.judge(_with(result), WANT).problems)


def test_crafted_tensors_lists_and_objects_quote_nothing_of_their_text():
    for forged in (
        {**TENSOR, "shape": [SECRET]},
        {**TENSOR, "requires_grad": SECRET},
        {**TENSOR, "tensor": SECRET},
        {"list": [SECRET] * 3, "kind": SECRET},
        {"object": SECRET},
        [SECRET],
    ):
        lines = _lines(forged)
        assert lines and "seeded" not in lines and "2021" not in lines, lines
    for broken in ([{"title": [SECRET], "record": 1}], [{**WANT[0], "raised": [SECRET]}]):
        lines = " ".join(judging.judge(broken, WANT).problems)
        assert lines and "seeded" not in lines, lines


def test_numbers_are_quoted_only_as_far_as_they_cannot_carry_text():
    encoded = int.from_bytes(SECRET.encode(), "big")  # the source as an int of many digits
    assert str(encoded)[:15] not in _lines(encoded) and "a very large int" in _lines(encoded)
    assert "12345" in _lines(12345)
    carrier = 0.1234567890123456  # a float's 17 digits carry about 8 bytes: six are quoted
    assert "0.123457" in judging.difference(carrier, 2.5, 0, 0)
    assert "0.12345678" not in judging.difference(carrier, 2.5, 0, 0)
    assert "0.12345678" not in judging.difference(carrier, "ok", 0, 0, reveal=True)
    assert "0.12345678" not in judging.difference(carrier, 3, 0, 0)


def test_strings_are_quoted_only_short_plain_and_where_a_string_is_expected():
    dense = "ﬁ" * 30  # letters outside ASCII pack more bytes into a name: not quoted
    assert dense not in _lines(dense)
    chunk = "SElOVFMgPSB7CiAgInJlc3VsdCI6"  # plain text where a tensor was expected
    assert chunk[:8] not in _lines(chunk) and "got a str, expected" in _lines(chunk)
    assert '"dead"' in judging.difference("dead", "ok", 0, 0)  # a label: quoted
    assert chunk[:8] not in judging.difference(chunk, "ok", 0, 0)


def test_a_shape_is_quoted_only_when_a_kernel_could_hold_such_a_tensor():
    encoded = int.from_bytes(SECRET.encode(), "big")
    for shape in ([encoded] * 8, [2**20, 2**20, 2**20], [-encoded], [0, encoded]):
        lines = _lines({**TENSOR, "shape": shape})
        assert str(encoded)[:6] not in lines and str(2**20) not in lines, lines
    assert "[7, 0, 3]" in _lines({**TENSOR, "shape": [7, 0, 3]})  # a real shape: quoted
