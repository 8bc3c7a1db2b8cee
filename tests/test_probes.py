"""Hidden tests as probes: what crosses from the student's kernel is plain data, an object that
fakes comparisons never matches, and the verdict comes from the reference's records alone
(course.lesson.probes in the kernel, course.grading.probes in the grader)."""

from __future__ import annotations

import builtins
import json
import subprocess
import sys

import nbformat
import pytest
import torch

from course.grading import probes as grading
from course.lesson import probes
from course.lesson.checks import CheckFailed
from course.lesson.outbox import RECORDS_MIME
from course_testing import venv_env


def _records(source: str, **answers) -> list[dict]:
    return json.loads(probes.collect(source, answers))


DOUBLE = """
@probe("double of a vector", hints={"result": "multiply by two."})
def _(double):
    x = torch.tensor([1.0, -2.0, float("nan")])
    return {"result": double(x), "input after the call": x}
"""


def _double(x):
    return x * 2


def _want():
    return _records(DOUBLE, double=_double)


def test_the_reference_matches_itself_and_the_records_are_json():
    want = _want()
    assert grading.judge(json.loads(json.dumps(want)), want) == []
    tensor = want[0]["record"]["dict"]["result"]
    assert tensor["tensor"] == "torch.float32" and tensor["shape"] == [3]
    assert tensor["requires_grad"] is False and tensor["is_leaf"] is True


@pytest.mark.parametrize(
    "answer, problem",
    [
        (lambda x: x * 3, "result: entry 0 (in row-major order) is 3, expected 2"),
        (lambda x: (x * 2).double(), "result: its dtype is torch.float64, expected torch.float32"),
        (lambda x: x.mul_(2), "input after the call: entry 0"),
        (lambda x: (x * 2)[:2], "result: its shape is [2], expected [3]"),
        (lambda x: (x * 2).tolist(), "result: got a list of 3, expected a torch.float32 tensor"),
        (lambda x: None, "result: got None, expected a torch.float32 tensor"),
        (lambda x: 1 / 0, "raised ZeroDivisionError"),
    ],
)
def test_a_wrong_answer_fails_and_says_where(answer, problem):
    found = grading.judge(_records(DOUBLE, double=answer), _want())
    assert len(found) == 1 and problem in found[0], found
    if "result" in problem and "raised" not in problem:
        assert found[0].endswith("multiply by two."), "the reference's hint is shown"


def test_nan_matches_nan_only():
    nan_to_zero = grading.judge(_records(DOUBLE, double=lambda x: torch.nan_to_num(x * 2)), _want())
    assert nan_to_zero and "entry 2" in nan_to_zero[0]


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
    liar = grading.judge(_records(DOUBLE, double=lambda x: (x * 3).as_subclass(Liar)), _want())
    assert liar and "an object of class Liar" in liar[0]
    number = probes.record(Always(1.5))
    assert type(number) is float and number == 1.5  # the value, never the subclass
    assert grading.difference(number, 2.0, 1e-5, 1e-6) == "got 1.5, expected 2.0"
    text = probes.record(type("S", (str,), {"__eq__": lambda s, o: True})("b"))
    assert type(text) is str and grading.difference(text, "a", 0, 0) == 'got "b", not the answer'


def test_a_patched_torch_in_the_kernel_changes_nothing(monkeypatch):
    """What the records say is read through C-level getters captured at import."""
    monkeypatch.setattr(torch.Tensor, "requires_grad", property(lambda self: True))
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: [2.0, -4.0, float("nan")])
    described = probes.record(torch.tensor([1.0, 2.0]))
    got = _records(DOUBLE, double=lambda x: x * 3)
    monkeypatch.undo()
    assert described["requires_grad"] is False and described["values"] == [1.0, 2.0]
    assert "no point" in grading.judge(got, _want())[0]  # and the patch is tampering


