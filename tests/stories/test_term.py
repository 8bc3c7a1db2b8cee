"""An instructor's whole term, through nbgrader's exchange and our commands, as the README tells
it: release, fetch, submit and collect for three students (one writes a written answer, one hands
in late, one submits again after his feedback was released), grade, grade by hand, regrade, a
failed regrade, a mid-term change to the source, feedback and export. Nothing a person entered is
ever lost, our numbers are nbgrader's, and a released page that falls behind is named."""

from __future__ import annotations

import csv
import datetime
import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from course.grading.feedback import WRAP_CSS
from course.submission import answer_file, build_submission, reference_answers
from course_testing import copy_course, essay_cell, points, venv_env, with_essay

A = "01_requires_grad"
NOTEBOOK = A
WRONG = ("make_trainable", "wrong_int_dtype")
DUE = datetime.datetime(2031, 1, 15, 12, 0, tzinfo=datetime.timezone.utc)
LATE_BY = datetime.timedelta(days=1, hours=2)  # two started days
MANUAL, EXTRA, COMMENT = 1.5, 0.5, "Good: the leaves are the parameters. Say why .grad matters."


def _env(home: Path | None = None) -> dict:
    env = venv_env()
    env.pop("NBGRADER_EXECUTION", None)
    return {**env, "HOME": str(home)} if home else env


