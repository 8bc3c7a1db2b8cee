"""Hidden tests judged outside the student's kernel: differential testing against the reference.

A test cell's hidden block is a list of probes (`course.lesson.probes`). The student's kernel runs
only the cell's visible part in place; once the whole notebook has run, the grader has it run each
block's probes (`collect_code`) outside the notebook's cells and history, and reads back their
records as JSON data, sent as a message of their own (`course.lesson.outbox`). The expected
records come from a trusted kernel that ran the source notebook, reference solutions included,
the same way (`expected_records`); no student code ever runs there, and the expected values never
enter the student's kernel. `judge` compares the two in the grader's own process. Whatever the
student's kernel sends is only data: to match, it must hold the reference's values for inputs it
never saw before, which is solving the exercise.
"""

from __future__ import annotations

import ast
import builtins
import copy
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Collection, Mapping
from pathlib import Path

import nbformat
import torch
from nbclient import NotebookClient

from ..lesson.outbox import RECORDS_MIME
from ..lesson.pristine import global_hooks
from . import atomic
from .warm import Prefix, leading_code, prefix_sources, widget_buffer_lists

HIDDEN = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS[ \t]*\n(.*?)^[ \t]*### END HIDDEN TESTS[ \t]*\n?",
    re.MULTILINE | re.DOTALL,
)
FAILED = "HiddenTestFailed"
CACHE_VERSION = "4"  # bump when the record format or the way records are made changes


class ReferenceError(Exception):
    """The reference solution does not pass its own probes: the source notebook needs fixing."""


def split_hidden(source: str) -> tuple[str, str]:
    """A test cell's visible part (hidden blocks removed) and its hidden blocks' code."""
    hidden = "".join(match.group(1) for match in HIDDEN.finditer(source))
    return HIDDEN.sub("", source), hidden


def collect_code(hidden: str) -> str:
    """The code that runs one hidden block's probes in a kernel and sends their records."""
    return f"__import__('course.lesson.probes').lesson.probes.send({hidden!r})"


def read_records(outputs: list) -> list[dict] | None:
    """The records a `collect_code` cell sent (`course.lesson.outbox`), or None if there is not
    exactly one such message: the probes raised, the output was cut, the channel had been
    changed (nothing sent) or the answer sent one too, or what came back is not records."""
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


def test_cells(nb) -> list[tuple[str, str]]:
    """(grade id, hidden code) of every test cell with hidden tests, in notebook order."""
    found = []
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            _, hidden = split_hidden(cell.source)
            if hidden.strip():
                found.append((meta["grade_id"], hidden))
    return found


# -- comparing records
#
# Every message is written here, from the reference's records; what the student's kernel sent
# is data, and the only text of it that may reach the feedback is `_plain`: short, of a few
# characters, never a hidden test's source or a record's hints.

PLAIN = re.compile(r"[\w .,:()\[\]+-]+", re.ASCII)  # ASCII: no dense encoding in a name
TORCH_DTYPES = {str(v) for v in vars(torch).values() if isinstance(v, torch.dtype)}
# Names of errors to show (torch raises these too); a class the answer made is "an exception".
BUILTIN_ERRORS = {
    n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
}


# The longest string of a student's record that the feedback quotes: a name, a dtype, a label or
# an answer like "b". Every quoted character is one the answer chose, and the eighth red team
# moved the hidden tests into its feedback 40 of them a probe. A tampered name ("torch.nn.Module.
# __call__") may be longer: at most ten of them a notebook, not one a probe.
PLAIN_LIMIT, NAME_LIMIT = 20, 40
MAX_ELEMENTS = 2**33  # more than any tensor a grading kernel can hold (8 GiB of bools)


def _plain(text: object, default: str = "something else", limit: int = PLAIN_LIMIT) -> str:
    """``text`` if it is a short plain string (a name, a dtype, an answer like "b"), else
    ``default``."""
    plain = isinstance(text, str) and len(text) <= limit and PLAIN.fullmatch(text)
    return text if plain else default


