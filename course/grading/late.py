"""Late work: the penalty nbgrader's AssignLatePenalties takes off (our default; see README), and
its recomputation whenever a score changes.

Runs in: a worker (nbgrader's penalty in the job) and the grader (recomputed when a score changes).

nbgrader computes the penalty once, at autograde, from the score the notebook has then; a manual
grade given later would be added without its share of the penalty, and the next regrade would
take it off: the same work would get another total depending on the order of the steps.
`reassess` runs nbgrader's own step again on the gradebook as it is now, so the rule holds
whatever the order."""

from __future__ import annotations

import logging
import math

import nbformat
from nbgrader.plugins import BasePlugin
from nbgrader.preprocessors import AssignLatePenalties
from traitlets import Float


class PerDayPenalty(BasePlugin):
    """A late notebook loses ``percent_per_day`` of its score for every day or part of a day
    after the due date, down to 0. Due dates live in the gradebook
    (``nbgrader db assignment add ID --duedate=...``); without one nothing is late."""

    percent_per_day = Float(10.0, help="share of the score lost per started day late").tag(
        config=True
    )

    def late_submission_penalty(
        self, student_id: str, score: float, total_seconds_late: float
    ) -> float:
        days = math.ceil(total_seconds_late / 86400)
        return min(score, score * days * self.percent_per_day / 100)


def reassess(course, assignments: list[str] | None = None) -> None:
    """Recompute the late penalty of every graded notebook (of ``assignments``, when given) from
    its score now, with the configured AssignLatePenalties and its plugin."""
    api = course.api()
    with api.gradebook as gb:
        notebooks = [
            (nb.name, a.name, sub.student.id)
            for a in gb.assignments
            if assignments is None or a.name in assignments
            for sub in a.submissions
            for nb in sub.notebooks
        ]
    step = AssignLatePenalties(config=api.config, log=logging.getLogger("course.late"))
    step.log.setLevel(logging.ERROR)  # it warns about every late notebook, each time
    for notebook, assignment, student in notebooks:
        info = {"notebook": notebook, "assignment": assignment, "student": student}
        step.preprocess(
            nbformat.v4.new_notebook(), {"nbgrader": {**info, "db_url": api.coursedir.db_url}}
        )