def test_only_the_references_titles_tolerances_and_hints_count():
    want = _want()
    got = _records(DOUBLE, double=lambda x: x * 2.001)
    got[0].update(rtol=1.0, atol=1.0, hints={})  # a student's kernel can say anything
    assert "entry" in grading.judge(got, want)[0]
    renamed = [{**got[0], "title": "something else"}]
    assert grading.judge(renamed, want) == ["double of a vector: no result"]


def test_unreadable_or_missing_results_fail_plainly():
    want = _want()
    assert grading.judge(None, want)[0].startswith("the hidden tests could not read")
    asked = grading.asked_names(DOUBLE)
    assert asked == {"double"}
    missing = grading.judge(_records(DOUBLE), want, asked=asked)
    assert missing == ["double of a vector: double is not defined"]
    # a name the probes never ask for is the kernel's text: it is not repeated (the eleventh red
    # team's "missing" names carried the hidden block, 20 characters a probe)
    forged = [
        {**missing_record, "missing": "for x, y in batches:"} for missing_record in _records(DOUBLE)
    ]
    assert grading.judge(forged, want, asked=asked) == [
        "double of a vector: a function it calls is not defined"
    ]
    stub = grading.judge(
        _records(DOUBLE, double=lambda x: (_ for _ in ()).throw(NotImplementedError())), want
    )
    assert stub == ["double of a vector: not implemented yet"]

    def sent(text):
        return {"output_type": "display_data", "data": {RECORDS_MIME: text}}

    good = json.dumps(want)
    assert grading.read_records([sent(good)]) == want
    for text in ("[1", "{}", "__import__('os')", "[1, 2]", ["not", "text"]):
        assert grading.read_records([sent(text)]) is None
    assert grading.read_records([]) is None
    assert grading.read_records([sent(good), sent(good)]) is None, "one more, from the answer"
    as_value = {"output_type": "execute_result", "data": {"text/plain": repr(good)}}
    assert grading.read_records([as_value]) is None, "a cell's value is not the channel"


def test_probes_see_none_of_the_notebooks_state():
    found = _records(
        '@probe("uses a lesson helper")\ndef _(double):\n    return expect_close\n', double=_double
    )
    assert found[0]["raised"] == "NameError"


def test_a_probe_run_in_a_notebook_fails_only_when_the_call_raises():
    """Outside the grader (the source notebook, stock nbgrader) a probe runs at once."""
    namespace = {"probe": probes.probe, "torch": torch, "double": _double}
    exec(DOUBLE, namespace)  # the reference: passes
    namespace["double"] = lambda x: 1 / 0
    with pytest.raises(CheckFailed, match="ZeroDivisionError"):
        exec(DOUBLE, namespace)
    namespace["double"] = lambda x: (_ for _ in ()).throw(NotImplementedError())
    with pytest.raises(NotImplementedError):
        exec(DOUBLE, namespace)


def test_hidden_blocks_split_from_the_visible_part():
    cell = "a = 1\n### BEGIN HIDDEN TESTS\nb = 2\n### END HIDDEN TESTS\nc = 3\n"
    assert grading.split_hidden(cell) == ("a = 1\nc = 3\n", "b = 2\n")
    assert grading.split_hidden("a = 1\n") == ("a = 1\n", "")


def _notebook(tmp_path, solution: str):
    setup = nbformat.v4.new_code_cell("import torch\nfrom course.lesson.probes import probe")
    answer = nbformat.v4.new_code_cell(solution)
    answer.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "double"}
    test = nbformat.v4.new_code_cell("### BEGIN HIDDEN TESTS" + DOUBLE + "### END HIDDEN TESTS\n")
    test.metadata["nbgrader"] = {"grade": True, "grade_id": "test_double", "points": 1}
    path = tmp_path / "source" / "a" / "a.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[setup, answer, test]), path)
    return path


