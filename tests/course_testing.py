"""What the tests share: the repository's path, the exercise contract, scratch course copies.

(A module of its own, not conftest.py: tests/browser has a conftest of its own, and two modules
named `conftest` cannot both be imported by name.)
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

from course import release
from course.grading.coursedir import CONFIG_FILE, Course
from course.grading.draws import SECRET
from course.submission import build_submission, write_submission

REPO = Path(__file__).resolve().parents[1]

CONTRACT_DOC = REPO / "docs" / "exercise-contract.md"
TEST_SECRET = "the test suite's course secret"


def read_contract(text: str) -> dict[str, list[str]]:
    """Assignment id -> its exercises, in order, from the contract's ``## <id>`` sections and
    their ``- `name(args)`:`` items."""
    contract: dict[str, list[str]] = {}
    for section in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = section.partition("\n")
        if re.fullmatch(r"\d\d_\w+", title.strip()):
            contract[title.strip()] = re.findall(r"^- `(\w+)\(", body, flags=re.M)
    return contract


# The graded exercises fixed by docs/exercise-contract.md (a public API).
CONTRACT = read_contract(CONTRACT_DOC.read_text())


def secret_lines(assignment: str, blocks: str = "SOLUTION|HIDDEN TESTS") -> list[str]:
    """Lines of the source's solution and hidden-test blocks (of ``blocks``) that the released
    notebook does not show: a line a teaching example also shows reveals nothing."""
    text = (REPO / "source" / assignment / f"{assignment}.ipynb").read_text()
    lines = []
    for cell in json.loads(text)["cells"]:
        source = "".join(cell["source"])
        for block in re.findall(rf"### BEGIN (?:{blocks})\n(.*?)### END", source, re.S):
            lines += [line.strip() for line in block.splitlines() if len(line.strip()) > 12]
    released = (REPO / "release" / assignment / f"{assignment}.ipynb").read_text()
    return [line for line in lines if json.dumps(line)[1:-1] not in released]


@functools.cache
def distinctive_secrets() -> list[str]:
    """Lines of any source's solutions and hidden tests that no release shows (a line another
    lesson shows as an example reveals nothing) and that are long enough to say something
    (not ``return history``, which any code may say)."""
    released = [(REPO / "release" / a / f"{a}.ipynb").read_text() for a in CONTRACT]
    return [
        line
        for assignment in CONTRACT
        for line in secret_lines(assignment)
        if len(line) >= 20 and not any(json.dumps(line)[1:-1] in text for text in released)
    ]


def run_in_fresh_loop(coroutine: Coroutine):
    """``asyncio.run(coroutine)`` in a thread of its own: nbclient, run earlier in the same test
    process, leaves an event loop running in the main thread (asyncio.run then refuses)."""
    with ThreadPoolExecutor(1) as thread:
        return thread.submit(asyncio.run, coroutine).result()


def venv_env(**extra: str) -> dict[str, str]:
    """The environment for a subprocess of this venv: its bin folder first on PATH (nbgrader,
    and the `alembic` nbgrader runs when it makes a gradebook), plus ``extra``."""
    bindir = Path(sys.executable).parent
    return {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", **extra}


def student_kernel_env() -> dict[str, str]:
    """A kernel's environment as a student's in Jupyter: the widgets draw (no
    ``NBGRADER_EXECUTION``), figures are inline PNGs, `course` imports from the repository."""
    env = venv_env(
        PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        MPLBACKEND="module://matplotlib_inline.backend_inline",
    )
    env.pop("NBGRADER_EXECUTION", None)
    return env


def run_headless(nb: nbformat.NotebookNode, timeout: int, cwd: Path) -> dict[int, float]:
    """Run ``nb`` top to bottom in a fresh kernel as ``jupyter nbconvert --execute`` and papermill
    do (nbclient, a failing cell's error kept as its output), the widgets drawing: the seconds
    each code cell waited for its reply, by index. ``nb`` gets the outputs."""
    started: dict[int, float] = {}
    waited: dict[int, float] = {}

    def sent(cell, cell_index):
        started[cell_index] = time.monotonic()

    def replied(cell, cell_index, execute_reply):
        waited[cell_index] = time.monotonic() - started[cell_index]

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        allow_errors=True,
        resources={"metadata": {"path": str(cwd)}},
        on_cell_execute=sent,
        on_cell_executed=replied,
    )
    client.execute(env=student_kernel_env())
    return waited


def stalled_cells(waited: dict[int, float], timeout: int) -> list[int]:
    """The cells whose reply the client took only once their timeout ran out: nbclient's poll
    looks once more as it times out, so a reply it was never woken for is found then, and the
    cell goes on as if it had answered in time (issue 38). A cell that really runs that long
    fails with a timeout instead."""
    return [index for index, seconds in waited.items() if seconds >= timeout]


@contextmanager
def cpu_hogs(count: int) -> Iterator[None]:
    """``count`` processes that only burn CPU while the block runs: a busy machine (two on two
    cores), under which races between processes show."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def points(assignment: str, prefix: str = "", kind: str = "code") -> float:
    """The points of the graded cells of ``kind`` ("code": autograded tests, "markdown": written
    answers) whose grade id starts with ``prefix``, read from the source notebooks: totals in
    tests follow the notebooks, never a number written into a test."""
    total = 0.0
    for path in sorted((REPO / "source" / assignment).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if meta.get("grade") and cell.cell_type == kind:
                total += float(meta.get("points", 0)) if meta["grade_id"].startswith(prefix) else 0
    return total


def grade_ids(assignment: str, kind: str = "code") -> list[str]:
    """The grade ids of the assignment's graded cells of ``kind`` ("code": autograded tests),
    read from its source notebooks."""
    return [
        cell.metadata["nbgrader"]["grade_id"]
        for path in sorted((REPO / "source" / assignment).glob("*.ipynb"))
        for cell in nbformat.read(path, as_version=4).cells
        if cell.cell_type == kind and cell.metadata.get("nbgrader", {}).get("grade")
    ]


def essay_cell(assignment: str) -> tuple[str, float]:
    """The grade id and points of the assignment's first written answer (a graded markdown
    cell), read from its source notebook."""
    for cell in nbformat.read(REPO / "source" / assignment / f"{assignment}.ipynb", 4).cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "markdown" and meta.get("grade"):
            return meta["grade_id"], float(meta["points"])
    raise AssertionError(f"{assignment} has no written answer")


def with_essay(nb: nbformat.NotebookNode, assignment: str, text: str) -> nbformat.NotebookNode:
    """``nb`` (a submission of ``assignment``) with ``text`` as its written answer."""
    essay, _ = essay_cell(assignment)
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == essay:
            cell.source = text
    return nb


WORKER_UID = 65534  # nobody: a dask worker as an ordinary pod runs it
# What a worker keeps of this repository, as a worker image has it: the package and its
# environment. The rest (the instructor's course in it, the reference's records every scratch
# course shares, `copy_course`) does not exist there.
WORKER_KEEPS = ("course", ".venv", "autograd_course.egg-info")


def jailed(home: Path, *options: str) -> list[str]:
    """The command prefix that runs what follows it as an unprivileged worker
    (`tests/worker_jail.py`) with ``home`` as its working folder and the jail's ``options``."""
    jail = [sys.executable, str(REPO / "tests" / "worker_jail.py"), "--uid", str(WORKER_UID)]
    return [*jail, "--home", str(home), *options, "--"]


@contextmanager
def dask_processes(
    workers: int,
    hidden: list[Path],
    user_namespaces: bool = True,
    before: Callable[[int], Callable[[], None] | None] = lambda index: None,
) -> Iterator[tuple[str, list[subprocess.Popen]]]:
    """A dask scheduler and ``workers`` workers started as a user starts them (``dask scheduler``,
    ``dask worker``), each worker unprivileged in a mount namespace of its own where ``hidden``
    and this repository's course do not exist (`tests/worker_jail.py`), allowed to make user
    namespaces or not: the scheduler's address and the workers' processes (each leads a process
    group). ``before(index)`` gives what worker ``index`` runs first, before it execs (a
    benchmark puts it in a cgroup there)."""
    from distributed import Client

    bindir = Path(sys.executable).parent
    folder = Path(tempfile.mkdtemp(prefix="course-cluster-"))
    folder.chmod(0o755)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    log = (folder / "cluster.log").open("ab")
    started = [
        subprocess.Popen(
            [bindir / "dask", "scheduler", "--host", "127.0.0.1", "--port", str(port)]
            + ["--no-dashboard"],
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
    ]
    keep = [f"--keep={REPO / name}" for name in WORKER_KEEPS if (REPO / name).is_dir()]
    for index in range(workers):
        home = folder / f"worker{index}"
        home.mkdir()
        options = [*(f"--hide={p}" for p in hidden), *keep]
        options += [] if user_namespaces else ["--no-user-namespaces"]
        jail = jailed(home, *options)
        worker = [bindir / "dask", "worker", address, "--nthreads", "1", "--name", f"w{index}"]
        worker += ["--local-directory", str(home), "--no-dashboard", "--death-timeout", "60"]
        started.append(
            subprocess.Popen(
                [*map(str, jail), *map(str, worker)],
                stdout=log,
                stderr=log,
                start_new_session=True,
                preexec_fn=before(index),
            )
        )
    try:
        with Client(address, timeout="60s") as client:
            client.wait_for_workers(workers, timeout=120)
        yield address, started[1:]
    finally:
        for process in reversed(started):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)


def live_processes() -> Iterator[tuple[int, dict[str, str]]]:
    """Each live process's pid and the fields of its /proc status. A dead one is left out,
    whether a zombie (Z) or one its parent is reaping this instant (X): a slow reaper in a
    container shows either state long after SIGKILL."""
    # Not Path.glob: it stats each match, and a process that has just gone raises ESRCH there.
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            lines = Path(entry.path, "status").read_text().splitlines()
        except OSError:  # it has gone meanwhile
            continue
        fields = {
            key: value.strip() for key, value in (ln.split(":", 1) for ln in lines if ":" in ln)
        }
        if fields.get("State", "")[:1] not in ("Z", "X"):
            yield int(entry.name), fields


def copy_course(dest: Path, with_release: bool = False) -> Course:
    """A scratch course directory with the repo's config, sources and answer fixtures, released
    when asked."""
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(REPO / CONFIG_FILE, dest / CONFIG_FILE)
    shutil.copytree(REPO / "source", dest / "source")
    shutil.copytree(REPO / "fixtures", dest / "fixtures")
    # The reference's records (`course.grading.reference`), keyed by each source's content and
    # draw: made by the first release or grade that needs them, shared by every scratch course
    # (written atomically: two at once are safe). Only the records: the repository's own backups
    # and lock (`course.grading.gradebook`) are its own.
    shared = REPO / ".course" / "expected"
    shared.mkdir(parents=True, exist_ok=True)
    (dest / ".course").mkdir(parents=True, exist_ok=True)
    (dest / ".course" / "expected").symlink_to(shared)
    # One course secret for every scratch course: the same submission draws the same hidden
    # inputs in every test run (`course.grading.draws`), and their records are made once.
    (dest / SECRET).write_text(TEST_SECRET)
    course = Course.at(dest)
    if with_release:  # regenerated, so the scratch gradebook knows the assignments' cells
        release.release(course, [])
    return course


def cell_scores(course: Course, assignment: str, student: str) -> dict[str, float | None]:
    """The gradebook's score of every autograded (code) cell of one submission, by grade id."""
    with course.api().gradebook as gb:
        submission = gb.find_submission(assignment, student)
        return {
            g.name: g.score
            for nb in submission.notebooks
            for g in nb.grades
            if g.cell.cell_type == "code"
        }


def exercise_points(scores: dict[str, float | None], exercise: str) -> float:
    """What the test cells of ``exercise`` (grade ids ``test_<exercise>...``) scored."""
    return sum(v or 0 for k, v in scores.items() if k.startswith(f"test_{exercise}"))


def corpus(folder: str) -> dict[str, dict[str, list[Path]]]:
    """``fixtures/<folder>/<assignment>/<exercise>/*.py`` as assignment -> exercise -> files."""
    found: dict[str, dict[str, list[Path]]] = {}
    for path in sorted((REPO / "fixtures" / folder).glob("*/*/*.py")):
        found.setdefault(path.parts[-3], {}).setdefault(path.parts[-2], []).append(path)
    return found


@dataclass
class Attack:
    """One file of fixtures/attacks (its README gives the format)."""

    path: Path
    assignment: str
    header: str
    answers: dict[str, str]  # answer cell grade id -> its new source
    before: list[tuple[str, str]]  # (grade id, source of a new cell inserted before it)
    end: list[str]  # sources of new cells at the end
    files: dict[str, str]  # relative path -> content, beside the notebook
    links: dict[str, str]  # relative path -> symlink target

    @property
    def name(self) -> str:
        return self.path.stem


def read_attack(path: Path) -> Attack:
    attack = Attack(path, path.parts[-2], "", {}, [], [], {}, {})
    sections = re.split(r"^# %% ", path.read_text(), flags=re.M)
    attack.header = sections[0].strip()
    for section in sections[1:]:
        head, _, body = section.partition("\n")
        kind, _, arg = head.strip().partition(" ")
        body = body.rstrip("\n")
        if kind == "cell":
            attack.answers[arg] = body
        elif kind == "before":
            attack.before.append((arg, body))
        elif kind == "end":
            attack.end.append(body)
        elif kind == "file":
            attack.files[arg] = body + "\n"
        elif kind == "symlink":
            name, _, target = arg.partition(" -> ")
            attack.links[name.strip()] = target.strip()
        else:
            raise ValueError(f"{path}: unknown section {head!r}")
    return attack


ATTACK_HEADER = re.compile(
    r"Attack \((?P<kind>\d+(?:\+\d+)*): (?P<short>.+?)\): (?P<what>.+)", re.S
)
ATTACKS_README = REPO / "fixtures" / "attacks" / "README.md"
TABLE_TITLE = "## Submissions"


def attack_header(attack: Attack) -> tuple[str, str, str]:
    """(class, short name, what it tries) from an attack's header, ``# Attack (<class>: <short
    name>): <what it tries>`` and any further ``# `` lines, joined into one line."""
    lines = [line.removeprefix("#").strip() for line in attack.header.splitlines()]
    found = ATTACK_HEADER.fullmatch(" ".join(lines))
    if not found:
        raise ValueError(f"{attack.path}: a header '# Attack (<class>: <short name>): <what>'")
    return found["kind"], found["short"], found["what"]


def attack_table(attacks: list[Attack]) -> str:
    """The README's table of ``attacks``, one row a file, made from their headers alone (`python
    tests/redteam.py --readme` writes it)."""
    rows = ["| name | class | what it tries, and why it earns nothing |", "| --- | --- | --- |"]
    for attack in sorted(attacks, key=lambda a: (a.assignment, a.name)):
        kind, short, what = (cell.replace("|", "\\|") for cell in attack_header(attack))
        rows.append(f"| `{attack.assignment}/{attack.name}` | {kind}: {short} | {what} |")
    return "\n".join(rows) + "\n"


def readme_with_table(readme: str, attacks: list[Attack]) -> str:
    """``readme`` with everything after its table's title replaced by `attack_table`."""
    before, title, _ = readme.partition(TABLE_TITLE)
    if not title:
        raise ValueError(f"the README has no '{TABLE_TITLE}' section")
    note = (
        "Written by `python tests/redteam.py --readme` from the files' headers "
        "(tests/stories/test_corpora.py checks it)."
    )
    return f"{before}{TABLE_TITLE}\n\n{note}\n\n{attack_table(attacks)}"


def all_attacks() -> list[Attack]:
    """Every file of fixtures/attacks, read."""
    return [read_attack(p) for p in sorted((REPO / "fixtures" / "attacks").glob("*/*.py"))]


def write_attack(course: Course, student: str, attack: Attack) -> Path:
    """Submit ``attack`` as ``student``: the release notebook with its cells, files and links."""
    nb = build_submission(course, attack.assignment, attack.answers)
    for grade_id, source in attack.before:
        index = next(
            i
            for i, c in enumerate(nb.cells)
            if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id
        )
        nb.cells.insert(index, nbformat.v4.new_code_cell(source))
    nb.cells += [nbformat.v4.new_code_cell(source) for source in attack.end]
    path = write_submission(course, student, attack.assignment, nb)
    for name, content in attack.files.items():
        (path.parent / name).parent.mkdir(parents=True, exist_ok=True)
        (path.parent / name).write_text(content)
    for name, target in attack.links.items():
        link = path.parent / name
        link.unlink(missing_ok=True)
        link.symlink_to(target)
    return path


def not_graded(path: Path) -> str | None:
    """The fact a mistaken answer's header says is a teaching line (``# Not graded: <fact>``): its
    answer keeps its points, and its feedback names the fact as not graded. None: the mistake
    must cost points through the values."""
    found = re.search(r"^# Not graded: (.+)$", path.read_text(), re.M)
    return found[1].strip() if found else None


def feedback_text(course: Course, student: str) -> str:
    """What ``student`` reads in their feedback pages: every file's text, tags removed."""
    folder = course.root / "feedback" / student
    pages = "\n".join(p.read_text(errors="replace") for p in folder.rglob("*") if p.is_file())
    return html.unescape(re.sub(r"<[^>]+>", "", pages))


def decoded_ints(text: str) -> str:
    """Long runs of digits read as text (an int can carry any: ``int.from_bytes(s.encode(),
    "big")``)."""
    decoded = []
    for digits in re.findall(r"\d{30,}", text):
        number = int(digits)
        raw = number.to_bytes((number.bit_length() + 7) // 8, "big")
        decoded.append(raw.decode(errors="replace"))
    return "\n".join(decoded)


def leaked_secrets(course: Course, attack: Attack) -> list[str]:
    """The solution and hidden-test lines that ``attack``'s feedback shows (as text, or encoded
    as a long int) and the attack's own file does not (a line the student wrote themselves
    reveals nothing)."""
    text, own = feedback_text(course, attack.name), attack.path.read_text()
    text += "\n" + decoded_ints(text)
    leaked = [line for line in distinctive_secrets() if line in text and line not in own]
    return leaked + (["the gradebook's bytes"] if "SQLite format 3" in text else [])


def runs_slow_tests(request) -> bool:
    """Whether this run selected a test marked slow in the module of ``request`` (a fixture's):
    a module-scoped fixture then grades its whole class, else only the cases that the tests of
    the default run (`make test`) check."""
    return any(
        item.module is request.module and item.get_closest_marker("slow")
        for item in request.session.items
    )
