"""The instructor's report after grading: statuses, score distribution per test and the most
common failure messages (the class's misconceptions), as one self-contained HTML page.

Runs in: the grader (the instructor's `python -m course` process).
"""

from __future__ import annotations

import base64
import html
import io
import re
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # the report is written from the command line, never shown

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402

from . import exchange, gradesheet, returns  # noqa: E402
from .gradesheet import Row  # noqa: E402
from .grading import judging, late  # noqa: E402
from .grading.batch import (  # noqa: E402
    FAILED,
    GRADED,
    MISSING,
    PARTIAL,
    STATUSES,
    Outcome,
)
from .grading.coursedir import Course  # noqa: E402
from .grading.feedback import short_error  # noqa: E402
from .lesson.widgets.base import PALETTE  # noqa: E402

TOP_MESSAGES = 5
MARK_SCHEME = re.compile(r"=== BEGIN MARK SCHEME ===\n(.*?)=== END MARK SCHEME ===", re.S)


@dataclass
class TestSummary:
    """How one test cell went across the class."""

    scores: list[float] = field(default_factory=list)
    max_score: float = 0.0
    messages: Counter = field(default_factory=Counter)


def failure_messages(notebook: Path) -> dict[str, list[str]]:
    """What went wrong in each failed test cell of an autograded notebook, by grade id: the
    hidden tests' likely mistakes (the same words for every student who made them), or the
    cell's one-line error."""
    nb = nbformat.read(notebook, as_version=4)
    found = {}
    for cell in nb.cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for output in cell.get("outputs", []):
                if output.output_type == "error":
                    found[meta["grade_id"]] = (
                        judging.likely_mistakes(output.evalue)
                        if output.ename == judging.FAILED
                        else [short_error(output.ename, output.evalue)]
                    )
                    break
    return found


def summarize(course: Course, rows: list[Row], gb) -> dict[str, dict[str, TestSummary]]:
    """Per assignment and test cell: the scores of graded students (from the gradebook) and
    their failure messages (from their autograded notebooks)."""
    tests: dict[str, dict[str, TestSummary]] = defaultdict(dict)
    for r in rows:
        if r.status not in (GRADED, PARTIAL):
            continue
        folder = course.root / "autograded" / r.student_id / r.assignment
        messages = {}
        for notebook in folder.glob("*.ipynb"):
            messages.update(failure_messages(notebook))
        for notebook in gb.find_submission(r.assignment, r.student_id).notebooks:
            for grade in notebook.grades:
                if grade.cell.cell_type != "code" or grade.auto_score is None:
                    continue
                summary = tests[r.assignment].setdefault(grade.name, TestSummary())
                summary.max_score = grade.max_score
                summary.scores.append(grade.auto_score)
                summary.messages.update(messages.get(grade.name, []))
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


