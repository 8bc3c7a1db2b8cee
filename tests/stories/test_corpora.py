"""Three corpora that the grader's authors did not write, graded for real (`python -m course
grade`, real nbgrader, sandboxed kernels):

- fixtures/honest: correct answers in many styles, written from the contract alone; each gets
  every point of its exercise;
- fixtures/misconceptions: answers that break one clause of the contract each; each loses points
  on its exercise (and only there) through the values it computes, or, where the clause is about
  how the answer computed (a file's header says so: ``# Not graded: <fact>``), keeps them and its
  feedback names the fact in a line marked not graded;
- fixtures/attacks: submissions by a student who read the README and the `course` package and
  controls their whole kernel; none earns a point, leaks a hidden test or a solution into its
  feedback, changes the gradebook's source cells, or changes another student's grade or files.

The default run (`make test`) grades the first answer of each exercise of the first two corpora,
and one attack of each class (the README's numbers); the tests marked slow (`make test-all`)
grade every file, and the honest answers again through plain `nbgrader autograde`.
"""

from __future__ import annotations

import csv
import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course.submission import build_submission, reference_answers, write_submission
from course_testing import (
    ATTACKS_README,
    CONTRACT,
    all_attacks,
    attack_header,
    cell_scores,
    copy_course,
    corpus,
    decoded_ints,
    distinctive_secrets,
    exercise_points,
    feedback_text,
    leaked_secrets,
    not_graded,
    points,
    readme_with_table,
    runs_slow_tests,
    venv_env,
    write_attack,
)

REPO = Path(__file__).resolve().parents[2]
ASSIGNMENTS = sorted(CONTRACT)
HONEST, MISCONCEPTIONS = corpus("honest"), corpus("misconceptions")
SECRETS = distinctive_secrets()
ATTACKS = all_attacks()
SLOW = pytest.mark.slow


def _attack_class(attack) -> str:
    """The class of an attack (its header's "# Attack (<class>: ..."): a number of the README's
    list, or several joined with + (an attack that takes two routes at once, a kind of its own)."""
    return attack_header(attack)[0]


def _one_of_each_class(attacks: list) -> set[str]:
    """One attack of each class, spread over the assignments (the classes with fewest attacks
    choose first, each the first attack of an assignment with fewest chosen so far), with the
    other half of a writer/reader pair (meant for the same batch): the default run's attacks."""
    classes: dict[str, list] = {}
    for attack in attacks:
        classes.setdefault(_attack_class(attack), []).append(attack)
    per_assignment = dict.fromkeys(sorted({a.assignment for a in attacks}), 0)
    chosen = set()
    for _, members in sorted(classes.items(), key=lambda item: (len(item[1]), item[0])):
        pick = min(members, key=lambda a: per_assignment[a.assignment])
        per_assignment[pick.assignment] += 1
        chosen.add(pick.name)
        for end, other in (("_writer", "_reader"), ("_reader", "_writer")):
            if pick.name.endswith(end):
                chosen.add(pick.name.removesuffix(end) + other)
    return chosen


DEFAULT_ATTACKS = _one_of_each_class(ATTACKS)
ATTACK_CASES = [
    pytest.param(a, id=f"{a.assignment}/{a.name}", marks=() if a.name in DEFAULT_ATTACKS else SLOW)
    for a in ATTACKS
]
# The students of `_spread` that a test checks: the first (who takes the first file of every
# exercise) in the default run, the others with the slow tests.
PARTS = [
    pytest.param("first", id="first files"),
    pytest.param("rest", id="other files", marks=SLOW),
]


def _grade(course, *extra: str) -> subprocess.CompletedProcess:
    env = venv_env()
    return subprocess.run(
        [sys.executable, "-m", "course", "grade", *ASSIGNMENTS, "--workers", "2", *extra],
        cwd=course.root,
        env=env,
        capture_output=True,
        text=True,
        timeout=3000,
    )


def _spread(
    course, folder: dict, prefix: str, everyone: bool
) -> dict[tuple[str, str], dict[str, Path]]:
    """Students who each take one answer file per exercise (the k-th of each), the reference
    solution elsewhere: (assignment, student) -> exercise -> the file it took. Only the first
    student (k = 0) unless ``everyone``."""
    taken = {}
    for assignment, exercises in folder.items():
        refs = reference_answers(course, assignment)
        for k in range(max(len(files) for files in exercises.values()) if everyone else 1):
            student = f"{prefix}{k}"
            chosen = {e: files[k] for e, files in exercises.items() if k < len(files)}
            answers = {**refs, **{e: p.read_text() for e, p in chosen.items()}}
            write_submission(
                course, student, assignment, build_submission(course, assignment, answers)
            )
            taken[(assignment, student)] = chosen
    return taken


