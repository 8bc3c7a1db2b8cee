"""Many terms in any order: a Hypothesis state machine draws sequences of instructor and student
steps on a class of two students and one assignment (submit on time or late, resubmit (also
after the feedback was released, and graded at once), hand in by hand, collect with and without
--update, grade everyone or one student, enter or change a manual score and comment, feedback,
export, a points change mid-term, a typo'd assignment id) and after
every step checks what an instructor would:

- the score of the page the student fetches = the gradebook's = grades.csv's = canvas.csv's =
  the Moodle file's, or the sheet names the released page as out of date (also when it is the
  page of an earlier submission; never after `feedback`);
- the late penalty follows the README's rule, on the score as it is now;
- nothing a person entered is lost;
- there is no row, column or file for anything not in the gradebook, an assignment nobody has
  (the typo'd id) is `unreleased` and has no column or file, and work waiting in the exchange
  is named with the command that collects it.

The numbers are the model's own (due date, submission times, the source's points) or read from
the gradebook cell by cell, never from the code under test."""

from __future__ import annotations

import contextlib
import csv
import datetime
import io
import math
import os
import re
import secrets
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from nbgrader.utils import notebook_hash

from course import cli
from course.grading import late
from course.grading.coursedir import Course
from course.submission import answer_file, build_submission, reference_answers
from course_testing import copy_course, essay_cell

A = "01_requires_grad"
TYPO = "01_requires_gard"
STUDENTS = ("s1", "s2")
WRONG = ("make_trainable", "wrong_int_dtype")
DUE = datetime.datetime(2031, 1, 15, 12, 0, tzinfo=datetime.timezone.utc)
# When a submission is made, relative to the due date: on time, or 38 s, 3 h, 1 d 2 h late.
OFFSETS = [-3600, 38, 3 * 3600, 26 * 3600]
RUNS: list[list[str]] = []  # the steps of every sequence run, for the count in the report


def _stamp(when: datetime.datetime) -> str:
    return f"{when:%Y-%m-%d %H:%M:%S.%f} UTC"  # nbgrader submit's format


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Course:
    """A released course with A due at DUE, copied for every sequence."""
    course = copy_course(tmp_path_factory.mktemp("steps") / "base")
    assert cli.main(["--course", str(course.root), "release", A]) == 0
    with course.api().gradebook as gb:
        gb.update_or_create_assignment(A, duedate=DUE.replace(tzinfo=None))
    for student in STUDENTS:
        with course.api().gradebook as gb:
            gb.update_or_create_student(student)
    return course


