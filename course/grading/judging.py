"""Judging a submission's hidden tests: its kernel's records against the reference's.

Runs in: the grader (or the worker that grades a submission), never in a kernel.

The student's kernel sends one records message per hidden block (`course.lesson.probes.send`);
whoever controls that kernel controls the message, so it is only data. A point rests on what
such data cannot hold without solving: the values the answer computed on inputs drawn for this
submission, which must match the reference's records for the same inputs (`reference`), made in
a kernel no student code ran in. A record's keys that the probe marks as teaching (facts whose
right value any kernel could report, such as a flag that is always False or how often the answer
called a function) are compared too: a difference becomes a line marked "not graded", or, where
the graded values differ as well, part of the failure's message (it is likely why).
Titles, tolerances, hints and teaching lines come from the reference's records only; what the
student's records hold reaches the feedback only as `course.grading.quoting` allows.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection
from dataclasses import dataclass, field

import nbformat
import torch

from ..lesson.probes import RECORDS_MIME
from .feedback import short_error
from .quoting import describe, error_name, plain, short

FAILED = "HiddenTestFailed"
NO_RECORDS = (
    "the hidden tests got no readable results from your notebook's kernel (the message that "
    "carries them was missing, doubled or malformed: something in the notebook changed how the "
    "kernel sends its results), so this cell earns no points"
)


@dataclass
class Verdict:
    """One test cell's hidden tests, judged: ``problems`` fail the cell (a line each: the probe
    and what differs), ``teaching`` are facts shown as not graded; ``why`` and ``teaching_why``
    name the likely mistake behind them, in the reference's words, each once (the same lines for
    every student: the report counts them across the class)."""

    problems: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)
    teaching: list[str] = field(default_factory=list)
    teaching_why: list[str] = field(default_factory=list)

    def add(self, lines: list[str], explain: list[str], line: str, because: list[str]) -> None:
        lines.append(line)
        explain += [b for b in because if b and b not in explain]


def read_records(outputs: list) -> list[dict] | None:
    """The records a block's probes sent, or None if there is not exactly one such message (the
    probes raised, the output was cut, the channel was changed, or the answer sent one too) or
    what came back is not records."""
    sent = [
        o["data"][RECORDS_MIME]
        for o in outputs
        if o.get("output_type") == "display_data" and RECORDS_MIME in o.get("data", {})
    ]
    if len(sent) != 1 or not isinstance(sent[0], str):
        return None
    try:
        records = json.loads(sent[0])
    except (ValueError, MemoryError, RecursionError):
        return None
    ok = isinstance(records, list) and all(isinstance(r, dict) for r in records)
    return records if ok else None


def _close(got: float, want: float, rtol: float, atol: float) -> bool:
    if math.isnan(want) or math.isnan(got):
        return math.isnan(want) and math.isnan(got)
    return got == want or abs(got - want) <= atol + rtol * abs(want)


def _values(got, want, rtol: float, atol: float) -> str | None:
    if isinstance(want, dict) or isinstance(got, dict):  # summaries of large tensors
        got, want = got.get("summary") if isinstance(got, dict) else None, want.get("summary")
        if got is None:
            return "it has other values"
    flat_got = torch.tensor(got, dtype=torch.float64).flatten()
    flat_want = torch.tensor(want, dtype=torch.float64).flatten()
    if flat_got.numel() != flat_want.numel():  # isclose would broadcast one value to none
        return f"it has {flat_got.numel()} values, expected {flat_want.numel()}"
    close = torch.isclose(flat_got, flat_want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    index = int((~close).nonzero()[0])
    got, want = float(flat_got[index]), float(flat_want[index])
    return f"entry {index} (in row-major order) is {got:.6g}, expected {want:.6g}"


def _tensor_difference(got: dict, want: dict, rtol: float, atol: float) -> str | None:
    if got.get("tensor") != want.get("tensor"):
        return f"its dtype is {plain(got.get('tensor'))}, expected {want.get('tensor')}"
    if got.get("shape") != want.get("shape"):
        return f"its shape is {short(got.get('shape'))}, expected {want.get('shape')}"
    for fact in ("requires_grad", "is_leaf"):
        if got.get(fact) != want.get(fact):
            return f"its {fact} is {short(got.get(fact))}, expected {want.get(fact)}"
    if (problem := _values(got["values"], want["values"], rtol, atol)) is not None:
        return problem
    if "grad" in want:
        if want["grad"] is None or got.get("grad") is None:
            if (want["grad"] is None) != (got.get("grad") is None):
                return f"its .grad is {'None' if got.get('grad') is None else 'set'}, expected " + (
                    "None" if want["grad"] is None else "a gradient"
                )
        elif problem := _tensor_difference(got["grad"], want["grad"], rtol, atol):
            return f"its .grad: {problem}"
    return None


def difference(
    got, want, rtol: float, atol: float, path: str = "", reveal: bool = False
) -> str | None:
    """Where the student's record ``got`` differs from the reference's ``want``, or None. A
    string the reference gives (a quick-check answer) is named only when ``reveal``: the page is
    released while classmates may still hand in."""
    at = f"{path}: " if path else ""
    if isinstance(want, str) and got != want and not reveal:
        return f"{at}got {short(got) if isinstance(got, str) else describe(got)}, not the answer"
    if isinstance(want, dict) and "tensor" in want:
        if not (isinstance(got, dict) and "tensor" in got):
            return f"{at}got {describe(got)}, expected {describe(want)}"
        problem = _tensor_difference(got, want, rtol, atol)
        return f"{at}{problem}" if problem else None
    if isinstance(want, dict) and "list" in want:
        if not (isinstance(got, dict) and "list" in got) or got.get("kind") != want["kind"]:
            return f"{at}got {describe(got)}, expected {describe(want)}"
        if len(got["list"]) != len(want["list"]):
            return f"{at}got {len(got['list'])} items, expected {len(want['list'])}"
        for index, (g, w) in enumerate(zip(got["list"], want["list"])):
            if problem := difference(g, w, rtol, atol, f"{path}[{index}]", reveal):
                return problem
        return None
    if isinstance(want, dict) and "dict" in want:
        if not (isinstance(got, dict) and "dict" in got):
            return f"{at}got {describe(got)}, expected {describe(want)}"
        if set(got["dict"]) != set(want["dict"]):
            missing = sorted(set(want["dict"]) - set(got["dict"]))
            extra = len(set(got["dict"]) - set(want["dict"]))
            return f"{at}has other keys than expected (missing: {missing}; {extra} extra)"
        for key in want["dict"]:
            inner = f"{path}[{key!r}]" if path else key
            problem = difference(got["dict"][key], want["dict"][key], rtol, atol, inner, reveal)
            if problem:
                return problem
        return None
    if isinstance(want, float) and type(got) is float and _close(got, want, rtol, atol):
        return None
    if type(got) is not type(want) or got != want:
        if type(got) is type(want) and not isinstance(want, dict):
            return f"{at}got {short(got)}, expected {short(want)}"
        return f"{at}got {describe(got)}, expected {describe(want)}"
    return None


def _split(record, keys: Collection[str]):
    """A dict record without ``keys`` (what is graded), and the values of ``keys`` in it."""
    if not (isinstance(record, dict) and isinstance(record.get("dict"), dict)):
        return record, {}
    inner = record["dict"]
    graded = {"dict": {k: v for k, v in inner.items() if k not in keys}}
    return graded, {k: inner[k] for k in keys if k in inner}


def _outcome(title: str, mine: dict, asked: Collection[str]) -> tuple[str, str] | None:
    """(problem, why) of a probe that recorded nothing, or None when it has a record."""
    if "missing" in mine:
        name = mine["missing"] if mine["missing"] in asked else "a function it calls"
        return f"{title}: {name} is not defined", f"{name} is not defined: run its answer cell"
    if "raised" in mine:
        kind = error_name(mine["raised"])
        if kind == "NotImplementedError" and not mine.get("message"):  # nbgrader's stub
            return f"{title}: not implemented yet", short_error(kind, "")
        # its message is the student's text: never quoted
        return f"{title}: raised {kind}", f"the function raised {kind} on a hidden input"
    if "record" in mine:
        return None
    return f"{title}: no result", "the hidden tests got no result for a probe"


def _teaching_facts(got: dict, want: dict, teaching: dict, rtol, atol, reveal):
    """(difference, teaching line) for each teaching key where the student's record differs."""
    facts = []
    for key, line in teaching.items():
        if key not in want:
            continue
        try:
            fact = difference(got.get(key), want[key], rtol, atol, key, reveal)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError):
            fact = f"{key}: could not be read as data"
        if fact:
            facts.append((fact, line))
    return facts