def mark_schemes(course: Course, assignment: str) -> dict[str, str]:
    """The mark scheme of each written answer of ``assignment``, by "notebook: grade id": the
    text its source cell holds between nbgrader's mark-scheme delimiters (which release strips,
    so neither students nor formgrader see it)."""
    found = {}
    for path in sorted((course.root / "source" / assignment).glob("*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            meta = cell.metadata.get("nbgrader", {})
            if scheme := MARK_SCHEME.search(cell.source):
                found[f"{path.stem}: {meta.get('grade_id')}"] = scheme[1].strip()
    return found


def _mark_schemes(course: Course, waiting: list[tuple[str, str]]) -> list[str]:
    """The report's mark scheme of each written answer waiting for a grader."""
    schemes = {assignment: mark_schemes(course, assignment) for assignment, _ in waiting}
    shown = [(a, cell, schemes[a][cell]) for a, cell in waiting if cell in schemes[a]]
    if not shown:
        return []
    return [
        "<h3>Mark schemes</h3><p>From the source notebooks, where each follows its reference "
        "answer (formgrader does not show them).</p>",
        *(
            f"<h4>{html.escape(a)} / {html.escape(cell)}</h4><pre>{html.escape(scheme)}</pre>"
            for a, cell, scheme in shown
        ),
    ]


def _totals(rows: list[Row]) -> list[tuple[str, float, float, int]]:
    """Per student: points, points available and assignments without a grade."""
    totals: dict[str, list] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in rows:
        entry = totals[r.student_id]
        entry[0] += r.score or 0.0
        entry[1] += r.max_score or 0.0
        entry[2] += r.score is None
    return [(student, *values) for student, values in sorted(totals.items())]


def write_report(
    course: Course, rows: list[Row], gb, path: Path, stale: dict[str, list[str]]
) -> Path:
    """Write the HTML report (``stale``: by assignment, the students whose released feedback
    differs from the gradebook) and return its path."""
    esc = html.escape
    parts = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'><title>Grading report</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "td,th{padding:2px 8px;text-align:left;vertical-align:top}"
        # long messages wrap anywhere; a name (a test's grade id) never inside a word
        "td{overflow-wrap:anywhere}td.name{white-space:nowrap}pre{white-space:pre-wrap}"
        "</style></head><body>",
        "<h1>Grading report</h1><h2>Statuses</h2><table><tr><th>assignment</th>",
    ]
    statuses = list(STATUSES)
    parts += [f"<th>{s}</th>" for s in statuses] + ["</tr>"]
    released = gradesheet.released_rows(rows)
    counts = Counter((r.assignment, r.status) for r in released)
    for assignment in dict.fromkeys(r.assignment for r in released):
        cells = "".join(f"<td>{counts[(assignment, s)]}</td>" for s in statuses)
        parts.append(f"<tr><td>{esc(assignment)}</td>{cells}</tr>")
    parts.append("</table>")
    if unreleased := not_released(rows):
        parts.append(f"<p>{esc(unreleased)}; not counted in the totals.</p>")

    def listed(heading: str, items: list[str]) -> None:
        if items:
            parts.append(f"<h2>{heading}</h2><ul>")
            parts.extend(f"<li>{item}</li>" for item in items)
            parts.append("</ul>")

    listed(
        "Submissions that need a look",
        [
            f"{esc(r.assignment)} / {esc(r.student_id)}: {esc(r.status)}, {esc(r.detail)}"
            for r in rows
            if r.status in (FAILED, PARTIAL)
        ],
    )
    listed(
        "Released feedback that differs from the gradebook",
        [
            f"{esc(', '.join(students))} see another score than the gradebook's; release it "
            f"again: <code>{esc(refresh_command(a, students))}</code>"
            for a, students in stale.items()
        ],
    )
    listed(
        "To do",
        [
            f"{esc(r.assignment)} / {esc(r.student_id)}: {esc('; '.join(r.notes))}"
            for r in rows
            if r.notes
        ],
    )
    waiting = [(r, cell) for r in rows for cell in r.to_grade]
    if waiting:
        parts.append(
            f"<h2>Written answers to grade ({len(waiting)})</h2>"
            "<p>In formgrader: Manual Grading, then the assignment, then the notebook.</p><ul>"
        )
        parts += [
            f"<li>{esc(r.assignment)} / {esc(r.student_id)}: {esc(cell)}</li>"
            for r, cell in waiting
        ]
        parts.append("</ul>")
        parts += _mark_schemes(course, sorted({(r.assignment, cell) for r, cell in waiting}))
    parts.append(
        "<h2>Students</h2><table><tr><th>student</th><th>points</th>"
        "<th>of</th><th>assignments without a grade</th></tr>"
    )
    parts += [
        f"<tr><td>{esc(student)}</td><td>{points:g}</td><td>{available:g}</td><td>{none}</td></tr>"
        for student, points, available, none in _totals(released)
    ]
    parts.append("</table>")
    for assignment, tests in summarize(course, rows, gb).items():
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
                f"<tr><td class='name'>{esc(grade_id)}</td><td>{full}/{len(t.scores)}</td>"
                f"<td>{mean:.2f}/{t.max_score:g}</td><td>{top}</td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(parts), encoding="utf-8")
    return path


def _stale(shown: exchange.Released | None, score: float | None) -> str | None:
    """Why the released feedback no longer shows the gradebook's score, or None."""
    if shown is None or score is None:
        return None
    if shown.earlier:  # the graded submission's own page was never released
        return f"released feedback is of an earlier submission ({shown.score:g}): out of date"
    if abs(shown.score - score) > 0.01:  # a regrade, a manual score, a late penalty since
        return f"released feedback says {shown.score:g}: out of date"
    return None


def annotate(course: Course, rows: list[Row]) -> dict[str, list[str]]:
    """Add to each row what the instructor must do about it now: collect work waiting in the
    exchange, know how a hand-in was timed, release feedback that no longer matches the gradebook.
    Return the students of each assignment whose released feedback is out of date."""
    waiting = exchange.uncollected(course)
    stale: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        key = (r.assignment, r.student_id)
        if key in waiting:
            what = "not collected yet" if r.status == MISSING else "a newer version not collected"
            r.notes.append(f"{what}: `{waiting[key]}`")
        folder = course.root / "submitted" / r.student_id / r.assignment
        if folder.is_dir() and not (folder / "timestamp.txt").is_file():
            r.notes.append(returns.NO_TIMESTAMP)
        if note := _stale(exchange.released(course, r.assignment, r.student_id), r.score):
            r.notes.append(note)
            stale[r.assignment].append(r.student_id)
    return stale


def refresh_command(assignment: str, students: list[str]) -> str:
    """The one command that releases feedback matching the gradebook to ``students``."""
    return f"python -m course feedback {assignment} " + " ".join(f"--student {s}" for s in students)


def _rows_asked(
    rows: list[Row], assignments: list[str] | None, students: list[str] | None
) -> list[Row]:
    """The rows of ``assignments`` (default: every released one) and ``students`` (default:
    all)."""
    if assignments is None:
        rows = gradesheet.released_rows(rows)
    return [
        r
        for r in rows
        if (assignments is None or r.assignment in assignments)
        and (students is None or r.student_id in students)
    ]


def not_released(rows: list[Row]) -> str:
    """The line that names the assignments no student has yet ('' when there is none)."""
    names = sorted({r.assignment for r in rows if r.status == gradesheet.UNRELEASED})
    return f"Not released yet (no student has them): {', '.join(names)}" if names else ""


def publish(
    course: Course,
    outcomes: list[Outcome],
    out: Path,
    log=print,
    assignments: list[str] | None = None,
    students: list[str] | None = None,
) -> list[Row]:
    """Recompute the late penalties (a score may have changed since), update the grade sheet in
    ``out`` (a row per student and assignment of the gradebook, numbers from it, statuses of
    ``outcomes`` or of earlier runs), write the Canvas and Moodle CSVs and the report beside it,
    print the table of what was asked (the rows of ``assignments``, default every released one,
    and of ``students``, default all) and where things are, and return the sheet's rows."""
    late.reassess(course)
    sheet = out / "grades.csv"
    with course.api().gradebook as gb:
        rows = gradesheet.rows_for(outcomes, gb, course.gradebook, exchange.handed_out(course))
        stale = annotate(course, rows)
        gradesheet.write_csv(rows, sheet)
        canvas = gradesheet.write_canvas_csv(rows, gb, out / "canvas.csv")
        moodle = gradesheet.write_moodle_csvs(rows, out / "moodle")
        report = write_report(course, rows, gb, out / "report.html", stale)
    log(gradesheet.format_table(_rows_asked(rows, assignments, students)))
    log("")
    if assignments is None and (unreleased := not_released(rows)):
        log(unreleased)
    for assignment, behind in stale.items():
        log(
            f"Released feedback of {assignment} is out of date for {', '.join(behind)}: "
            f"{refresh_command(assignment, behind)}"
        )
    log(f"Grades (CSV): {sheet}")
    log(f"Grades for Canvas (CSV): {canvas}")
    log(f"Grades for Moodle (a CSV per assignment): {moodle}/")
    log(f"Report (HTML): {report}")
    log(f"Feedback (HTML): {course.root / 'feedback'}/<student>/<assignment>/<notebook>.html")
    return rows