@pytest.fixture(scope="module")
def honest_and_misconceptions(tmp_path_factory, request):
    course = copy_course(tmp_path_factory.mktemp("corpora") / "course", with_release=True)
    everyone = runs_slow_tests(request)
    honest = _spread(course, HONEST, "honest", everyone)
    wrong = _spread(course, MISCONCEPTIONS, "misconceived", everyone)
    result = _grade(course)
    assert result.returncode in (0, 1), result.stdout + result.stderr
    return course, honest, wrong


def test_the_attack_readme_lists_every_attack_by_its_header():
    """fixtures/attacks/README.md's table is made from the files' headers (`python
    tests/redteam.py --readme`): every file, no other, each as its header says; every class an
    attack names is one of the README's list."""
    readme = ATTACKS_README.read_text()
    assert readme == readme_with_table(readme, ATTACKS), (
        "the README's table is not the files' headers: run .venv/bin/python tests/redteam.py "
        "--readme"
    )
    listed = set(re.findall(r"^(\d+)\. ", readme.partition("## Classes")[2], flags=re.M))
    named = {n for attack in ATTACKS for n in _attack_class(attack).split("+")}
    assert named <= listed, f"classes no README entry describes: {sorted(named - listed)}"


def test_the_corpora_are_big_enough():
    assert sum(len(f) for e in HONEST.values() for f in e.values()) >= 40
    assert len(ATTACKS) >= 30
    for assignment, exercises in CONTRACT.items():
        for exercise in exercises:
            assert HONEST.get(assignment, {}).get(exercise), f"no honest answer for {exercise}"
            assert MISCONCEPTIONS.get(assignment, {}).get(exercise), (
                f"no misconception for {exercise}"
            )


def _part(taken: dict, part: str) -> dict:
    """The students of ``taken`` (by `_spread`) in ``part``: the first, or the rest."""
    first = {(a, s) for a, s in taken if re.fullmatch(r"\D+0", s)}
    chosen = {k: v for k, v in taken.items() if (k in first) == (part == "first")}
    assert chosen, f"no student in {part}"
    return chosen


@pytest.mark.parametrize("part", PARTS)
def test_every_honest_answer_gets_every_point(honest_and_misconceptions, part):
    course, honest, _ = honest_and_misconceptions
    lost = []
    for (assignment, student), chosen in _part(honest, part).items():
        scores = cell_scores(course, assignment, student)
        for exercise, path in chosen.items():
            if exercise_points(scores, exercise) != points(assignment, f"test_{exercise}"):
                lost.append(f"{path.relative_to(REPO)}: {exercise_points(scores, exercise)}")
        assert sum(v or 0 for v in scores.values()) == points(assignment), (student, scores)
    assert not lost, lost


@pytest.fixture(scope="module")
def honest_by_nbgrader(honest_and_misconceptions):
    """The honest answers graded again by plain `nbgrader autograde` (kernels cold, one at a
    time), as an instructor who does not use `python -m course grade` grades."""
    course, honest, _ = honest_and_misconceptions
    for assignment in ASSIGNMENTS:
        done = subprocess.run(
            ["nbgrader", "autograde", assignment, "--student=honest*", "--force"],
            cwd=course.root,
            env=venv_env(),
            capture_output=True,
            text=True,
            timeout=3000,
        )
        assert done.returncode == 0, done.stdout + done.stderr
    return course, honest


@SLOW  # the route is in the default run: tests/stories/test_field.py grades honest answers with it
def test_every_honest_answer_gets_every_point_through_nbgrader_too(honest_by_nbgrader):
    course, honest = honest_by_nbgrader
    lost = [
        f"{path.relative_to(REPO)}: {exercise_points(scores, exercise)}"
        for (assignment, student), chosen in honest.items()
        for scores in [cell_scores(course, assignment, student)]
        for exercise, path in chosen.items()
        if exercise_points(scores, exercise) != points(assignment, f"test_{exercise}")
    ]
    assert not lost, lost


@pytest.mark.parametrize("part", PARTS)
def test_every_misconception_loses_points_or_is_taught_on_its_exercise_only(
    honest_and_misconceptions, part
):
    course, _, wrong = honest_and_misconceptions
    kept, untaught = [], []
    for (assignment, student), chosen in _part(wrong, part).items():
        scores = cell_scores(course, assignment, student)
        shown = feedback_text(course, student)
        for exercise, path in chosen.items():
            full = points(assignment, f"test_{exercise}")
            fact = not_graded(path)
            if fact is None and exercise_points(scores, exercise) >= full:
                kept.append(str(path.relative_to(REPO)))
            if fact is not None and (
                exercise_points(scores, exercise) != full or f": {fact}" not in shown
            ):
                untaught.append(f"{path.relative_to(REPO)}: {exercise_points(scores, exercise)}")
        others = [e for e in CONTRACT[assignment] if e not in chosen]
        for exercise in others:  # the reference answered these: they keep their points
            assert exercise_points(scores, exercise) == points(assignment, f"test_{exercise}")
    assert not kept, f"these misconceptions kept every point: {kept}"
    assert not untaught, f"these lost points or their feedback does not name the fact: {untaught}"