def judge(
    got: list[dict] | None, want: list[dict], reveal: bool = False, asked: Collection[str] = ()
) -> Verdict:
    """The student's records ``got`` against the reference's ``want`` for one hidden block.
    Expected answers are named only when ``reveal`` (`difference`); a name the notebook lacks,
    only when it is one of ``asked`` (`course.grading.hidden.asked_names`), since the kernel
    reports it and any text there could carry the hidden block."""
    if got is None:
        return Verdict([NO_RECORDS])
    by_title = {r.get("title"): r for r in got if type(r.get("title")) is str}
    verdict = Verdict()
    for expected in want:
        title, mine = expected["title"], by_title.get(expected["title"], {})
        if (outcome := _outcome(title, mine, asked)) is not None:
            verdict.add(verdict.problems, verdict.why, outcome[0], [outcome[1]])
            continue
        rtol, atol, teaching = expected["rtol"], expected["atol"], expected.get("teaching", {})
        graded_want, taught_want = _split(expected["record"], teaching)
        graded_got, taught_got = _split(mine["record"], teaching)
        try:
            problem = difference(graded_got, graded_want, rtol, atol, reveal=reveal)
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError):
            problem = "the result could not be read as data"  # a malformed record
        facts = _teaching_facts(taught_got, taught_want, teaching, rtol, atol, reveal)
        lines = [line for _, line in facts]
        if problem:  # a teaching fact beside it is likely why the values differ
            hint = next((h for key, h in expected["hints"].items() if problem.startswith(key)), "")
            also = "".join(f"; also, {fact}" for fact, _ in facts)
            verdict.add(verdict.problems, verdict.why, f"{title}: {problem}{also}", [hint, *lines])
        else:
            for fact, line in facts:
                verdict.add(verdict.teaching, verdict.teaching_why, f"{title}: {fact}", [line])
    return verdict


