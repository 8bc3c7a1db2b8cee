"""The instructor's report after grading: statuses, score distribution per test and the most
common failure messages (the class's misconceptions), as one self-contained HTML page."""

from __future__ import annotations

import base64
import html
import io
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # the report is written from the command line, never shown

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402

from .grading.batch import (  # noqa: E402
    FAILED,
    FLAGGED,
    GRADED,
    PARTIAL,
    STATUSES,
    Outcome,
    format_table,
    write_csv,
)
from .grading.coursedir import Course  # noqa: E402
from .grading.feedback import short_error  # noqa: E402
from .lesson.widgets.base import PALETTE  # noqa: E402

TOP_MESSAGES = 5


@dataclass
class TestSummary:
    """How one test cell went across the class."""

    scores: list[float] = field(default_factory=list)
    max_score: float = 0.0
    messages: Counter = field(default_factory=Counter)


def failure_messages(notebook: Path) -> dict[str, str]:
    """The one-line error of each failed test cell in an autograded notebook, by grade id."""
    nb = nbformat.read(notebook, as_version=4)
    found = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    found[meta["grade_id"]] = short_error(output.ename, output.evalue)
    return found


def summarize(course: Course, outcomes: list[Outcome]) -> dict[str, dict[str, TestSummary]]:
    """Per assignment and test cell: the scores of graded students and their failure messages."""
    tests: dict[str, dict[str, TestSummary]] = defaultdict(dict)
    for o in outcomes:
        if o.status not in (GRADED, PARTIAL):
            continue
        folder = course.root / "autograded" / o.student / o.assignment
        messages = {}
        for notebook in folder.glob("*.ipynb"):
            messages.update(failure_messages(notebook))
        for grade_id, score in o.cell_scores.items():
            summary = tests[o.assignment].setdefault(grade_id, TestSummary())
            summary.max_score = o.cell_max.get(grade_id, 0.0)
            summary.scores.append(score or 0.0)
            if grade_id in messages:
                summary.messages[messages[grade_id]] += 1
    return tests


def _histogram(assignment: str, tests: dict[str, TestSummary]) -> str:
    """A bar chart of the mean score per test cell, as an inline PNG."""
    names = list(tests)
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(names) + 1.2), constrained_layout=True)
    share = [
        sum(t.scores) / (len(t.scores) * t.max_score) if t.scores and t.max_score else 0
        for t in tests.values()
    ]
    ax.barh(names, share, color=PALETTE["blue"])
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.set_xlabel("mean share of the points earned")
    ax.set_title(f"{assignment}: how each test went")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90)
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode()


def write_report(course: Course, outcomes: list[Outcome], path: Path) -> Path:
    """Write the HTML report and return its path."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Grading report</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "td,th{padding:2px 8px;text-align:left}</style></head><body>",
        "<h1>Grading report</h1><h2>Statuses</h2><table><tr><th>assignment</th>",
    ]
    statuses = list(STATUSES)
    parts += [f"<th>{s}</th>" for s in statuses] + ["</tr>"]
    counts = Counter((o.assignment, o.status) for o in outcomes)
    for assignment in dict.fromkeys(o.assignment for o in outcomes):
        cells = "".join(f"<td>{counts[(assignment, s)]}</td>" for s in statuses)
        parts.append(f"<tr><td>{esc(assignment)}</td>{cells}</tr>")
    parts.append("</table>")
    failed = [o for o in outcomes if o.status in (FAILED, PARTIAL, FLAGGED)]
    if failed:
        parts.append("<h2>Submissions that need a look</h2><ul>")
        parts += [
            f"<li>{esc(o.assignment)} / {esc(o.student)}: {esc(o.status)}, {esc(o.detail)}</li>"
            for o in failed
        ]
        parts.append("</ul>")
    for assignment, tests in summarize(course, outcomes).items():
        parts.append(f"<h2>{esc(assignment)}</h2>")
        parts.append(
            f"<img alt='mean score per test of {esc(assignment)}' "
            f"src='data:image/png;base64,{_histogram(assignment, tests)}'>"
        )
        parts.append(
            "<table><tr><th>test</th><th>full marks</th><th>mean</th>"
            "<th>most common failure messages</th></tr>"
        )
        for grade_id, t in tests.items():
            full = sum(s == t.max_score for s in t.scores)
            mean = sum(t.scores) / len(t.scores)
            top = "<br>".join(
                f"{n}&times; {esc(m)}" for m, n in t.messages.most_common(TOP_MESSAGES)
            )
            parts.append(
                f"<tr><td>{esc(grade_id)}</td><td>{full}/{len(t.scores)}</td>"
                f"<td>{mean:.2f}/{t.max_score:g}</td><td>{top}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def publish(course: Course, outcomes: list[Outcome], csv_path: Path, log=print) -> None:
    """Write the grade CSV and the report beside it, and print the table and where things are."""
    write_csv(outcomes, csv_path)
    report_path = write_report(course, outcomes, csv_path.with_name("report.html"))
    log(format_table(outcomes))
    log("")
    log(f"Grades (CSV): {csv_path}")
    log(f"Report (HTML): {report_path}")
    log(f"Feedback (HTML): {course.root / 'feedback'}/<student>/<assignment>/<notebook>.html")