def test_the_reference_is_run_once_per_source_version(tmp_path, monkeypatch):
    path = _notebook(tmp_path, "def double(x):\n    return x * 2")
    cache = tmp_path / "cache"
    first = grading.expected_records(path, cache)
    assert grading.judge(first["test_double"], _want()) == []
    monkeypatch.setattr(grading, "_run_reference", lambda source: pytest.fail("ran again"))
    assert grading.expected_records(path, cache) == first


def test_a_reference_that_fails_its_own_probes_is_refused(tmp_path):
    path = _notebook(tmp_path, "def double(x):\n    raise ValueError('not yet')")
    with pytest.raises(grading.ReferenceError, match="test_double"):
        grading.expected_records(path, tmp_path / "cache")


def test_what_the_answer_raises_is_named_never_quoted():
    """An exception's message (and a class the answer made) is the kernel's text, free to carry
    the hidden inputs: a failing probe names only a built-in error class."""

    def leaky(x):
        raise ValueError(f"the input was {x.tolist()}")

    (line,) = grading.judge(_records(DOUBLE, double=leaky), _want())
    assert line.endswith("raised ValueError") and "input was" not in line, line
    own = type("Leak_" + "1_5_2_0", (Exception,), {})

    def own_class(x):
        raise own("x")

    (line,) = grading.judge(_records(DOUBLE, double=own_class), _want())
    assert "Leak_" not in line and "raised an exception" in line, line


def test_a_crafted_record_puts_none_of_its_text_in_a_message():
    """The fifth red team sent records whose tensor "shape" was the hidden source, 64
    characters at a time; every value a message quotes from the student's record is checked."""
    secret = "gen = seeded(2021) for trial in range(5): a, b, c = torch.randin"
    want = _want()
    tensor = dict(want[0]["record"]["dict"]["result"])
    crafted = [
        {**tensor, "shape": [secret]},
        {**tensor, "requires_grad": secret},
        {**tensor, "tensor": secret},
        {"list": [secret] * 3, "kind": secret},
        {"object": secret},
        [secret],
    ]
    for forged in crafted:
        record = [{**want[0], "record": {"dict": {**want[0]["record"]["dict"], "result": forged}}}]
        lines = grading.judge(record, want)
        assert lines and not any("seeded" in line or "2021" in line for line in lines), lines
    for broken in ([{"title": [secret], "record": 1}], [{**want[0], "raised": [secret]}]):
        lines = grading.judge(broken, want)
        assert lines and "seeded" not in " ".join(lines), lines
    # The sixth red team returned the hidden source as ints of thousands of digits.
    encoded = int.from_bytes(secret.encode(), "big")
    record = [{**want[0], "record": {"dict": {**want[0]["record"]["dict"], "result": encoded}}}]
    (line,) = grading.judge(record, want)
    assert str(encoded)[:15] not in line and "a very large int" in line, line
    small = [{**want[0], "record": {"dict": {**want[0]["record"]["dict"], "result": 12345}}}]
    assert "12345" in grading.judge(small, want)[0]
    dense = "ﬁ" * 30  # letters outside ASCII pack more bytes into a name: not quoted
    record = [{**want[0], "record": {"dict": {**want[0]["record"]["dict"], "result": dense}}}]
    assert dense not in grading.judge(record, want)[0]
    # The eighth red team read the hidden source from the kernel's request and sent it back as
    # plain strings where a tensor was expected, 40 characters a probe: a str's text is quoted
    # only where a str is expected, and at most `PLAIN_LIMIT` characters of it.
    chunk = "SElOVFMgPSB7CiAgInJlc3VsdCI6"
    record = [{**want[0], "record": {"dict": {**want[0]["record"]["dict"], "result": chunk}}}]
    (line,) = grading.judge(record, want)
    assert chunk[:8] not in line and "got a str, expected" in line, line
    assert '"dead"' in grading.difference("dead", "ok", 0, 0)  # a label: quoted
    assert chunk[:8] not in grading.difference(chunk, "ok", 0, 0)
    # The ninth red team put it in a tensor's "shape": eight ints of thousands of digits. A shape
    # is quoted only when a kernel could hold such a tensor.
    for shape in ([encoded] * 8, [2**20, 2**20, 2**20], [-encoded], [0, encoded]):
        record = [
            {
                **want[0],
                "record": {
                    "dict": {**want[0]["record"]["dict"], "result": {**tensor, "shape": shape}}
                },
            }
        ]
        (line,) = grading.judge(record, want)
        assert str(encoded)[:6] not in line and str(2**20) not in line, line
    record = [
        {
            **want[0],
            "record": {
                "dict": {**want[0]["record"]["dict"], "result": {**tensor, "shape": [7, 0, 3]}}
            },
        }
    ]
    assert "[7, 0, 3]" in " ".join(grading.judge(record, want))  # a real shape: quoted
    # The twelfth red team's review: a float's 17 digits carry about 8 bytes a probe; six
    # significant digits are quoted, where a float is expected and where something else is.
    carrier = 0.1234567890123456
    assert "0.123457" in grading.difference(carrier, 2.5, 0, 0)
    assert "0.12345678" not in grading.difference(carrier, 2.5, 0, 0)
    assert "0.12345678" not in grading.difference(carrier, "ok", 0, 0, reveal=True)
    assert "0.12345678" not in grading.difference(carrier, 3, 0, 0)