def _is_shape(value) -> bool:
    """A list that could be a tensor's shape: at most 8 sizes, none negative, and no more
    elements in all than a kernel's memory could hold. Sizes of any length carried the hidden
    tests' source in their digits (the ninth red team)."""
    if type(value) is not list or len(value) > 8:
        return False
    if not all(type(n) is int and 0 <= n <= MAX_ELEMENTS for n in value):
        return False
    return math.prod(n for n in value if n) <= MAX_ELEMENTS


def _short(value) -> str:
    """A value from a record, as the grader writes it: a short plain string, a number (an int of
    at most 15 digits, a float to six significant digits), a bool, None or a shape
    (`_is_shape`); anything else is "something else" (a list of strings in the place of a shape
    could carry the hidden test's source)."""
    if isinstance(value, str):
        return json.dumps(_plain(value, "a long or unusual string"))
    if type(value) is int and abs(value) >= 10**15:  # its digits could carry any text
        return "a very large int"
    if type(value) is float:  # six significant digits: a float's last ones could carry text
        return repr(float(f"{value:.6g}"))
    if value is None or type(value) in (bool, int):
        return json.dumps(value)
    if _is_shape(value):
        return json.dumps(value)
    return "something else"


def _describe(value) -> str:
    if isinstance(value, dict):
        if "tensor" in value:
            dtype = value["tensor"] if value["tensor"] in TORCH_DTYPES else "tensor of another"
            return f"a {dtype} tensor of shape {_short(value.get('shape', ()))}"
        if "list" in value:
            kind = value.get("kind") if value.get("kind") in ("list", "tuple") else "sequence"
            return f"a {kind} of {len(value['list'])}"
        if "dict" in value:
            return "a dict"
        if "dtype" in value:
            return _plain(value["dtype"], "a dtype")
        return f"an object of class {_plain(value.get('object'), '?')}"
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, str):  # where a str is not expected, its text helps nobody
        return "a str"
    article = "an" if type(value).__name__ == "int" else "a"
    return f"{article} {type(value).__name__} {_short(value)}"


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
    close = torch.isclose(flat_got, flat_want, rtol=rtol, atol=atol, equal_nan=True)
    if bool(close.all()):
        return None
    index = int((~close).nonzero()[0])
    got, want = float(flat_got[index]), float(flat_want[index])
    return f"entry {index} (in row-major order) is {got:.6g}, expected {want:.6g}"


def _tensor_difference(got: dict, want: dict, rtol: float, atol: float) -> str | None:
    if got.get("tensor") != want.get("tensor"):
        return f"its dtype is {_plain(got.get('tensor'))}, expected {want.get('tensor')}"
    if got.get("shape") != want.get("shape"):
        return f"its shape is {_short(got.get('shape'))}, expected {want.get('shape')}"
    for fact in ("requires_grad", "is_leaf"):
        if got.get(fact) != want.get(fact):
            return f"its {fact} is {_short(got.get(fact))}, expected {want.get(fact)}"
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
        return f"{at}got {_short(got) if isinstance(got, str) else _describe(got)}, not the answer"
    if isinstance(want, dict) and "tensor" in want:
        if not (isinstance(got, dict) and "tensor" in got):
            return f"{at}got {_describe(got)}, expected {_describe(want)}"
        problem = _tensor_difference(got, want, rtol, atol)
        return f"{at}{problem}" if problem else None
    if isinstance(want, dict) and "list" in want:
        if not (isinstance(got, dict) and "list" in got) or got.get("kind") != want["kind"]:
            return f"{at}got {_describe(got)}, expected {_describe(want)}"
        if len(got["list"]) != len(want["list"]):
            return f"{at}got {len(got['list'])} items, expected {len(want['list'])}"
        for index, (g, w) in enumerate(zip(got["list"], want["list"])):
            if problem := difference(g, w, rtol, atol, f"{path}[{index}]", reveal):
                return problem
        return None
    if isinstance(want, dict) and "dict" in want:
        if not (isinstance(got, dict) and "dict" in got):
            return f"{at}got {_describe(got)}, expected {_describe(want)}"
        if set(got["dict"]) != set(want["dict"]):
            missing = sorted(set(want["dict"]) - set(got["dict"]))
            extra = len(set(got["dict"]) - set(want["dict"]))
            return f"{at}has other keys than expected (missing: {missing}; {extra} extra)"
        for key in want["dict"]:
            if problem := difference(
                got["dict"][key],
                want["dict"][key],
                rtol,
                atol,
                f"{path}[{key!r}]" if path else key,
                reveal,
            ):
                return problem
        return None
    if isinstance(want, float) and type(got) is float and _close(got, want, rtol, atol):
        return None
    if type(got) is not type(want) or got != want:
        if type(got) is type(want) and not isinstance(want, dict):
            return f"{at}got {_short(got)}, expected {_short(want)}"
        return f"{at}got {_describe(got)}, expected {_describe(want)}"
    return None


