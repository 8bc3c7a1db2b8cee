"""Late work: the penalty nbgrader's AssignLatePenalties takes off (our default; see README)."""

from __future__ import annotations

import math

from nbgrader.plugins import BasePlugin
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