class Term(RuleBasedStateMachine):
    def __init__(self, base: Course):
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="course-steps-"))
        shutil.copytree(base.root, self.tmp / "course", symlinks=True)
        self.course = Course.at(self.tmp / "course")
        self.root = self.course.root
        self.source = self.root / "source" / A / f"{A}.ipynb"
        self.essay, self.essay_points = essay_cell(A)
        self.answers = {
            False: reference_answers(self.course, A),
            True: {WRONG[0]: answer_file(self.course, A, *WRONG)},
        }
        self.inbound: dict[str, tuple[datetime.datetime, str]] = {}  # latest submit
        self.collected: dict[str, tuple[datetime.datetime | None, str | None]] = {}
        self.graded: dict[str, tuple[datetime.datetime | None, str | None]] = {}
        # by student: the secret of the newest submission whose feedback page is released
        self.released: dict[str, str] = {}
        self.entered: dict[str, tuple[float, str]] = {}  # manual score and comment, by student
        self.typo = False
        self.fresh = False  # the grade files were written since the gradebook last changed
        self.after_feedback = False
        self.steps: list[str] = []
        RUNS.append(self.steps)

    def teardown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def command(self, *args: str) -> tuple[int, str]:
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(["--course", str(self.root), *args])
        self.steps.append(" ".join(args) + f" -> {code}")
        return code, out.getvalue() + err.getvalue()

    def notebook(self, wrong: bool):
        return build_submission(self.course, A, self.answers[wrong])

    # -- students

    @rule(student=st.sampled_from(STUDENTS), offset=st.sampled_from(OFFSETS), wrong=st.booleans())
    def submit(self, student, offset, wrong):
        """What `nbgrader submit` leaves in the exchange, at a time the model chooses."""
        if student in self.collected and self.collected[student][0] is None:
            return  # handed in by hand: this student does not use the exchange
        when = DUE + datetime.timedelta(seconds=offset)
        earlier = [t for t, _ in [self.inbound.get(student, (None, ""))] if t is not None]
        if earlier and when <= earlier[0]:
            when = earlier[0] + datetime.timedelta(seconds=1)
        secret = secrets.token_hex(8)
        folder = self.root / "exchange" / "autograd-course" / "inbound"
        folder /= f"{student}+{A}+{_stamp(when)}+{secrets.token_hex(4)}"
        folder.mkdir(parents=True)
        nbformat.write(self.notebook(wrong), folder / f"{A}.ipynb")
        (folder / "timestamp.txt").write_text(_stamp(when))
        (folder / "submission_secret.txt").write_text(secret)
        self.inbound[student] = (when, secret)
        self.fresh = False  # the sheet was written before: it cannot know
        self.steps.append(f"{student} submits at {offset:+d} s{' (wrong)' if wrong else ''}")

    def by_hand(self) -> list[str]:
        """Students who may hand in by hand: none of their work went through the exchange."""
        return [s for s in STUDENTS if s not in self.inbound]

    @precondition(lambda self: self.by_hand())
    @rule(data=st.data(), wrong=st.booleans())
    def hand_in(self, data, wrong):
        self.hand_in_as(data.draw(st.sampled_from(self.by_hand())), wrong)

    def hand_in_as(self, student, wrong):
        """The README's route for work from Binder or a student's machine: the notebook copied
        into submitted/ by hand, without nbgrader's timestamp.txt or secret."""
        folder = self.root / "submitted" / student / A
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(self.notebook(wrong), folder / f"{A}.ipynb")
        self.collected[student] = (None, None)
        self.fresh = False
        self.steps.append(f"{student} hands in by hand{' (wrong)' if wrong else ''}")

    # -- the instructor

    def through_the_exchange(self) -> list[str]:
        """Students whose graded work came through the exchange."""
        return sorted(s for s, (_, secret) in self.graded.items() if secret)

    @precondition(lambda self: self.through_the_exchange())
    @rule(data=st.data(), offset=st.sampled_from(OFFSETS), wrong=st.booleans())
    def resubmission(self, data, offset, wrong):
        """A student submits again, and the instructor takes and grades the new version
        (`nbgrader collect --update`, `grade --student`): a page released before falls behind."""
        self.resubmit(data.draw(st.sampled_from(self.through_the_exchange())), offset, wrong)

    def resubmit(self, student, offset, wrong):
        self.submit(student, offset, wrong)
        self.collect(update=True)
        self.grade(student)

    @rule(update=st.booleans())
    def collect(self, update):
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            self.course.api().collect(A, update=update)
        for student, latest in self.inbound.items():
            if student not in self.collected or (update and self.collected[student] != latest):
                self.collected[student] = latest
        self.fresh = False
        self.steps.append(f"collect{' --update' if update else ''}")

    @initialize(ways=st.tuples(*[st.sampled_from([*OFFSETS, None])] * len(STUDENTS)))
    def class_hands_in(self, ways):
        """The class hands in before anything else happens, each student through the exchange
        (at an offset from the due date) or by hand (None); later steps may resubmit."""
        for student, offset in zip(STUDENTS, ways):
            if offset is None:
                self.hand_in_as(student, wrong=False)
            else:
                self.submit(student, offset, wrong=student == STUDENTS[-1])
        self.collect(update=False)

    @rule()
    def grade_all(self):
        self.grade(None)

    @rule(student=st.sampled_from(STUDENTS))
    def grade_one(self, student):
        self.grade(student)

    def grade(self, student):
        code, out = self.command("grade", A, *(["--student", student] if student else []))
        assert code == 0, out
        for s in STUDENTS if student is None else [student]:
            if s in self.collected:  # a new version's page is not released; the old one stays
                self.graded[s] = self.collected[s]
        self.fresh, self.after_feedback = True, False

    @precondition(lambda self: self.graded)
    @rule(
        data=st.data(),
        half_points=st.integers(min_value=0, max_value=8),
        comment=st.text("abc .", min_size=1, max_size=12),
    )
    def grade_by_hand(self, data, half_points, comment):
        """What formgrader writes when a person grades the written answer."""
        student = data.draw(st.sampled_from(sorted(self.graded)))
        score = min(half_points / 2, self.essay_points)
        with self.course.api().gradebook as gb:
            grade = gb.find_grade(self.essay, A, A, student)
            grade.manual_score = score
            gb.find_comment(self.essay, A, A, student).manual_comment = comment
            gb.db.commit()
        self.entered[student] = (score, comment)
        self.fresh = self.after_feedback = False
        self.steps.append(f"{student}'s written answer graded {score:g} by hand")

    @rule()
    def feedback(self):
        code, out = self.command("feedback", A)
        assert code == 0, out
        self.released |= {s: secret for s, (_, secret) in self.graded.items() if secret}
        self.fresh = self.after_feedback = True

    @rule()
    def export(self):
        code, out = self.command("export")
        assert code == 0, out
        self.fresh = True

    @rule()
    def points_change(self):
        """A mid-term change to the written answer's points in source/: grading refuses it
        (nbgrader cannot change the cells of an assignment released to this gradebook) before it
        touches anything, and the instructor undoes it."""
        before = self.source.read_text()
        nb = nbformat.read(self.source, as_version=4)
        for cell in nb.cells:
            if cell.metadata.get("nbgrader", {}).get("grade_id") == self.essay:
                cell.metadata["nbgrader"]["points"] = self.essay_points + 1
        nbformat.write(nb, self.source)
        with self.course.api().gradebook as gb:
            graded = bool(gb.find_assignment(A).num_submissions)
        self.steps.append(f"{self.essay} worth {self.essay_points + 1:g} in source/")
        code, out = self.command("grade", A)
        self.source.write_text(before)
        assert code == 2 and "Nothing was graded" in out, out
        assert ("undo the change" if graded else f"course release {A}") in out, out

    @rule(add=st.booleans())
    def typo(self, add):
        """`nbgrader db assignment add` with a typo'd id, or its removal; grading it is refused."""
        with self.course.api().gradebook as gb:
            if add and not self.typo:
                gb.add_assignment(TYPO, duedate=DUE.replace(tzinfo=None))
                self.steps.append(f"nbgrader db assignment add {TYPO}")
            elif not add and self.typo:
                gb.remove_assignment(TYPO)
                self.steps.append(f"nbgrader db assignment remove {TYPO}")
        self.typo = add
        self.fresh = False
        code, out = self.command("grade", TYPO)
        assert code == 2 and f"unknown assignment {TYPO}" in out, out

    # -- what an instructor checks

    def sheet(self) -> dict[tuple[str, str], dict]:
        with (self.root / "grades" / "grades.csv").open() as handle:
            return {(r["assignment"], r["student_id"]): r for r in csv.DictReader(handle)}

    @invariant()
    def nothing_entered_is_lost(self):
        with self.course.api().gradebook as gb:
            for student, (score, comment) in self.entered.items():
                assert gb.find_grade(self.essay, A, A, student).manual_score == score
                assert gb.find_comment(self.essay, A, A, student).manual_comment == comment

    @invariant()
    def one_truth_for_every_grade(self):
        if not self.fresh:
            return
        rows = self.sheet()
        with self.course.api().gradebook as gb:
            pairs = {(a.name, s.id) for a in gb.assignments for s in gb.students}
            assert set(rows) == pairs, "a row for everything in the gradebook, nothing else"
            truth = {}
            for (assignment, student), row in rows.items():
                try:
                    sub = gb.find_submission(assignment, student)
                except Exception:  # A is handed in from the start; a typo'd id by nobody
                    status = "missing" if assignment == A else "unreleased"
                    assert row["score"] == "" and row["status"] == status, row
                    continue
                raw = sum(g.score for nb in sub.notebooks for g in nb.grades)
                when = self.graded.get(student, (None, None))[0]
                days = math.ceil(max(0.0, (when - DUE).total_seconds()) / 86400) if when else 0
                penalty = min(raw, raw * days * late.PerDayPenalty().percent_per_day / 100)
                assert float(row["late_penalty"]) == pytest.approx(penalty), (row, raw, days)
                assert float(row["score"]) == pytest.approx(raw - penalty), row
                truth[(assignment, student)] = float(row["score"])
                if when is None:
                    assert sub.timestamp is None and "judged on time" in row["notes"], row
                else:
                    assert sub.timestamp.replace(tzinfo=datetime.timezone.utc) == when
        with (self.root / "grades" / "canvas.csv").open() as handle:
            canvas = list(csv.reader(handle))
        assert canvas[0][5:] == [A], "a column for what students have, none for a typo'd id"
        for line in canvas[2:]:
            for assignment, mark in zip(canvas[0][5:], line[5:]):
                assert mark == rows[(assignment, line[2])]["score"]
        moodle = self.root / "grades" / "moodle"
        assert [p.stem for p in moodle.glob("*.csv")] == [A]
        with (moodle / f"{A}.csv").open() as handle:
            for student, mark in list(csv.reader(handle))[1:]:
                assert mark == rows[(A, student)]["score"]
        for student in STUDENTS:
            row = rows[(A, student)]
            waiting = self.inbound.get(student)
            if waiting and self.collected.get(student) != waiting:
                command = "collect" if student not in self.collected else "collect --update"
                assert f"`nbgrader {command} {A}`" in row["notes"], row
            else:
                assert "collect" not in row["notes"], row
            if student in self.released:  # what the student fetches
                secret = self.released[student]
                shown = self.released_page(secret)
                behind = secret != self.graded[student][1] or shown != pytest.approx(
                    truth[(A, student)], abs=0.01
                )
                assert ("out of date" in row["notes"]) == behind, (row, shown)
                assert not (behind and self.after_feedback), (row, shown)

    def released_page(self, secret: str) -> float:
        """The score on the released page of the submission with ``secret``."""
        name = f"{notebook_hash(secret=secret, notebook_id=A)}.html"
        page = (self.root / "exchange" / "autograd-course" / "feedback" / name).read_text()
        return float(re.search(r"\(Score: ([\d.]+) / [\d.]+\)</h4>", page)[1])