def _is_probe(decorator: ast.expr) -> bool:
    call = decorator.func if isinstance(decorator, ast.Call) else decorator
    return isinstance(call, ast.Name) and call.id == "probe"


def asked_names(hidden: str) -> set[str]:
    """The names a hidden block's probes ask the notebook for: their parameters without a
    default (as `course.lesson.probes.run` asks), read from the block's text on the grader's
    side."""
    try:
        tree = ast.parse(hidden)
    except SyntaxError:
        return set()
    asked = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and any(map(_is_probe, node.decorator_list)):
            arguments = node.args.args
            asked.update(a.arg for a in arguments[: len(arguments) - len(node.args.defaults)])
    return asked


def judge(
    got: list[dict] | None, want: list[dict], reveal: bool = False, asked: Collection[str] = ()
) -> list[str]:
    """What the student's records get wrong, one line per failing probe ([] when all pass).
    Titles, tolerances and hints come from the reference's records only; expected answers are
    named only when ``reveal`` (`difference`); a name the notebook lacks, only when it is one of
    ``asked`` (`asked_names`): the kernel reports it, and any text there could carry the hidden
    block (the eleventh red team)."""
    if got is None:
        return [
            "the hidden tests could not read your answer's results (the code that runs them "
            "raised, or its output was cut)"
        ]
    by_title = {r.get("title"): r for r in got if type(r.get("title")) is str}
    problems = []
    for expected in want:
        title = expected["title"]
        mine = by_title.get(title, {})
        if "missing" in mine:
            name = mine["missing"] if mine["missing"] in asked else "a function it calls"
            problems.append(f"{title}: {name} is not defined")
        elif "raised" in mine:
            raised = mine["raised"]
            kind = raised if type(raised) is str and raised in BUILTIN_ERRORS else "an exception"
            if kind == "NotImplementedError" and not mine.get("message"):  # nbgrader's stub
                problems.append(f"{title}: not implemented yet")
            else:  # its message is the student's text, free to carry the hidden inputs
                problems.append(f"{title}: raised {kind}")
        elif "tampered" in mine:  # what was replaced is named once, in the notebook's finding
            problems.append(f"{title}: no point: {TAMPERED}")
        elif "record" not in mine:
            problems.append(f"{title}: no result")
        else:
            rtol, atol = expected["rtol"], expected["atol"]
            try:
                problem = difference(mine["record"], expected["record"], rtol, atol, reveal=reveal)
            except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError):
                problem = "the result could not be read as data"  # a malformed record
            if problem:
                hints = expected["hints"].items()
                hint = next((h for key, h in hints if problem.startswith(key)), "")
                problems.append(f"{title}: {problem}. {hint}".rstrip())
    return problems


