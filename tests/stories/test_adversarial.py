"""Grading that cannot be fooled, crashed or made to lose work: one class of hostile and broken
submissions, graded in one batch by `python -m course grade`'s code, each checked against what
the README promises (an explicit status, points only for values the grader judged, limits, the
sandbox, nothing reaching the instructor's terminal), together with honest students whose grades
must come out untouched."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest

from course.grading import batch
from course.grading.coursedir import Course
from course.grading.sandbox import FIRST_UID
from course.submission import build_submission, reference_answers, write_submission
from course_testing import cell_scores, copy_course, live_processes, points

A = "01_requires_grad"
FULL = points(A)  # the autograded points of the notebook
WRONG = "def make_trainable(values):\n    return torch.as_tensor(values)"
MT_TESTS = ["test_make_trainable", "test_make_trainable_copies_tensors"]
WRONG_SCORE = FULL - points(A, "test_make_trainable")  # WRONG fails both of its test cells
HOLD_NO_GRAD = (
    "\ndef _hold():\n    with torch.no_grad():\n        yield\n_held = _hold()\nnext(_held)\n"
)


def _cells_with(nb, grade_id: str) -> int:
    return next(
        i
        for i, c in enumerate(nb.cells)
        if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
    )


def _edit_tests(nb):
    for grade_id in MT_TESTS:
        nb.cells[_cells_with(nb, grade_id)].source = "pass"
    return nb


def _delete_tests(nb):
    for grade_id in MT_TESTS:
        del nb.cells[_cells_with(nb, grade_id)]
    return nb


def _reorder(nb):
    moved = [nb.cells.pop(_cells_with(nb, g)) for g in MT_TESTS]
    nb.cells[0:0] = moved  # tests before the imports and the answer they check
    return nb


def _rename_grade_id(nb):
    meta = nb.cells[_cells_with(nb, MT_TESTS[0])].metadata.nbgrader
    meta.grade_id, meta.points = "test_free_points", 100
    return nb


def _forge_points(nb):
    nb.cells[_cells_with(nb, MT_TESTS[0])].metadata.nbgrader.points = 100
    return nb


def _answer_as_test(nb):
    meta = nb.cells[_cells_with(nb, "make_trainable")].metadata.nbgrader
    meta.update(grade=True, points=50, locked=True, solution=False)
    return nb


def _duplicate(nb):
    start = _cells_with(nb, "make_trainable")
    nb.cells[start:start] = [nbformat.from_dict(c) for c in nb.cells[start : start + 3]]
    return nb


def _empty(nb):
    nb.cells = []
    return nb


def _cold(nb):
    """A cell of the student's own before the first locked one: the kernel starts cold."""
    nb.cells.insert(0, nbformat.v4.new_code_cell(TERMINAL))
    return nb


# What a kernel started cold writes to every descriptor it may have inherited from the grader:
# an xterm title, a clipboard write (OSC 52) and a forged summary line.
TERMINAL_MARK = "graded 21/21 by the kernel"
TERMINAL = (
    "import os\n"
    f"text = '\\x1b]0;pwned\\x07\\x1b]52;c;cHduZWQ=\\x07\\n{TERMINAL_MARK}\\n'.encode()\n"
    "for fd in range(1, 64):\n"
    "    try:\n"
    "        with open(f'/proc/self/fd/{fd}', 'wb') as out:\n"
    "            out.write(text)\n"
    "    except OSError:\n"
    "        pass\n"
)
HUGE_ERROR = "def make_trainable(values):\n    raise ValueError('x' * 24 * 2**20)"
WIDGET_VALUE = (
    "{answer}\nfrom course.lesson.widgets.graph import show_graph\n"
    "placeholder = show_graph()\nplaceholder.value = 'x' * 21_000_000"
)


# Correct, and warns on every call (torch.tensor of a tensor): a warning on stderr in a test
# cell would give it 0 under nbgrader alone.
WARNS = (
    "def make_trainable(values):\n"
    "    return torch.tensor(values, dtype=torch.float32).clone().requires_grad_()"
)
UNICODE = (
    "{answer}\n# Übung: ∂L/∂w, 你好, 🙂\n"
    'def größe(λ):\n    """ελληνικά ✓"""\n    return λ\nprint(größe("日本語 ✓"))\n'
)