def test_work_handed_in_by_hand_reaches_its_feedback(base, tmp_path):
    """The README's route for Binder or a student's own machine: the notebook copied into
    submitted/ by hand. `feedback` makes the page and says where it is (the exchange cannot
    deliver it: there is no submission secret); the sheet says how lateness was judged."""
    root = tmp_path / "course"
    shutil.copytree(base.root, root, symlinks=True)
    course = Course.at(root)
    folder = root / "submitted" / "s1" / A
    folder.mkdir(parents=True)
    nbformat.write(build_submission(course, A, reference_answers(course, A)), folder / f"{A}.ipynb")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["--course", str(root), "grade", A, "--student", "s1"]) == 0
        assert cli.main(["--course", str(root), "feedback", A]) == 0, out.getvalue()
    assert f"s1's {A} was handed in by hand: give them {root / 'feedback' / 's1' / A}/" in (
        out.getvalue()
    )
    page = (root / "feedback" / "s1" / A / f"{A}.html").read_text()
    with (root / "grades" / "grades.csv").open() as handle:
        row = next(r for r in csv.DictReader(handle) if r["student_id"] == "s1")
    shown = re.search(r"\(Score: ([\d.]+) / [\d.]+\)</h4>", page)[1]
    assert float(shown) == float(row["score"]) > 0 and row["late_penalty"] == "0"
    assert "judged on time" in row["notes"] and "timestamp.txt" in row["notes"]