TAMPERED = "while it ran, code in the notebook had replaced what the tests rely on"
# What the tripwire (`course.grading.guard`) names besides the modules' and classes' names.
TRIPWIRE_ENTRIES = {
    "torch default dtype",
    "torch global hooks",
    "sys.meta_path",
    "sys.path_hooks",
    "sys.modules",
    "IPython input transformers",
    "IPython AST transformers",
    "IPython events",
    "notebook's __import__",
    "notebook's __builtins__",
}
_MISSING = object()


def _found_in(owner, name: str):
    """``owner``'s attribute ``name`` as it is stored (a module's or a class's own, or a base
    class's), never computed: no property, no module ``__getattr__`` runs."""
    for holder in owner.__mro__ if isinstance(owner, type) else (owner,):
        stored = getattr(holder, "__dict__", None)
        if isinstance(stored, Mapping) and name in stored:
            return stored[name]
    return _MISSING


def known_name(name: object) -> str:
    """A name the student's kernel reported as replaced, as the feedback may repeat it: the
    name of something in the grader's own modules (``torch.Tensor.add``, ``builtins.getattr``)
    or one of the tripwire's own entries. Other text, which the kernel is free to choose (the
    tenth red team put the hidden tests in the names of methods it added), is said only as
    where it was added, or "something else"."""
    if not isinstance(name, str) or len(name) > 200:
        return "something else"
    name = name.removesuffix(" code")  # the tripwire's entry for a function's swapped code
    if name in TRIPWIRE_ENTRIES:
        return name
    if name.startswith("IPython shell."):
        return "a method of the IPython shell"
    if name.startswith("notebook name."):
        return "a helper the lesson defines"
    if name.startswith("course."):
        return "a name in the course's own modules (the probes, the checks, the tripwire)"
    if name.startswith("a mode of class ") and name.endswith(" left on"):
        return "a torch function mode left on"  # its class name is the answer's to choose
    table = name.split(".")[0]
    if table in {label for label, _ in global_hooks()}:
        return f"a hook added to torch's {table}"
    parts = name.split(".")
    depth = next((n for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in sys.modules), 0)
    if not depth or parts[0] not in ("torch", "builtins", "math", "linecache", "typing"):
        return "something else"
    owner = sys.modules[".".join(parts[:depth])]
    for index in range(depth, len(parts)):
        found = _found_in(owner, parts[index])
        if found is _MISSING:
            last = index == len(parts) - 1
            return f"a name added to {'.'.join(parts[:index])}" if last else "something else"
        owner = found
    return name


def tampered(got: list[dict] | None) -> list[str]:
    """What the student's kernel said was replaced while its probes ran (`course.lesson.probes`
    and `course.lesson.pristine`), as names the grader can find itself (`known_name`); [] when
    nothing was."""
    names = set()
    for record in got or []:
        if "tampered" in record:
            found = record["tampered"]
            listed = found[:10] if isinstance(found, list) and found else ["something else"]
            names.update(known_name(n) for n in listed)
    return sorted(names)[:10]


def tripwire_answer(answer: str) -> str:
    """The tripwire's answer as the grader may repeat it: "ok", its fixed messages, or
    "changed: " and at most ten `known_name`s. The kernel wrote it: anything else is not
    quoted."""
    if answer in ("ok", "no snapshot was taken", "the tripwire did not answer"):
        return answer
    if not answer.startswith("changed: "):
        return "the tripwire answered what it never answers (it was replaced)"
    names = [known_name(n) for n in answer.removeprefix("changed: ").split(", ")[:10]]
    return "changed: " + ", ".join(dict.fromkeys(names))


def failure_output(problems: list[str]) -> nbformat.NotebookNode:
    """The error a test cell shows when its hidden tests fail (nbgrader scores it 0)."""
    message = "a hidden test failed:\n" + "\n".join(f"- {p}" for p in problems)
    return nbformat.v4.new_output(
        "error", ename=FAILED, evalue=message, traceback=[f"{FAILED}: {message}"]
    )


# -- the reference's records