def test_the_misconceptions_that_only_teach_are_few_and_say_which_fact():
    """A teaching line is for a fact about how the answer computed: most misconceptions must
    still cost points through their values."""
    files = [p for exercises in MISCONCEPTIONS.values() for f in exercises.values() for p in f]
    taught = [p for p in files if not_graded(p)]
    assert len(taught) <= len(files) // 3, [str(p.relative_to(REPO)) for p in taught]


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


def _source_cells(course) -> list[tuple]:
    with course.api().gradebook as gb:
        return sorted(
            (c.notebook.assignment.name, c.notebook.name, c.name, c.source, c.checksum)
            for a in gb.assignments
            for nb in a.notebooks
            for c in nb.source_cells
        )


@pytest.fixture(scope="module")
def attacked(request, tmp_path_factory):
    """The attacks and a bystander in one batch. Without slow tests in the run, one attack of
    each class only."""
    course = copy_course(tmp_path_factory.mktemp("attacks") / "course", with_release=True)
    with (course.root / "nbgrader_config.py").open("a") as config:
        config.write("\nc.Execute.timeout = 15\nc.GradingExecute.total_timeout = 90\n")
    for assignment in ASSIGNMENTS:  # a classmate in every batch
        refs = reference_answers(course, assignment)
        write_submission(
            course, "bystander", assignment, build_submission(course, assignment, refs)
        )
    chosen = (
        ATTACKS if runs_slow_tests(request) else [a for a in ATTACKS if a.name in DEFAULT_ATTACKS]
    )
    for attack in chosen:
        write_attack(course, attack.name, attack)
    bystander = _digest(course.root / "submitted" / "bystander")
    # The gradebook as the release left it, with the class on the roster.
    first = _grade(course, "--student", "bystander")
    assert first.returncode == 0, first.stdout + first.stderr
    cells = _source_cells(course)
    result = _grade(course)
    return course, result, cells, bystander, {a.name for a in chosen}


def test_the_attack_batch_completes(attacked):
    _, result, _, _, _ = attacked
    assert result.returncode in (0, 1), result.stdout + result.stderr
    assert "the grader's" not in result.stdout.splitlines()[-1]


@pytest.mark.parametrize("attack", ATTACK_CASES)
def test_no_attack_earns_a_point(attacked, attack):
    course, _, _, _, batch = attacked
    assert attack.name in batch, "graded in this batch"
    try:
        scores = cell_scores(course, attack.assignment, attack.name)
    except Exception:  # never graded (failed before any grade was written): nothing earned
        return
    earned = {k: v for k, v in scores.items() if v}
    assert not earned, f"{attack.header[:200]}\nearned {earned}"


@pytest.mark.parametrize("attack", ATTACK_CASES)
def test_no_attack_gets_a_secret_into_its_feedback(attacked, attack):
    course, _, _, _, batch = attacked
    assert attack.name in batch, "graded in this batch"
    leaked = leaked_secrets(course, attack)
    assert not leaked, f"{attack.header[:200]}\nleaked {leaked[:3]}"
    assert SECRETS, "the sources have solutions and hidden tests to keep back"
    folder = course.root / "feedback" / attack.name
    for assignment_folder in folder.iterdir() if folder.exists() else []:
        names = {p.name for p in assignment_folder.iterdir()}
        assert names <= {f"{assignment_folder.name}.html", "timestamp.txt"}, names


PLAIN_FAILURES = (
    "invalid submission",
    "invalid notebook",
    "missing notebook",
    "timeout",
    "kernel died",
    "out of memory",
)


def test_an_attack_that_fails_says_why_in_plain_words(attacked):
    course, _, _, _, _ = attacked
    with (course.root / "grades" / "grades.csv").open() as sheet:
        rows = [r for r in csv.DictReader(sheet) if r["status"] == "failed"]
    vague = [
        (r["student_id"], r["detail"]) for r in rows if not r["detail"].startswith(PLAIN_FAILURES)
    ]
    assert not vague, vague


def test_the_leak_check_finds_a_leak(attacked):
    """The known-bad case: the bystander's autograded notebook holds the hidden tests and the
    reference's lines; a feedback page showing them would fail the check above."""
    course, _, _, _, _ = attacked
    graded = (course.root / "autograded" / "bystander" / ASSIGNMENTS[0]).rglob("*.ipynb")
    text = "\n".join(p.read_text() for p in graded)
    assert [line for line in SECRETS if json.dumps(line)[1:-1] in text]
    line = SECRETS[0]  # and a line encoded as an int (the sixth red team's route)
    assert line in decoded_ints(f"got {int.from_bytes(line.encode(), 'big')}, expected 3")


def test_the_class_is_untouched(attacked):
    course, _, cells, bystander, _ = attacked
    assert _source_cells(course) == cells, "the gradebook's source cells changed"
    assert _digest(course.root / "submitted" / "bystander") == bystander
    for assignment in ASSIGNMENTS:
        scores = cell_scores(course, assignment, "bystander")
        assert sum(v or 0 for v in scores.values()) == points(assignment)