def test_a_resubmission_after_feedback_is_named_until_released_again(base):
    """The walk that once left a student's released page behind unannounced: s2's wrong answer
    is graded and its feedback released; s2 submits again, the instructor collects with
    --update and grades s2: the sheet names the released page (of the earlier submission) as out
    of date, until `feedback` releases the new one (the machine's checks after each step)."""
    term = Term(base)
    try:
        term.class_hands_in((OFFSETS[0], OFFSETS[0]))  # the last student's answer is wrong
        term.grade_all()
        term.feedback()
        term.one_truth_for_every_grade()
        term.resubmit(STUDENTS[-1], OFFSETS[0], wrong=False)
        term.one_truth_for_every_grade()
        row = term.sheet()[(A, STUDENTS[-1])]
        assert "released feedback is of an earlier submission" in row["notes"], row
        term.feedback()
        term.one_truth_for_every_grade()
        term.nothing_entered_is_lost()
    finally:
        term.teardown()


# Sequences and their length: each grade runs real kernels, so a few sequences of a few steps:
# two in the default run, EXAMPLES with the slow tests (COURSE_STEPS_EXAMPLES raises the number
# for a longer search).
EXAMPLES = int(os.environ.get("COURSE_STEPS_EXAMPLES", "6"))


@pytest.mark.parametrize(
    "examples",
    [
        pytest.param(2, id="2 sequences"),
        pytest.param(EXAMPLES, id=f"{EXAMPLES} sequences", marks=pytest.mark.slow),
    ],
)
def test_any_order_of_steps_keeps_one_truth(base, examples):
    RUNS.clear()
    run_state_machine_as_test(
        lambda: Term(base),
        settings=settings(
            max_examples=examples,
            stateful_step_count=8,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        ),
    )
    print(f"{len(RUNS)} sequences of steps:")
    for steps in RUNS:
        print("  " + "; ".join(steps))