def _reading(root: Path) -> str:
    """Student code (allowed by the scan: numpy only) that tries to read and write what the
    sandbox hides, and prints what it managed."""
    targets = [
        root / "source" / A / f"{A}.ipynb",
        root / "gradebook.db",
        Path("../../../source") / A / f"{A}.ipynb",
        Path("../../../gradebook.db"),
    ]
    return (
        "import numpy as np\n"
        f"for path in {[str(t) for t in targets]!r}:\n"
        "    try:\n"
        "        np.fromfile(path, dtype=np.uint8, count=10)\n"
        "        print('READ', path)\n"
        "    except OSError:\n"
        "        print('BLOCKED', path)\n"
        "try:\n"
        f"    np.save({str(root / 'pwned.npy')!r}, np.zeros(1))\n"
        "    print('WROTE')\n"
        "except OSError:\n"
        "    print('BLOCKED write')\n"
    )


# student -> (answers to replace, notebook transform or None)
CLASS = {
    "honest": ({}, None),
    "wrong": ({"make_trainable": WRONG}, None),
    "edited_tests": ({"make_trainable": WRONG}, _edit_tests),
    "deleted_tests": ({"make_trainable": WRONG}, _delete_tests),
    "reordered": ({"make_trainable": WRONG}, _reorder),
    "renamed_grade_id": ({"make_trainable": WRONG}, _rename_grade_id),
    "forged_points": ({}, _forge_points),
    "answer_as_test": ({"make_trainable": WRONG}, _answer_as_test),
    "duplicated": ({}, _duplicate),
    "empty_notebook": ({}, _empty),
    "unicode": ({"make_trainable": UNICODE}, None),
    "warns": ({"make_trainable": WARNS}, None),
    "patch_allclose": ({"make_trainable": WRONG + "\ntorch.allclose = lambda *a, **k: True"}, None),
    "input_transformer": (
        {
            "make_trainable": WRONG + "\nget_ipython().input_transformers_cleanup"
            ".append(lambda lines: ['pass\\n'])"
        },
        None,
    ),
    "patch_checks": (
        {
            "make_trainable": WRONG + "\nimport course.lesson.checks as c\n"
            "c.expect = lambda *a, **k: None"
        },
        None,
    ),
    "rebind_helper": ({"make_trainable": WRONG + "\nexpect_tensor = lambda *a, **k: None"}, None),
    "patch_builtins": ({"make_trainable": WRONG + "\nisinstance = lambda *a: True"}, None),
    "hide_tracebacks": ({"make_trainable": WRONG + "\nget_ipython().showtraceback = print"}, None),
    "held_no_grad": ({"make_trainable": WRONG + HOLD_NO_GRAD}, None),
    "os_exit": ({"make_trainable": "import os\nos._exit(3)"}, None),
    "segfault": ({"make_trainable": "import ctypes\nctypes.string_at(0)"}, None),
    "infinite_loop": ({"make_trainable": WRONG + "\nwhile True:\n    pass"}, None),
    "total_time": (
        {
            name: "{answer}\nimport time\ntime.sleep(12)"
            for name in ("make_trainable", "leaf_inputs", "freeze_all_but", "quick_check")
        },
        None,
    ),
    "output_flood": (
        {"make_trainable": "{answer}\nfor _ in range(300):\n    print('x' * 10_000)"},
        None,
    ),
    "memory_hog": ({"make_trainable": "big = torch.ones(2_000_000_000)\n" + WRONG}, None),
    "fork_storm": (
        {
            "make_trainable": "{answer}\nimport os, time\nfor _ in range(2000):\n"
            "    try:\n        pid = os.fork()\n    except OSError:\n        break\n"
            "    if pid == 0:\n        time.sleep(120)\n        os._exit(0)"
        },
        None,
    ),
    "read_source": ({"make_trainable": "{answer}\n{reading}"}, None),
    "network": (
        {
            "make_trainable": "{answer}\nimport socket\ntry:\n"
            "    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('CONNECTED')\nexcept OSError as error:\n    print('NO NETWORK', error)"
        },
        None,
    ),
    "detached_writer": (
        {
            "make_trainable": "{answer}\nimport subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', {writer!r}], "
            "start_new_session=True)"
        },
        None,
    ),
    "terminal_writer": ({}, _cold),
    "huge_error": ({"make_trainable": HUGE_ERROR}, None),
    "widget_value": ({"make_trainable": WIDGET_VALUE}, None),
    # hand-in files that are not what they claim (the class is graded with them in it)
    "timestamp_link": ({}, None),
    "timestamp_fifo": ({}, None),
    "timestamp_junk": ({}, None),
}


