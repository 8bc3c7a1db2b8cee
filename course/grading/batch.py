"""Autograde submitted/, give every student an explicit status, write feedback and the grade CSV.

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbgrader.api import MissingEntry
from sqlalchemy.exc import SQLAlchemyError

from . import cluster, draws, gradebook, handin, reference, resume, sandbox
from .coursedir import Course, CourseError, nbgrader_reason
from .jobs import Job, JobResult, pack
from .record import RecordError, install_files, record
from .runner import run_jobs
from .warm import WarmUp, prefix_texts

GRADED, PARTIAL, FAILED, MISSING = "graded", "partial", "failed", "missing"
STATUSES = (GRADED, PARTIAL, FAILED, MISSING)

# What nbgrader's log says when a notebook could not be graded, and how we name it for instructors.
FAILURE_REASONS: list[tuple[str, str]] = [
    ("SubmissionTimeout", "timeout: the notebook ran past its total time limit"),
    ("UnresponsiveKernelError", "timeout: the kernel did not answer and could not be interrupted"),
    ("CellTimeLimit", "timeout: a cell ran past its CPU-time limit and ignored the interrupt"),
    ("Timeout waiting for IOPub", "timeout: the kernel's output stopped before the cell ended"),
    ("TimeoutError", "timeout: a cell ran past the time limit"),  # also CellTimeoutError
    ("DeadKernelError", "kernel died (crash, os._exit or out of memory)"),
    ("Kernel died", "kernel died (crash, os._exit or out of memory)"),
    ("MemoryError", "out of memory"),
    ("SchemaTooOldError", "tampered cell metadata"),
    ("SchemaTooNewError", "tampered cell metadata"),
    ("Duplicate grade id", "tampered cell metadata: duplicate grade ids"),
    ("NotJSONError", "invalid notebook: not JSON"),
    ("ValidationError", "invalid notebook: does not match the notebook format"),
]


@dataclass
class Outcome:
    """What happened to one student's submission of one assignment."""

    assignment: str
    student: str
    status: str
    detail: str = ""
    score: float | None = None  # autograded points earned
    max_score: float | None = None  # autograded points available (the sheet has nbgrader's total)
    cell_scores: dict[str, float | None] = field(default_factory=dict)  # by test cell grade id
    cell_max: dict[str, float] = field(default_factory=dict)
    grader_fault: bool = False  # failed for the grader's reasons, not the submission's


# `python -m course grade` exits with these (2 is a request it could not take).
EXIT_GRADED, EXIT_FAILED, EXIT_GRADER_FAILED = 0, 1, 3


def exit_status(outcomes: list[Outcome]) -> int:
    """0 when no submission failed; 3 when one failed for the grader's reasons; else 1."""
    if any(o.grader_fault for o in outcomes):
        return EXIT_GRADER_FAILED
    return EXIT_FAILED if any(o.status == FAILED for o in outcomes) else EXIT_GRADED


def summary(outcomes: list[Outcome]) -> str:
    """One line with the count of each status, e.g. ``graded 18, failed 2 (1 the grader's)``."""
    counts = [(s, sum(o.status == s for o in outcomes)) for s in STATUSES]
    parts = [f"{status} {n}" for status, n in counts if n]
    faults = sum(o.grader_fault for o in outcomes)
    if faults:
        parts = [p + f" ({faults} the grader's)" if p.startswith(FAILED) else p for p in parts]
    return ", ".join(parts) or "nothing to grade"


def classify_failure(log: str) -> str:
    """Name the reason nbgrader failed on a submission, from its log and traceback."""
    for needle, reason in FAILURE_REASONS:
        if needle in log:
            return reason
    reason = nbgrader_reason(log)
    return f"error: {reason[:200]}" if reason else "error: nbgrader gave no reason"