def test_the_cell_that_runs_the_probes_leaves_no_text_for_a_stack_to_show(monkeypatch):
    """The grader's cell names the hidden block as text; IPython keeps a cell's text in linecache
    for tracebacks, where logging's findCaller or traceback.format_stack would read it from
    inside the answer. `send` forgets it before the answer runs."""
    import linecache
    import traceback

    sent, stacks = [], []
    monkeypatch.setattr(probes, "_send", sent.append)
    marker = "-".join(["hidden", "marker", "7731"])  # in the block's text, not this file's
    source = DOUBLE.replace("multiply by two.", marker)
    assert marker in source
    cell = f"send({source!r})\n"
    name = "<ipython-input-probes-test>"
    linecache.cache[name] = (len(cell), None, cell.splitlines(keepends=True), name)

    def double(x):
        stacks.append("".join(traceback.format_stack()))
        return x * 2

    collect = probes.collect
    monkeypatch.setattr(probes, "collect", lambda block: collect(block, {"double": double}))
    exec(compile(cell, name, "exec"), {"send": probes.send})
    assert sent and stacks  # (the records say "tampered": this test replaced _send)
    assert marker not in stacks[0]
    # the known-bad case: a cell whose text is still cached shows it
    linecache.cache[name] = (len(cell), None, cell.splitlines(keepends=True), name)
    assert marker in linecache.getline(name, 1)
    linecache.cache.pop(name)


# -- facts whose right value is a constant: forging them is tampering, never a point

TRACKED = """
@probe("f runs g under no_grad", hints={"tracking on": "use torch.no_grad()."})
def _(f):
    passes = []

    def g(t):
        checkpoint()
        passes.append(torch.is_grad_enabled())
        return t * 2

    return {"result": f(g, torch.ones(2)), "tracking on": sum(passes)}
"""


def _honest(g, t):
    with torch.no_grad():
        return g(t)


def _patched_during_the_call(g, t):
    """Grad mode stays on, but torch.is_grad_enabled says "off" while g runs, then is put back."""
    real = torch.is_grad_enabled
    torch.is_grad_enabled = lambda: False
    try:
        return g(t).detach()
    finally:
        torch.is_grad_enabled = real


def test_a_fact_forged_while_the_answer_runs_is_tampering():
    honest = _records(TRACKED, f=_honest)
    assert "record" in honest[0] and honest[0]["record"]["dict"]["tracking on"] == 0
    forged = _records(TRACKED, f=_patched_during_the_call)
    assert forged[0]["tampered"] == ["torch.is_grad_enabled"]
    problems = grading.judge(forged, honest)
    assert problems == [f"f runs g under no_grad: no point: {grading.TAMPERED}"]
    assert grading.tampered(forged) == ["torch.is_grad_enabled"]
    assert grading.tampered(honest) == []