def _run_reference(source: Path) -> tuple[dict[str, list[dict]], Prefix | None]:
    """Run the source notebook, reference solutions included, with every hidden block's probes
    after its last cell, as the grader runs a submission (``NBGRADER_EXECUTION``: the lesson's
    widgets draw nothing): the records by grade id, and what the leading locked cells printed
    (`course.grading.warm.Prefix`, for kernels forked warm; None if it has none)."""
    nb = nbformat.read(source, as_version=4)
    lead = prefix_sources(nb)
    leading = leading_code(nb, len(lead))
    blocks = test_cells(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.source = split_hidden(cell.source)[0]
    for _, hidden in blocks:
        nb.cells.append(nbformat.v4.new_code_cell(collect_code(hidden)))
    widgets: list = []

    def after(cell, cell_index, execute_reply) -> None:
        if leading and cell_index == leading[-1]:  # the widget models the prefix made
            widgets[:] = [copy.deepcopy(client.widget_state), widget_buffer_lists(client)]

    with tempfile.TemporaryDirectory(prefix="course-reference-") as folder:
        shutil.copytree(source.parent, folder, dirs_exist_ok=True)
        client = NotebookClient(
            nb,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": folder}},
            extra_arguments=["--IPKernelApp.log_level=ERROR"],  # no TCP warning on every run
            on_cell_executed=after,
        )
        # CellExecutionError: the source notebook itself fails
        client.execute(env={**os.environ, "NBGRADER_EXECUTION": "autograde"})
    records = {}
    for (grade_id, _), cell in zip(blocks, nb.cells[-len(blocks) :] if blocks else []):
        found = read_records(cell.outputs)
        bad = [r.get("title") for r in found or [] if "record" not in r]
        if found is None or bad:
            raise ReferenceError(f"{source}: the reference fails the probes of {grade_id}: {bad}")
        records[grade_id] = found
    cells = [nb.cells[i] for i in leading]
    prefix = (
        Prefix(lead, [c.outputs for c in cells], [c.execution_count for c in cells], *widgets)
        if widgets
        else None
    )
    return records, prefix


def cache_dir(course_root: Path, assignment: str) -> Path:
    """Where the reference's records of an assignment are kept: in the course folder, which no
    kernel can see (`course.grading.sandbox`)."""
    return Path(course_root) / ".course" / "expected" / assignment


def _cached(source: Path, cache: Path) -> Path:
    """The reference's records of ``source`` in ``cache``, named by the source's content, torch's
    version and `CACHE_VERSION`; its prefix (`expected_prefix`) beside it."""
    digest = hashlib.sha256(
        source.read_bytes() + torch.__version__.encode() + CACHE_VERSION.encode()
    ).hexdigest()[:16]
    return cache / f"{source.stem}-{digest}.json"


def expected_records(source: Path, cache: Path) -> dict[str, list[dict]]:
    """The reference's records for every test cell of ``source``, by grade id: computed once per
    version of the source notebook (and of torch) and kept under ``cache``, with what its leading
    locked cells printed (`expected_prefix`)."""
    path = _cached(source, cache)
    if path.is_file():
        return json.loads(path.read_text())
    records, prefix = _run_reference(source)
    cache.mkdir(parents=True, exist_ok=True)
    if prefix is not None:  # before the records: a reader that finds them finds it too
        prefix.save(path.with_suffix(".prefix.json"))
    atomic.write_text(path, json.dumps(records))  # a concurrent grader reads all of it or none
    return records


def expected_prefixes(course_root: Path, assignments: list[str]) -> dict[Path, Path]:
    """Source notebook -> the file of what its leading locked cells printed in the reference's
    kernel (made with its records, `expected_records`), for each notebook of ``assignments``
    that has such cells: what a kernel forked warm shows for them (`course.grading.warm`)."""
    found = {}
    for assignment in assignments:
        cache = cache_dir(course_root, assignment)
        for source in sorted((Path(course_root) / "source" / assignment).glob("*.ipynb")):
            expected_records(source, cache)
            path = _cached(source, cache).with_suffix(".prefix.json")
            if path.is_file():
                found[source] = path
    return found
