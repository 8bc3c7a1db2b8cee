"""Every contract exercise, through real nbgrader autograde: alternative correct answers get all
of its points, known misconceptions lose some, and no exercise's points come from another's answer.

Answers live in fixtures/answers/<assignment>/<exercise>/: `correct_*.py` and `wrong_*.py`. The
default run grades one file per exercise (the first correct one or the first wrong one, in turn)
and the all-but-one submission of each assignment's first exercise; the others are marked slow
(each is a submission of its own, graded for real) and run with `make test-all`.
"""

from __future__ import annotations

import pytest

from course.grading import batch
from course.grading.coursedir import Course
from course.submission import (
    answer_file,
    answer_names,
    build_submission,
    reference_answers,
    write_submission,
)
from course_testing import CONTRACT, REPO, copy_course, not_graded

CASES = [
    (assignment, exercise) for assignment, exercises in CONTRACT.items() for exercise in exercises
]


def _default_file(assignment: str, exercise: str, names: list[str]) -> str:
    """The answer file of an exercise that the default run grades: the first correct_ one for
    the 1st, 3rd, ... exercise of its assignment, the first wrong_ one for the others (so every
    exercise and both kinds in every assignment); the other files are graded with ``-m slow``
    (`make test-all`)."""
    kind = "wrong_" if CONTRACT[assignment].index(exercise) % 2 else "correct_"
    return next(n for n in names if n.startswith(kind))


ANSWER_CASES = [
    pytest.param(a, e, name, marks=() if name == _default_file(a, e, names) else pytest.mark.slow)
    for a, e in CASES
    for names in [answer_names(Course.at(REPO), a, e)]
    for name in names
]


def _student(exercise: str, name: str) -> str:
    return f"{exercise}--{name}"


def _allbut(exercise: str) -> str:
    return f"allbut--{exercise}"


# The default run grades one all-but-one submission per assignment: its first exercise left out.
ALLBUT_CASES = [
    pytest.param(a, e, marks=() if e == CONTRACT[a][0] else pytest.mark.slow) for a, e in CASES
]


def _students_asked(request) -> set[tuple[str, str]]:
    """(assignment, student) of every answer-file and all-but-one case this run selected: only
    they (and the reference) are graded, the slow cases' students only when slow cases run."""
    asked = set()
    for item in request.session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if item.module is request.module and "exercise" in params:
            exercise = params["exercise"]
            student = _student(exercise, params["name"]) if "name" in params else _allbut(exercise)
            asked.add((params["assignment"], student))
    return asked


@pytest.fixture(scope="module")
def graded(tmp_path_factory, request):
    """``graded(assignment)``: outcomes by student for a class made of each answer file alone (of
    those this run's tests ask about), the reference, and all-but-one-exercise; each assignment is
    graded once, when a test first asks."""
    course = copy_course(tmp_path_factory.mktemp("answers"), with_release=True)
    asked = _students_asked(request)
    cache: dict[str, dict[str, batch.Outcome]] = {}

    def outcomes(assignment: str) -> dict[str, batch.Outcome]:
        if assignment not in cache:
            refs = reference_answers(course, assignment)
            plans = {"reference": refs}
            for exercise in CONTRACT[assignment]:
                if (assignment, _allbut(exercise)) in asked:
                    plans[_allbut(exercise)] = {k: v for k, v in refs.items() if k != exercise}
                for name in answer_names(course, assignment, exercise):
                    if (assignment, _student(exercise, name)) in asked:
                        plans[_student(exercise, name)] = {
                            exercise: answer_file(course, assignment, exercise, name)
                        }
            for student, answers in plans.items():
                nb = build_submission(course, assignment, answers)
                write_submission(course, student, assignment, nb)
            graded = batch.grade(course, [assignment], students=plans, workers=2)
            cache[assignment] = {o.student: o for o in graded}
        return cache[assignment]

    return outcomes


def points(outcome: batch.Outcome, exercise: str) -> tuple[float, float]:
    """Points earned and available in the test cells of ``exercise`` (grade ids
    test_<exercise>*)."""
    ids = [g for g in outcome.cell_max if g.startswith(f"test_{exercise}")]
    assert ids, f"no test cells for {exercise} in {outcome.assignment}"
    return sum(outcome.cell_scores[g] or 0 for g in ids), sum(outcome.cell_max[g] for g in ids)


def test_every_exercise_has_two_correct_and_two_wrong_answers(repo_course):
    for assignment, exercise in CASES:
        names = answer_names(repo_course, assignment, exercise)
        correct = [n for n in names if n.startswith("correct_")]
        wrong = [n for n in names if n.startswith("wrong_")]
        assert len(correct) >= 2 and len(wrong) >= 2, (assignment, exercise, names)
        assert len(correct) + len(wrong) == len(names), f"unprefixed answer files: {names}"


@pytest.mark.parametrize("assignment", list(CONTRACT))
def test_reference_solution_gets_full_marks(graded, assignment):
    outcome = graded(assignment)["reference"]
    assert outcome.status == batch.GRADED, outcome.detail
    assert outcome.score == outcome.max_score > 0


@pytest.mark.parametrize("assignment,exercise", ALLBUT_CASES)
def test_exercise_points_need_its_own_answer(graded, assignment, exercise):
    outcome = graded(assignment)[_allbut(exercise)]
    earned, available = points(outcome, exercise)
    assert available >= 1
    assert earned == 0, f"{exercise} earned points without its own answer"
    assert outcome.score == outcome.max_score - available


@pytest.mark.parametrize("assignment,exercise,name", ANSWER_CASES)
def test_answer_file_grades_as_named(graded, assignment, exercise, name):
    """correct_* files earn every point of their exercise; wrong_* files lose at least one, but
    for a mistake about how the answer computed (its header says ``# Not graded: <fact>``), which
    its visible tests name and the hidden tests teach without a point."""
    outcome = graded(assignment)[_student(exercise, name)]
    assert outcome.status == batch.GRADED, outcome.detail
    earned, available = points(outcome, exercise)
    taught = not_graded(REPO / "fixtures" / "answers" / assignment / exercise / f"{name}.py")
    if name.startswith("correct_") or taught:
        assert earned == available, f"{name} got {earned}/{available}"
    else:
        assert earned < available, f"misconception got full marks {earned}/{available}"