def run(*args, cwd: Path, home: Path | None = None, code: int | None = 0):
    """``python -m <args>`` in ``cwd``; fails unless it exits with ``code`` (None: any)."""
    done = subprocess.run(
        [sys.executable, "-m", *args],
        cwd=cwd,
        env=_env(home),
        capture_output=True,
        text=True,
        timeout=900,
    )
    if code is not None:
        assert done.returncode == code, (
            f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
    return done


def sheet(course) -> dict[str, dict]:
    with (course.root / "grades" / "grades.csv").open() as handle:
        return {r["student_id"]: r for r in csv.DictReader(handle) if r["assignment"] == A}


def released_page(term, student: str) -> float:
    """The score on the feedback page the student fetches (nbgrader fetch_feedback)."""
    home = term.tmp / student
    run("nbgrader", "fetch_feedback", A, "--student", student, *term.student_options(student),
        cwd=home, home=home)  # fmt: skip
    pages = sorted((home / A / "feedback").glob(f"*/{NOTEBOOK}.html"))
    found = re.search(r"\(Score: ([\d.]+) / [\d.]+\)</h4>", pages[-1].read_text())
    return float(found[1])


class Term:
    """The course, its exchange and the students' homes."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        self.course = copy_course(tmp / "course")
        self.root = self.course.root
        self.exchange = self.root / "exchange"

    def student_options(self, student: str) -> list[str]:
        return [
            "--course",
            "autograd-course",
            f"--Exchange.root={self.exchange}",
            f"--Exchange.cache={self.tmp / student / '.cache'}",
        ]

    def hand_in(self, student: str, answers: dict[str, str], essay: str | None = None) -> None:
        home = self.tmp / student
        home.mkdir(exist_ok=True)
        fetched = home / A / f"{NOTEBOOK}.ipynb"
        if not fetched.exists():
            run(
                "nbgrader",
                "fetch_assignment",
                A,
                *self.student_options(student),
                cwd=home,
                home=home,
            )
        nb = build_submission(self.course, A, answers)
        nbformat.write(with_essay(nb, A, essay) if essay else nb, fetched)
        run("nbgrader", "submit", A, "--student", student, *self.student_options(student),
            cwd=home, home=home)  # fmt: skip

    @property
    def essay_id(self) -> str:
        return essay_cell(A)[0]


@pytest.fixture(scope="module")
def term(tmp_path_factory):
    return Term(tmp_path_factory.mktemp("term"))


def test_the_whole_term(term):
    course, root = term.course, term.root
    code_points = points(A)
    total = code_points + points(A, kind="markdown")
    refs = reference_answers(course, A)

    # Release, with a due date in the gradebook.
    run("course", "release", A, cwd=root)
    run("nbgrader", "db", "assignment", "add", A, f"--duedate={DUE:%Y-%m-%d %H:%M:%S} UTC",
        cwd=root)  # fmt: skip
    run("nbgrader", "release_assignment", A, cwd=root)

    # Three students hand in; cara late, bob with a mistake.
    wrong = {WRONG[0]: answer_file(course, A, *WRONG)}
    term.hand_in("alice", refs, essay="The leaves are the model's parameters.")
    term.hand_in("bob", {**refs, **wrong})
    term.hand_in("cara", refs)
    run("nbgrader", "collect", A, cwd=root)
    stamp = root / "submitted" / "cara" / A / "timestamp.txt"
    stamp.write_text(f"{DUE + LATE_BY:%Y-%m-%d %H:%M:%S.%f} UTC")

    # Bad requests change nothing.
    assert "unknown assignment" in run("course", "grade", "01_require", cwd=root, code=2).stderr
    assert (
        "did you mean bob?"
        in run("course", "grade", A, "--student", "bbo", cwd=root, code=2).stderr
    )

    # Grade: our numbers are nbgrader's, the written answer waits for a grader.
    run("course", "grade", A, cwd=root)
    rows = sheet(course)
    assert (
        float(rows["alice"]["score"]) == code_points and float(rows["alice"]["max_score"]) == total
    )
    assert rows["alice"]["to_grade"].endswith(term.essay_id)
    assert float(rows["bob"]["score"]) < code_points
    assert rows["cara"]["late"] == "1d 2h 00m"
    assert float(rows["cara"]["late_penalty"]) == pytest.approx(0.2 * code_points)

    # The instructor grades the written answer by hand, with a comment and extra credit.
    with course.api().gradebook as gb:
        grade = gb.find_grade(term.essay_id, NOTEBOOK, A, "alice")
        grade.manual_score, grade.extra_credit = MANUAL, EXTRA
        gb.find_comment(term.essay_id, NOTEBOOK, A, "alice").manual_comment = COMMENT
        gb.db.commit()

    def manual_work_is_there():
        with course.api().gradebook as gb:
            grade = gb.find_grade(term.essay_id, NOTEBOOK, A, "alice")
            assert (grade.manual_score, grade.extra_credit) == (MANUAL, EXTRA)
            assert gb.find_comment(term.essay_id, NOTEBOOK, A, "alice").manual_comment == COMMENT
            assert not grade.needs_manual_grade, "graded by hand: nothing left to grade"

    run("course", "export", cwd=root)
    rows = sheet(course)
    assert (
        float(rows["alice"]["manual_score"]) == MANUAL + EXTRA and rows["alice"]["to_grade"] == ""
    )
    assert float(rows["alice"]["score"]) == code_points + MANUAL + EXTRA

    # A regrade keeps it.
    run("course", "grade", A, cwd=root)
    manual_work_is_there()
    assert float(sheet(course)["alice"]["score"]) == code_points + MANUAL + EXTRA

    # A regrade that fails keeps the last good grade and says so.
    submitted = root / "submitted" / "alice" / A / f"{NOTEBOOK}.ipynb"
    good = submitted.read_text()
    submitted.write_text(good[: len(good) // 2])
    failed = run("course", "grade", A, "--student", "alice", cwd=root, code=1)
    assert "previous grade kept" in failed.stdout
    rows = sheet(course)
    assert rows["alice"]["status"] == "failed" and "previous grade kept" in rows["alice"]["detail"]
    assert float(rows["alice"]["score"]) == code_points + MANUAL + EXTRA
    manual_work_is_there()
    submitted.write_text(good)

    # A mid-term change to the graded cells: grading stops before it touches anything, and
    # release keeps the committed release/ and shows nbgrader's reason.
    source = root / "source" / A / f"{NOTEBOOK}.ipynb"
    before, released = (
        source.read_bytes(),
        (root / "release" / A / f"{NOTEBOOK}.ipynb").read_bytes(),
    )
    nb = nbformat.read(source, as_version=4)
    extra = nbformat.v4.new_code_cell("assert True")
    extra.metadata["nbgrader"] = {"grade": True, "grade_id": "test_added_mid_term", "locked": True,
                                  "points": 1, "schema_version": 3, "solution": False,
                                  "task": False}  # fmt: skip
    nb.cells.append(extra)
    nbformat.write(nb, source)
    stopped = run("course", "grade", A, cwd=root, code=2)
    assert "added: test_added_mid_term" in stopped.stderr and "Nothing was graded" in stopped.stderr
    refused = run("course", "release", A, cwd=root, code=2)
    assert "release/01_requires_grad is unchanged" in refused.stderr
    assert "submissions" in refused.stderr, "nbgrader's own reason is shown"
    assert (root / "release" / A / f"{NOTEBOOK}.ipynb").read_bytes() == released
    manual_work_is_there()
    source.write_bytes(before)

    # cara, late, has her written answer graded after autograde: the penalty (two started
    # days, 20%) is taken from the score with it, whatever the order of the steps.
    with course.api().gradebook as gb:
        gb.find_grade(term.essay_id, NOTEBOOK, A, "cara").manual_score = MANUAL
        gb.db.commit()

    # Feedback after manual grading carries the manual score and the comment to the student.
    run("course", "feedback", A, cwd=root)
    cara = 0.8 * (code_points + MANUAL)
    assert float(sheet(course)["cara"]["score"]) == pytest.approx(cara)
    assert released_page(term, "cara") == pytest.approx(cara, abs=0.01)

    # A score changed after the release: the sheet names the out-of-date page and the one
    # command that fixes it; that command brings the page in line.
    with course.api().gradebook as gb:
        gb.find_grade(term.essay_id, NOTEBOOK, A, "cara").manual_score = 0.0
        gb.db.commit()
    exported = run("course", "export", cwd=root).stdout
    fix = f"python -m course feedback {A} --student cara"
    assert fix in exported and "out of date" in sheet(course)["cara"]["notes"]
    assert released_page(term, "cara") == pytest.approx(cara, abs=0.01)
    run(*fix.split()[2:], cwd=root)
    assert released_page(term, "cara") == pytest.approx(0.8 * code_points, abs=0.01)
    assert "out of date" not in sheet(course)["cara"]["notes"]

    # bob reads his released feedback, fixes his mistake and submits again: only `collect
    # --update` takes the new version, and grading it leaves his released page behind, which the
    # table, the sheet and the report name with the command that releases it again.
    before = released_page(term, "bob")
    assert before == pytest.approx(float(sheet(course)["bob"]["score"]), abs=0.01)
    assert before < code_points
    term.hand_in("bob", refs)
    run("nbgrader", "collect", "--update", A, cwd=root)
    table = run("course", "grade", A, "--student", "bob", cwd=root).stdout
    assert float(sheet(course)["bob"]["score"]) == code_points
    fix = f"python -m course feedback {A} --student bob"
    assert f"out of date for bob: {fix}" in table
    assert "earlier submission" in sheet(course)["bob"]["notes"]
    assert f"<code>{fix}</code>" in (root / "grades" / "report.html").read_text()
    assert released_page(term, "bob") == pytest.approx(before, abs=0.01), "what bob fetches"
    run(*fix.split()[2:], cwd=root)
    assert released_page(term, "bob") == pytest.approx(code_points, abs=0.01)
    assert "out of date" not in sheet(course)["bob"]["notes"]

    page = (root / "feedback" / "alice" / A / f"{NOTEBOOK}.html").read_text()
    assert COMMENT in page and "BEGIN HIDDEN TESTS" not in page
    assert WRAP_CSS in page, "long messages wrap instead of running off the page"
    home = term.tmp / "alice"
    run("nbgrader", "fetch_feedback", A, "--student", "alice", *term.student_options("alice"),
        cwd=home, home=home)  # fmt: skip
    (fetched,) = (home / A / "feedback").glob(f"*/{NOTEBOOK}.html")
    assert COMMENT in fetched.read_text()

    # Export: our sheet equals nbgrader's, row by row.
    run("nbgrader", "export", "--to", str(term.tmp / "nbgrader.csv"), cwd=root)
    with (term.tmp / "nbgrader.csv").open() as handle:
        theirs = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(handle)}
    with (root / "grades" / "grades.csv").open() as handle:
        ours = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(handle)}
    assert set(ours) == set(theirs)
    for key, row in theirs.items():
        assert float(ours[key]["max_score"]) == float(row["max_score"]), key
        assert float(ours[key]["score"] or 0) == float(row["score"]), key
        assert float(ours[key]["late_penalty"] or 0) == float(row["late_submission_penalty"]), key
    with (root / "grades" / "canvas.csv").open() as handle:
        canvas = list(csv.reader(handle))
    column = canvas[0].index(A)
    assert float(canvas[1][column]) == total
    by_student = {line[2]: line[column] for line in canvas[2:]}
    assert float(by_student["alice"]) == code_points + MANUAL + EXTRA
