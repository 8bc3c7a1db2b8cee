"""nbgrader configuration for the autograd course.

Plain `nbgrader ...` commands run from this directory use it, and so does `python -m course`.
"""

import os

c = get_config()  # noqa: F821 (injected by traitlets)

ROOT = os.path.dirname(os.path.abspath(__file__))

c.CourseDirectory.course_id = "autograd-course"
c.CourseDirectory.root = ROOT
# nbgrader's default gradebook URL, with the two characters SQLAlchemy reads as a URL's escaped:
# "?" (a query: "CS 101 ?50%" had its gradebook beside the course) and "%" (an escape). Nothing
# else, since `nbgrader db upgrade` reads the URL as a plain path.
GRADEBOOK = os.path.join(ROOT, "gradebook.db")
c.CourseDirectory.db_url = "sqlite:///" + GRADEBOOK.replace("%", "%25").replace("?", "%3F")

# A course-local exchange: release/fetch/submit/collect work without a system-wide directory.
c.Exchange.root = os.path.join(ROOT, "exchange")

# Per-cell limit; a cell that runs past it is interrupted and recorded as an error.
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.Execute.shutdown_kernel = "immediate"
# No kernel history file, and no per-kernel start-up warnings flooding the grading log.
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", "--IPKernelApp.log_level=ERROR"]

# Before nbgrader's own clean-up: every cell's grading metadata comes from the source, deleted
# graded or locked cells are put back (forged or broken metadata would otherwise crash nbgrader).
c.Autograde.sanitize_preprocessors = [
    "course.grading.repair.RestoreCells",
    "nbgrader.preprocessors.ClearOutput",
    "nbgrader.preprocessors.DeduplicateIds",
    "nbgrader.preprocessors.OverwriteKernelspec",
    "nbgrader.preprocessors.OverwriteCells",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# nbgrader's autograde steps, with its Execute swapped for one that notices a dead kernel at once.
c.Autograde.autograde_preprocessors = [
    "course.grading.execute.GradingExecute",
    "nbgrader.preprocessors.IgnorePattern",
    "nbconvert.preprocessors.ClearMetadataPreprocessor",
    "nbgrader.preprocessors.LimitOutput",
    "nbgrader.preprocessors.SaveAutoGrades",
    "nbgrader.preprocessors.AssignLatePenalties",
    "nbgrader.preprocessors.CheckCellMetadata",
]

# Late work (due dates: `nbgrader db assignment add ID --duedate="2027-01-15 23:59:00 UTC"`)
# loses 10% of its score per started day late; set percent_per_day = 0 to only mark it late.
c.AssignLatePenalties.plugin_class = "course.grading.late.PerDayPenalty"
c.PerDayPenalty.percent_per_day = 10.0

c.ClearMetadataPreprocessor.preserve_nb_metadata_mask = {("language_info", "name")}

# A test cell the student deleted is put back from the source and graded.
c.OverwriteCells.add_missing_cells = True

# Feedback never shows hidden tests: their code is removed, and a failed test shows its message
# instead of a traceback (which would quote the hidden lines around the failing one).
c.GenerateFeedback.preprocessors = [
    "nbgrader.preprocessors.GetGrades",
    "nbgrader.preprocessors.ClearHiddenTests",
    "course.grading.feedback.ShortTestErrors",
    "nbconvert.preprocessors.CSSHTMLHeaderPreprocessor",
    "course.grading.feedback.WrapLongLines",
]