def _float64_inside(g, t):
    """Honest: works in float64 while it runs and puts the default back (torch itself rebinds
    torch.Storage meanwhile)."""
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with torch.no_grad():
            return g(t)
    finally:
        torch.set_default_dtype(before)


def test_torchs_own_rebinding_while_the_answer_runs_is_not_tampering():
    (record,) = _records(TRACKED, f=_float64_inside)
    assert "tampered" not in record and record["record"]["dict"]["tracking on"] == 0, record


def test_the_probes_builtins_are_their_own_and_a_patched_builtin_is_tampering(monkeypatch):
    def lying_sum(values, start=0):
        return 0

    monkeypatch.setattr(builtins, "sum", lying_sum)
    got = probes.collect(TRACKED, {"f": lambda g, t: g(t)})  # tracking on: the fact is 2
    monkeypatch.undo()
    assert json.loads(got)[0]["tampered"] == ["builtins.sum"]
    monkeypatch.setattr(torch.nn.Linear, "forward", lambda self, x: x)  # a class's method too
    assert _records(DOUBLE, double=_double)[0]["tampered"] == [
        "torch.nn.modules.linear.Linear.forward"
    ]
    monkeypatch.undo()
    shadow = "requires_grad"  # a name added to a class shadows the one it inherits
    monkeypatch.setattr(torch.Tensor, shadow, True, raising=False)
    assert _records(DOUBLE, double=_double)[0]["tampered"] == ["torch.Tensor.requires_grad"]


def _hooked_during_the_call(g, t):
    """Tracking off around the watched function, but a global forward pre-hook turns it on for
    every module below, removed before the answer returns (the sixth red team's route)."""
    from torch.nn.modules.module import register_module_forward_pre_hook

    handle = register_module_forward_pre_hook(lambda module, args: torch.set_grad_enabled(True))
    try:
        with torch.no_grad():
            return g(t)
    finally:
        handle.remove()


MEMORY = """
@probe("memory shared with the input")
def _(alias):
    t = torch.arange(6.0)[2:]
    return {"shares": same_memory(alias(t), t)}
"""


def test_memory_is_shared_by_the_bytes_two_tensors_span_not_by_their_storage_object():
    """The seventh red team's alias: a second storage over the same bytes (through numpy)."""
    for alias, shares in [
        (lambda t: torch.from_numpy(t.numpy()), True),
        (lambda t: t[1:], True),
        (lambda t: t.clone(), False),
    ]:
        assert _records(MEMORY, alias=alias)[0]["record"]["dict"]["shares"] is shares
    t = torch.arange(6.0)[2:]  # the known-bad case: comparing the storages' first bytes
    other = torch.from_numpy(t.numpy())
    assert other.untyped_storage().data_ptr() != t.untyped_storage().data_ptr()


class _Unfreeze:
    """Puts the flags back when the model that holds it goes (the seventh red team)."""

    def __init__(self, params):
        self.params = params

    def __del__(self):
        for p in self.params:
            p.requires_grad_(True)


def _freeze_and_hide_it(model):
    params = list(model.parameters())
    for p in params:
        p.requires_grad_(False)
    model.undo = _Unfreeze(params)


FLAGS = """
@probe("the flags of the parameters after the call")
def _(touch):
    model = torch.nn.Linear(2, 1)
    touch(model)
    return {"parameters": dict(model.named_parameters())}
"""


def test_what_a_probe_returns_is_read_before_its_locals_go():
    """A probe's return is recorded inside it (the grader rewrites ``return``): a finalizer of
    the answer's that runs when the probe's model goes cannot change what was read."""
    (result,) = _records(FLAGS, touch=_freeze_and_hide_it)
    facts = result["record"]["dict"]["parameters"]["dict"]
    assert [facts[n]["requires_grad"] for n in ("weight", "bias")] == [False, False]
    model = torch.nn.Linear(2, 1)  # the known-bad case: read after the model went
    params = dict(model.named_parameters())
    _freeze_and_hide_it(model)
    del model
    assert [p.requires_grad for p in params.values()] == [True, True]