def _listen() -> tuple[socket.socket, list]:
    """A TCP server on the grader's loopback that records whoever connects."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    seen: list = []

    def accept():
        while server.fileno() != -1:
            try:
                seen.append(server.accept())
            except OSError:
                continue

    threading.Thread(target=accept, daemon=True).start()
    return server, seen


def _write_class(course: Course, port: int) -> None:
    refs = reference_answers(course, A)
    writer = (
        f"import sqlite3, time; time.sleep(4); c = sqlite3.connect({str(course.gradebook)!r});"
        " c.execute('update grade set auto_score = 99'); c.commit()"
    )
    fill = {"port": port, "writer": writer, "reading": _reading(course.root)}
    for student, (answers, transform) in CLASS.items():
        code = {
            name: src.format(answer=refs[name], **fill) if "{answer}" in src else src
            for name, src in answers.items()
        }
        nb = build_submission(course, A, {**refs, **code})
        path = write_submission(course, student, A, transform(nb) if transform else nb)
        if student == "honest":
            # extra files beside the notebook never reach the kernel
            (path.parent / "torch.py").write_text("allclose = lambda *a, **k: True\n")
            copy = build_submission(course, A, {**refs, "make_trainable": WRONG})
            nbformat.write(copy, path.parent / f"{A}-Copy1.ipynb")
    (course.root / "submitted" / "zero_bytes" / A).mkdir(parents=True)
    (course.root / "submitted" / "zero_bytes" / A / f"{A}.ipynb").write_bytes(b"")
    folder = course.root / "submitted"
    for student in ("timestamp_link", "timestamp_fifo"):
        (folder / student / A / "timestamp.txt").unlink()
    (folder / "timestamp_link" / A / "timestamp.txt").symlink_to(f"{A}.ipynb")  # its own notebook
    os.mkfifo(folder / "timestamp_fifo" / A / "timestamp.txt")  # a read would wait for ever
    (folder / "timestamp_junk" / A / "timestamp.txt").write_text("the day before yesterday")


def _kernel_processes(marker: Path) -> list[int]:
    """Live processes of kernel uids that this module's grading started: their environment
    names its temporary folder (a kernel's TMPDIR lies there, and what it starts inherits it),
    so another grading run on the machine is not counted."""
    pids = []
    for pid, fields in live_processes():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if int(fields["Uid"].split()[0]) >= FIRST_UID and str(marker).encode() in environ:
            pids.append(pid)
    return pids


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    course = copy_course(tmp_path_factory.mktemp("adversarial") / "course", with_release=True)
    with (course.root / "nbgrader_config.py").open("a") as config:
        config.write("\nc.Execute.timeout = 10\nc.GradingExecute.total_timeout = 45\n")
    server, connections = _listen()
    _write_class(course, server.getsockname()[1])
    marker = tmp_path_factory.mktemp("adversarial-tmp")
    terminal = tmp_path_factory.mktemp("terminal") / "terminal.txt"
    with pytest.MonkeyPatch.context() as patch:  # the run's temporary files, its kernels' homes
        patch.setenv("TMPDIR", str(marker))
        patch.setattr(tempfile, "tempdir", str(marker))
        with _terminal(terminal):  # the grader's own stdout and stderr, as a terminal would get
            outcomes = {o.student: o for o in batch.grade(course, [A], workers=2)}
    time.sleep(6)  # give a detached process time to do its worst
    server.close()
    return course, outcomes, connections, marker, terminal.read_bytes()


class _terminal:
    """Descriptors 1 and 2 of this process (which the grader's workers inherit) sent to a file
    while the block runs."""

    def __init__(self, path: Path):
        self.path = path

    def __enter__(self):
        self.saved = [os.dup(1), os.dup(2)]
        sink = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(sink, 1)
        os.dup2(sink, 2)
        os.close(sink)

    def __exit__(self, *exc):
        for fd, saved in zip((1, 2), self.saved):
            os.dup2(saved, fd)
            os.close(saved)


def _autograded(course: Course, student: str) -> str:
    return (course.root / "autograded" / student / A / f"{A}.ipynb").read_text()


def test_every_student_has_an_explicit_status(graded):
    _, outcomes, _, _, _ = graded
    assert set(outcomes) == set(CLASS) | {"zero_bytes"}
    for o in outcomes.values():
        assert o.status in batch.STATUSES
        assert o.status == batch.GRADED or o.detail, f"{o.student}: {o.status} without a reason"
        assert (o.score is None) == (o.status == batch.FAILED), o


@pytest.mark.parametrize("student", ["honest", "unicode", "duplicated", "forged_points", "warns"])
def test_honest_work_gets_every_point(graded, student):
    """Including the honest student whose folder also holds a torch.py and a wrong extra copy,
    and one whose answer prints a warning in every test cell."""
    _, outcomes, _, _, _ = graded
    assert (outcomes[student].status, outcomes[student].score, outcomes[student].max_score) == (
        batch.GRADED,
        FULL,
        FULL,
    )


@pytest.mark.parametrize(
    "student",
    [
        "wrong",
        "edited_tests",
        "deleted_tests",
        "answer_as_test",
        "memory_hog",
        "infinite_loop",
        "patch_builtins",
        "rebind_helper",
    ],
)
def test_changed_tests_and_metadata_earn_nothing(graded, student):
    """Edited, deleted and re-typed tests are restored and graded; forged points are ignored; a
    loop is cut by the cell timeout and a huge allocation fails in the cell, and the rest of the
    notebook is graded; a rebound builtin changes nothing (the hidden tests are judged outside
    the kernel), nor does a rebound helper (the test cell gets the lesson's own back)."""
    course, outcomes, _, _, _ = graded
    o = outcomes[student]
    assert (o.status, o.score, o.max_score) == (batch.GRADED, WRONG_SCORE, FULL), o
    assert [cell_scores(course, A, student)[t] for t in MT_TESTS] == [0, 0]


def test_a_no_grad_held_open_earns_nothing(graded):
    """Allowed code that leaves torch.no_grad() on for every later cell: the visible tests of
    later exercises fail in the kernel, and each probe starts with grad mode on, so it gains
    nothing over its wrong answer."""
    course, outcomes, _, _, _ = graded
    o = outcomes["held_no_grad"]
    assert o.status == batch.GRADED and o.score <= WRONG_SCORE, o
    assert [cell_scores(course, A, "held_no_grad")[t] for t in MT_TESTS] == [0, 0]


@pytest.mark.parametrize("student", ["reordered", "renamed_grade_id", "empty_notebook"])
def test_moved_renamed_or_missing_cells_earn_nothing(graded, student):
    _, outcomes, _, _, _ = graded
    o = outcomes[student]
    assert o.status in (batch.GRADED, batch.PARTIAL, batch.FAILED), o
    assert o.score is None or (o.score <= WRONG_SCORE and o.max_score == FULL), o


@pytest.mark.parametrize(
    "student", ["patch_allclose", "input_transformer", "patch_checks", "hide_tracebacks"]
)
def test_a_kernel_patched_any_way_earns_nothing_its_values_do_not(graded, student):
    """Any Python runs: patched torch, checks, builtins, transformers or tracebacks change what
    the kernel says, and the grader, which judges the values outside it, gives make_trainable's
    wrong values nothing."""
    course, outcomes, _, _, _ = graded
    o = outcomes[student]
    assert o.status == batch.GRADED and o.score <= WRONG_SCORE and o.max_score == FULL, o
    assert [cell_scores(course, A, student)[t] for t in MT_TESTS] == [0, 0]


@pytest.mark.parametrize("student", ["fork_storm", "network", "detached_writer", "read_source"])
def test_code_that_reaches_for_the_machine_is_graded_on_its_values(graded, student):
    """No policy refuses it: the sandbox contains it (below), and its right answers count."""
    _, outcomes, _, _, _ = graded
    assert (outcomes[student].status, outcomes[student].score) == (batch.GRADED, FULL)


@pytest.mark.parametrize(
    "student, reason",
    [
        ("timestamp_link", "invalid submission: timestamp.txt is a link"),
        ("timestamp_fifo", "invalid submission: timestamp.txt is not a regular file"),
        ("timestamp_junk", "invalid submission: timestamp.txt does not hold a time"),
    ],
)
def test_a_hand_in_file_that_is_not_what_it_claims_fails_only_that_submission(
    graded, student, reason
):
    """The classmates of the same run are graded (a link that nbgrader followed once stopped the
    whole run, printing the linked file), and the failure says why in plain words."""
    _, outcomes, _, _, terminal = graded
    o = outcomes[student]
    assert o.status == batch.FAILED and o.detail.startswith(reason) and not o.grader_fault, o
    assert outcomes["honest"].score == FULL
    assert b'"nbformat"' not in terminal, "the linked notebook was printed"


def test_no_kernel_writes_to_the_instructors_terminal(graded):
    """A kernel started cold writes to every descriptor it could have inherited: none is the
    grader's stdout or stderr (the known-bad case: the launcher's own streams were)."""
    _, outcomes, _, _, terminal = graded
    assert outcomes["terminal_writer"].status == batch.GRADED
    assert TERMINAL_MARK.encode() not in terminal and b"\x1b]52" not in terminal, terminal[-500:]


def test_what_a_kernel_says_is_bounded_on_every_path_into_the_notebook(graded):
    """A 24 MiB error message (which nbgrader copies from the kernel's reply) and a widget's
    21 MB value (kept as the notebook's widget state) are cut: the autograded notebook and the
    feedback page stay small."""
    course, outcomes, _, _, _ = graded
    for student in ("huge_error", "widget_value"):
        assert outcomes[student].status == batch.GRADED, outcomes[student]
        assert len(_autograded(course, student)) < 12 * 2**20, student
        page = course.root / "feedback" / student / A / f"{A}.html"
        assert page.stat().st_size < 12 * 2**20, student
    assert outcomes["widget_value"].score == FULL


@pytest.mark.parametrize(
    "student,reason",
    [
        ("zero_bytes", "invalid notebook"),
        ("os_exit", "kernel died"),
        ("segfault", "kernel died"),
        ("total_time", "total time limit"),
    ],
)
def test_broken_or_crashing_submissions_fail_with_a_reason(graded, student, reason):
    course, outcomes, _, _, _ = graded
    o = outcomes[student]
    assert o.status == batch.FAILED and reason in o.detail, o
    with course.api().gradebook as gb:  # still on the roster, with no grade to mistake for a 0
        assert student in {s.id for s in gb.students}


def test_output_flood_is_cut(graded):
    course, outcomes, _, _, _ = graded
    assert outcomes["output_flood"].score == FULL
    text = _autograded(course, "output_flood")
    assert "output cut by the grader" in text and len(text) < 2_000_000


def _printed(course: Course, student: str, marker: str) -> str:
    """What the cell whose code contains ``marker`` printed."""
    nb = nbformat.reads(_autograded(course, student), as_version=4)
    (cell,) = [c for c in nb.cells if c.cell_type == "code" and marker in c.source]
    return "".join(o.get("text", "") for o in cell.outputs)


def test_the_kernel_sees_only_its_own_working_copy(graded):
    course, outcomes, _, _, _ = graded
    printed = _printed(course, "read_source", "np.fromfile")
    assert outcomes["read_source"].score == FULL
    assert printed.count("BLOCKED") == 5 and "READ" not in printed and "WROTE" not in printed
    assert not (course.root / "pwned.npy").exists()


def test_the_kernel_has_no_network(graded):
    course, _, connections, _, _ = graded
    assert connections == []
    assert "NO NETWORK" in _printed(course, "network", "create_connection")


def test_nothing_a_kernel_started_outlives_grading(graded):
    """Fork storms and detached processes are killed with their kernel: none wrote the gradebook
    after grading."""
    course, outcomes, _, marker, _ = graded
    assert _kernel_processes(marker) == []
    assert outcomes["honest"].score == FULL
    assert sum(v for v in cell_scores(course, A, "honest").values()) == FULL


def test_regrading_is_idempotent_and_a_failed_regrade_keeps_the_grade(graded):
    course, first, _, _, _ = graded
    again = {"honest", "wrong", "patch_allclose", "held_no_grad", "zero_bytes", "timestamp_link"}
    second = {o.student: o for o in batch.grade(course, [A], students=sorted(again), workers=2)}
    for student in again:
        assert (second[student].status, second[student].score) == (
            first[student].status,
            first[student].score,
        ), student
    # A regrade that fails keeps the earlier grade (and all a person entered), and says so.
    path = course.root / "submitted" / "wrong" / A / f"{A}.ipynb"
    path.write_text("{not json")
    (failed,) = batch.grade(course, [A], students=["wrong"])
    assert failed.status == batch.FAILED and "previous grade kept" in failed.detail, failed
    assert failed.score == first["wrong"].score
    with course.api().gradebook as gb:
        assert gb.find_submission(A, "wrong").score == first["wrong"].score