def check_submission_files(course: Course, assignment: str, student: str) -> str | None:
    """Why a submission cannot be graded as it is (a missing, unreadable or linked notebook, a
    hand-in time that is not one), or None. Nothing in the folder is followed or read past a
    bound (`course.grading.handin`)."""
    folder = course.root / "submitted" / student / assignment
    if folder.is_symlink() or folder.parent.is_symlink():
        return "invalid submission: the submission folder is a link, not a folder of its own"
    try:
        handin.check_folder(folder)
        handin.timestamp(folder)
        for released in sorted((course.root / "release" / assignment).glob("*.ipynb")):
            path = folder / released.name
            if not os.path.lexists(path):
                names = sorted(p.name for p in folder.glob("*.ipynb"))
                found = ", ".join(handin.printable(n, 60) for n in names[:5]) or "no notebook"
                found += f" and {len(names) - 5} more" if len(names) > 5 else ""
                return (
                    f"missing notebook: {released.name} is not in the submission (found: {found})"
                )
            data = handin.read_bytes(path, handin.NOTEBOOK_LIMIT)
            if problem := _notebook_problem(released.name, data):
                return problem
    except handin.HandInError as error:
        return str(error)
    return None


def _notebook_problem(name: str, data: bytes) -> str | None:
    """Why ``data`` is not a notebook nbgrader can read, in plain words, or None."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return f"invalid notebook: {name} is not UTF-8 text"
    try:
        nbformat.reads(text, as_version=4)
    except nbformat.reader.NotJSONError:
        try:
            json.loads(text)
        except json.JSONDecodeError as error:
            return f"invalid notebook: {name} is not valid JSON ({error})"
        return f"invalid notebook: {name} is not valid JSON"
    except (nbformat.ValidationError, KeyError, AttributeError, TypeError) as error:
        first = handin.printable(str(error).splitlines()[0], 120)
        return f"invalid notebook: {name} is not a valid notebook ({first})"
    return None


def _sources(course: Course, assignment: str) -> list[Path]:
    return sorted((course.root / "source" / assignment).glob("*.ipynb"))


def _reference(source: Path, make) -> None:
    """Run ``make()``, which runs the reference solutions of ``source``: a failure is the
    course's to fix (`CourseError`), never a student's."""
    try:
        make()
    except reference.ReferenceError as error:
        raise CourseError(f"{error}: fix the source notebook") from None
    except Exception as error:  # the source notebook itself does not run
        lines = str(error).strip().splitlines()
        raise CourseError(
            f"{source} does not run with its reference solutions ({type(error).__name__}: "
            f"{lines[-1][:300] if lines else ''}): fix it"
        ) from None


def check_references(course: Course, assignments: list[str], workers: int = 2) -> dict[Path, Path]:
    """Make (or find, made before) each source notebook's prefix and the reference's records of
    the instructor's own inputs (`course.grading.reference.prefix`), ``workers`` notebooks at a
    time: source notebook -> its prefix file, for those with one. Raise `CourseError` if a
    reference fails its own tests or its source notebook does not run."""
    found: dict[Path, Path] = {}

    def one(source: Path) -> None:
        def make() -> None:
            made = reference.prefix(source, reference.cache_dir(course.root, source.parent.name))
            if made is not None:
                found[source] = made

        _reference(source, make)

    sources = [path for a in assignments for path in _sources(course, a)]
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for done in [pool.submit(one, source) for source in sources]:
            done.result()
    return found


def make_references(course: Course, wanted: dict[str, set[int]], workers: int) -> None:
    """The reference's records for each assignment's ``wanted`` draws
    (`course.grading.reference`): one kernel per notebook and chunk of draws not made before,
    ``workers`` at a time."""
    tasks = []
    for assignment, drawn in sorted(wanted.items()):
        cache = reference.cache_dir(course.root, assignment)
        for source in _sources(course, assignment):
            for chunk in reference.missing_chunks(source, cache, drawn):
                tasks.append((source, cache, chunk))
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        running = [
            pool.submit(_reference, s, lambda s=s, c=c, d=d: reference.records(s, c, d))
            for s, c, d in tasks
        ]
        for done in running:
            done.result()


def _scores(api, assignment: str, student: str) -> Outcome:
    with api.gradebook as gb:
        submission = gb.find_submission(assignment, student)
        cell_scores: dict[str, float | None] = {}
        cell_max: dict[str, float] = {}
        ungraded: list[str] = []
        for notebook in submission.notebooks:
            for grade in notebook.grades:
                if grade.cell.cell_type != "code":  # written answers: graded by hand
                    continue
                cell_scores[grade.name] = grade.auto_score
                cell_max[grade.name] = grade.max_score
                if grade.auto_score is None and grade.manual_score is None:
                    ungraded.append(grade.name)
        score, max_score = submission.code_score, submission.max_code_score
    status, detail = (PARTIAL, f"not graded: {', '.join(ungraded)}") if ungraded else (GRADED, "")
    return Outcome(assignment, student, status, detail, score, max_score, cell_scores, cell_max)


def _record(course: Course, api, result: JobResult) -> Outcome:
    """Write a finished job's grades into the real gradebook and its files into the course."""
    problem = None if result.ok else result.failure or classify_failure(result.log)
    grader_fault = result.failure is not None
    if problem is None:
        try:
            record(course, api, result)
        except handin.HandInError as error:  # changed in submitted/ since it was checked
            problem = str(error)
        except (RecordError, OSError, SQLAlchemyError, MissingEntry) as error:
            # the submission ran: recording it is the grader's part (a gradebook that another
            # program holds locked, a full disk)
            grader_fault = True
            problem = f"error: the graded notebook could not be recorded: {error}"[:300]
    if problem is not None:
        outcome = _failed(api, result.assignment, result.student, problem)
        outcome.grader_fault = grader_fault
        return outcome
    outcome = _scores(api, result.assignment, result.student)
    feedback = course.root / "feedback" / result.student / result.assignment
    if result.feedback is None:
        shutil.rmtree(feedback, ignore_errors=True)
        outcome.detail = "; ".join(filter(None, [outcome.detail, "feedback could not be written"]))
    else:
        install_files(result.feedback, feedback)
    return outcome