def test_a_global_hook_added_while_the_answer_runs_is_tampering():
    (forged,) = _records(TRACKED, f=_hooked_during_the_call)
    (name,) = forged["tampered"]
    assert name.startswith("global forward_pre_hooks."), forged
    assert grading.tampered([forged]) == ["a hook added to torch's global forward_pre_hooks"]
    (honest,) = _records(TRACKED, f=_honest)
    assert "record" in honest, honest


def test_every_probe_starts_with_anomaly_mode_off():
    """An answer may debug with anomaly mode (it only adds checks): the probes, which may
    compute with nan, run with it off, as the reference's did."""
    source = """
@probe("anomaly mode inside the call")
def _(f):
    return {"on": f()}
"""
    torch.autograd.set_detect_anomaly(True)
    try:
        (result,) = _records(source, f=torch.is_anomaly_enabled)
    finally:
        torch.autograd.set_detect_anomaly(False)
    assert result["record"]["dict"]["on"] is False


def test_a_torch_function_mode_left_on_is_tampering():
    from torch.overrides import TorchFunctionMode

    class Liar(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            return func(*args, **(kwargs or {}))

    def leaves_it_on(x):
        Liar().__enter__()
        return x * 2

    try:
        got = _records(DOUBLE, double=leaves_it_on)
    finally:
        while torch._C._len_torch_function_stack():
            torch._C._pop_torch_function_stack()
    assert got[0]["tampered"] == ["a mode of class Liar left on"]
    with torch.device("cpu"):  # torch's own modes are not the answer's
        assert "record" in _records(DOUBLE, double=_double)[0]


def test_what_the_kernel_names_as_tampered_is_shown_only_when_the_grader_finds_it():
    """The kernel chooses these strings: the tenth red team added methods to torch.Tensor named
    after 26-character slices of the hidden tests, ten quoted a probe. Only names of things in
    the grader's own modules are repeated; an added name only as where it was added."""
    title = "f runs g under no_grad"
    secret = "gen_seeded_2021_for_trial_in_range"
    crafted = [
        {
            "title": title,
            "tampered": [
                "x" * 300,
                "torch.sum",
                7,
                f"torch._tensor.Tensor.{secret}",
                f"a mode of class {secret} left on",
                f"os.{secret}",
            ],
        }
    ]
    assert grading.tampered(crafted) == [
        "a name added to torch._tensor.Tensor",
        "a torch function mode left on",
        "something else",
        "torch.sum",
    ]
    assert grading.tampered([{"title": title, "tampered": []}]) == ["something else"]
    lines = grading.judge(crafted, _records(TRACKED, f=_honest))
    assert not any(secret[:8] in line or "x" * 41 in line for line in lines), lines


def test_the_tripwires_answer_is_repeated_only_as_it_answers():
    """The tripwire lives in the student's process: a replaced one can answer anything."""
    assert grading.tripwire_answer("ok") == "ok"
    assert (
        grading.tripwire_answer("changed: torch.add, notebook name.check_leaves, SElOVFMgPSB7")
        == "changed: torch.add, a helper the lesson defines, something else"
    )
    leak = "HINTS = {'result': 'seeded(101)'} " * 2000
    assert "seeded" not in grading.tripwire_answer(leak)
    assert "seeded" not in grading.tripwire_answer("changed: " + leak)


LIBRARY_CHANGE = """
import json, torch
from course.lesson import probes

def first_step(x):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x.reshape(-1, 1)).sum().backward()
    optimizer.step()  # imports torch._dynamo, which wraps torch.manual_seed
    return x * 2

def compiled(x):
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.Adam(model.parameters())
    torch.compile(model)(x.reshape(-1, 1)).sum().backward()  # dynamo wraps Module.__init__, ...
    optimizer.step()
    return x * 2

def own_wrapper(x):
    real = torch.manual_seed
    torch.manual_seed = lambda seed: real(seed)
    return x * 2

ANSWERS = {"library": first_step, "compile": compiled, "cell": own_wrapper}
answer = ANSWERS[__import__("sys").argv[1]]
source = '''
@probe("double")
def _(double):
    return {"result": double(torch.ones(3))}
'''
print(json.dumps([sorted(r) for r in json.loads(probes.collect(source, {"double": answer}))]))
"""


@pytest.mark.parametrize(
    "who, expected", [("library", "record"), ("compile", "record"), ("cell", "tampered")]
)
def test_a_librarys_own_wrapper_is_not_tampering_and_a_cells_is(who, expected):
    """In a fresh interpreter, as in a kernel: the first optimizer step is torch's change."""
    result = subprocess.run(
        [sys.executable, "-c", LIBRARY_CHANGE, who],
        capture_output=True,
        text=True,
        env=venv_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert expected in json.loads(result.stdout.splitlines()[-1])[0]


SEND = """
@probe("double of a vector", hints={"result": "multiply by two."})
def _(double):
    return {"result": double(torch.tensor([1.0, 2.0]))}
"""


RELAY = """
import sys
real = sys.stdout
class Relay:
    def write(self, text):
        return real.write(text)
    def flush(self):
        session = real.session
        build = type(session).msg
        def msg(*args, **kwargs):
            del session.msg
            message = build(session, *args, **kwargs)
            message["content"] = dict(message["content"])  # rewrites nothing here, but could
            return message
        session.msg = msg
        real.flush()
sys.stdout = Relay()
"""


@pytest.mark.parametrize(
    "tampering, delivered",
    [
        ("", True),
        # a printer for str in the display formatter: the records are not a cell's value
        (
            "exit._ip.display_formatter.formatters['text/plain'].for_type(str, lambda *a: None)",
            True,
        ),
        ("exit._ip.display_pub.register_hook(lambda msg: msg)", False),
        (
            "s = exit._ip.display_pub.session; pack = s.pack\n"
            "s.pack = lambda obj: pack(obj)",  # rewrites nothing here, but could
            False,
        ),
        ("import ipykernel.zmqshell as z; z.encode_images = lambda data: data", False),
        (
            "s = exit._ip.display_pub.session; send = s.send\n"
            "s.send = lambda *a, **k: send(*a, **k)",  # an instance attribute hiding the method
            False,
        ),
        (  # the last hop: the socket the IO thread writes to (the seventh red team)
            "import zmq.sugar.socket as z; send = z.Socket.send_multipart\n"
            "z.Socket.send_multipart = lambda self, *a, **k: send(self, *a, **k)",
            False,
        ),
        (  # a stream whose flush gives the session a one-shot msg that rewrites the records
            # (the eighth red team): the publisher's publish flushed it after the check
            RELAY,
            False,
        ),
    ],
    ids=[
        "untouched",
        "str printer",
        "display hook",
        "packer",
        "module function",
        "method",
        "wire",
        "stream",
    ],
)
def test_the_records_leave_by_the_publisher_as_it_was_or_not_at_all(tampering, delivered):
    """In a real kernel: the channel is taken when the tripwire starts (here: attach), and a
    change made afterwards anywhere on the way means nothing is sent."""
    from nbclient import NotebookClient

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_code_cell("from course.lesson.outbox import OUTBOX; OUTBOX.attach()"),
        nbformat.v4.new_code_cell("def double(x):\n    return x * 2\n" + tampering),
        nbformat.v4.new_code_cell(grading.collect_code(SEND)),
    ]
    NotebookClient(nb, timeout=120, kernel_name="python3").execute()
    found = grading.read_records(nb.cells[-1].outputs)
    if delivered:
        assert found is not None and grading.judge(found, _records(SEND, double=_double)) == []
    else:
        assert found is None, found