WHY = "What to look at:"


def _listed(head: str, lines: list[str], why: list[str]) -> str:
    text = head + "".join(f"\n- {line}" for line in lines)
    return text + (f"\n{WHY}" + "".join(f"\n- {w}" for w in why) if why else "")


def failure_output(verdict: Verdict) -> nbformat.NotebookNode:
    """The error a test cell shows when its hidden tests fail (nbgrader scores it 0)."""
    message = _listed("a hidden test failed:", verdict.problems, verdict.why)
    return nbformat.v4.new_output(
        "error", ename=FAILED, evalue=message, traceback=[f"{FAILED}: {message}"]
    )


def teaching_output(verdict: Verdict) -> nbformat.NotebookNode:
    """What the hidden tests saw that carries no points, for the student to learn from."""
    head = "Not graded, for learning (your points do not depend on these):"
    text = _listed(head, verdict.teaching, verdict.teaching_why)
    return nbformat.v4.new_output("stream", name="stdout", text=text + "\n")


def likely_mistakes(evalue: str) -> list[str]:
    """The lines of a `failure_output` that name the likely mistake (the same words for every
    student), or, without such lines, its problems with each probe's title left out."""
    head, _, why = evalue.partition(f"\n{WHY}\n")
    if why:
        return [line.removeprefix("- ") for line in why.splitlines()]
    return [line.removeprefix("- ") for line in head.splitlines()[1:]]