def _failed(api, assignment: str, student: str, problem: str) -> Outcome:
    """A submission that could not be graded now. Nothing in the gradebook is touched: an earlier
    grade, with everything a person entered for it, stays, and the outcome shows it."""
    with api.gradebook as gb:
        try:
            gb.find_submission(assignment, student)
        except MissingEntry:  # never graded: there is no score to show
            return Outcome(assignment, student, FAILED, problem)
    kept = _scores(api, assignment, student)
    kept.status, kept.detail = FAILED, f"{problem}; previous grade kept"
    return kept


def grade(
    course: Course,
    assignments: list[str],
    students: Iterable[str] | None = None,
    on_outcome: Callable[[Outcome], None] | None = None,
    on_start: Callable[[int], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    workers: int = 1,
    warm: bool = True,
    executor: Executor | None = None,
    client=None,
    allow_unsandboxed: bool = False,
    on_notice: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Grade every student on the roster (gradebook ∪ submitted/) for each assignment.

    Submissions are graded as independent jobs that carry their data (`course.grading.jobs`),
    ``workers`` at a time in a local pool (`course.grading.runner`), or on ``executor`` (any
    ``concurrent.futures.Executor``), or on the workers of a dask ``client``
    (`course.grading.cluster`: each worker gets zygotes of its own); only this process writes
    the gradebook. Kernels are forked from warm zygotes unless ``warm`` is False. Where
    kernels would get no sandbox (here, or on a dask worker) nothing is graded unless
    ``allow_unsandboxed``; ``on_notice`` hears, once, what the sandbox enforces.
    ``on_start(total)`` is called once the number of submissions is known, ``on_outcome`` after
    each one. Raises `CourseError` before touching anything when an assignment's source no
    longer matches its graded cells.
    """
    students_asked = students
    chosen = course.check_assignments(assignments)
    for assignment in chosen:  # before anything is touched
        course.check_released(assignment)
    notice = on_notice or (lambda line: None)
    if client is None and (reason := sandbox.unavailable()) and not allow_unsandboxed:
        raise CourseError(
            f"kernels cannot be sandboxed here ({reason}), so student code could read the "
            "course: grade where user namespaces are allowed (or as root), or pass "
            "--allow-unsandboxed to grade here anyway (a disposable container or VM)"
        )
    phase = on_phase or (lambda doing: None)
    phase("checking the reference solutions' records")
    prefixes = check_references(course, chosen, workers)
    api = course.api()
    if students is None:
        with api.gradebook as gb:
            students = {s.id for s in gb.students}
        for assignment in chosen:
            students |= set(course.submitted_students(assignment))
    roster = sorted(set(students))
    if on_start:
        on_start(len(chosen) * len(roster))

    def done(outcome: Outcome) -> None:
        outcomes[(outcome.assignment, outcome.student)] = outcome
        if on_outcome:
            on_outcome(outcome)

    outcomes: dict[tuple[str, str], Outcome] = {}
    # Zygotes only for what someone on the roster handed in (a term's later assignments may have
    # no submission yet), and first: they take seconds to start, while the submissions are
    # checked and the jobs' gradebook is made (a kernel waits for its notebook's zygote).
    handed_in = {a for a in chosen if set(roster) & set(course.submitted_students(a))}
    zygotes = prefix_texts(
        {s: p for s, p in prefixes.items() if warm and s.parent.name in handed_in}
    )
    with contextlib.ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="course-grade-")))
        if client is not None:
            notice(cluster.prepare(client, zygotes, allow_unsandboxed))
            stack.callback(cluster.release, client)
            executor = client.get_executor(pure=False)  # a job run again is run, not recalled
        else:
            notice(f"sandbox: {sandbox.protections()}")
            if executor is None:  # another executor's processes find no zygote: they start cold
                stack.enter_context(contextlib.closing(WarmUp(zygotes, workdir / "warm")))
        jobs = []
        # Student by student, each assignment in turn: every notebook's warm process is used
        # from the start.
        for student in roster:
            for assignment in chosen:
                if not (course.root / "submitted" / student / assignment).is_dir():
                    done(Outcome(assignment, student, MISSING, "no submission"))
                elif problem := check_submission_files(course, assignment, student):
                    done(_failed(api, assignment, student, problem))
                else:
                    draw = draws.hand_in_draw(course.root, assignment, student)
                    jobs.append(Job(assignment, student, draw, warm))
        with api.gradebook as gb:  # every student on the roster exists before anything is graded
            for student in roster:
                gb.update_or_create_student(student)
        class_free = gradebook.class_free(course, workdir)
        selection = list(students_asked) if students_asked is not None else None
        kept, earlier = set(), resume.recorded(course, chosen, selection)
        for job in [j for j in jobs if (j.assignment, j.student) in earlier]:
            try:  # an interrupted run of this command recorded it
                done(_scores(api, job.assignment, job.student))
            except MissingEntry:  # not in this gradebook (restored since): grade it
                continue
            jobs.remove(job)
            kept.add((job.assignment, job.student))
        phase("running the reference solutions on each submission's hidden inputs")
        wanted: dict[str, set[int]] = {}
        for job in jobs:
            wanted.setdefault(job.assignment, set()).add(job.draw)
        make_references(course, wanted, workers)
        phase("grading; kernels wait for their notebook's warm process" if zygotes else "grading")
        recorded = set(kept)

        def packed(job: Job):
            own = gradebook.for_student(course, class_free, job.student, job.assignment)
            return pack(course, job, own)

        local_zygotes = workdir / "warm" if executor is None and zygotes else None
        try:
            with contextlib.closing(
                run_jobs(jobs, workers, executor, pack=packed, zygotes=local_zygotes)
            ) as results:
                for result in results:
                    with _interrupt_deferred():  # never half-recorded
                        done(_record(course, api, result))
                        recorded.add((result.assignment, result.student))
        except KeyboardInterrupt:
            resume.interrupted(course, chosen, selection, recorded)
            raise Interrupted(len(recorded), len(jobs) + len(kept)) from None
    resume.finished(course)
    return [outcomes[(a, s)] for a in chosen for s in roster]


class Interrupted(Exception):
    """Grading was stopped (Ctrl-C): what was recorded stays, the rest is unchanged."""

    def __init__(self, recorded: int, total: int):
        self.recorded, self.total = recorded, total
        super().__init__(
            f"interrupted: {recorded} of {total} recorded, the rest unchanged; run the same "
            "command again"
        )


@contextlib.contextmanager
def _interrupt_deferred() -> Iterator[None]:
    """Hold a Ctrl-C, or a request to stop (`resume.STOP_SIGNALS`), until the block has run,
    then raise it: recording one submission must not stop halfway (an autograded/ folder
    deleted, a grade half-written)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signals reach only the main thread
        return
    caught: list[int] = []
    previous = {
        signum: signal.signal(signum, lambda signum, frame: caught.append(signum))
        for signum in (signal.SIGINT, *resume.STOP_SIGNALS)
    }
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if caught:
        raise KeyboardInterrupt
