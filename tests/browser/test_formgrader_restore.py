"""Formgrader across `python -m course restore`: a score a grader enters by hand is never lost.

While `make lab` serves the course, formgrader keeps the gradebook open; a restore that replaced
the file under it would send the next score to the replaced file, where it fails (readonly) and
is lost. So restore refuses while a lab runs, and says how to stop it; once the lab is stopped,
restore puts the backup back, and the lab started again grades into the restored gradebook."""

from __future__ import annotations

import pytest
from conftest import GRADED_ASSIGNMENT as A
from conftest import course_command, serve, stop
from labdriver import click_menu_command, open_lab, screenshot

from course.grading.coursedir import read_only
from course_testing import essay_cell

pytestmark = pytest.mark.browser

FRAME = "#formgrader iframe"
SAVE_TIMEOUT_MS = 30_000
READY_JS = "() => [window.formgrader?.grades, window.formgrader?.comments].every(m => m?.loaded)"


def manual_score(gradebook) -> float | None:
    """The written answer's manual score in the gradebook file at ``gradebook``."""
    essay, _ = essay_cell(A)
    with read_only(gradebook) as db:
        (score,) = db.execute(
            "SELECT grade.manual_score FROM grade JOIN base_cell ON grade.cell_id = base_cell.id"
            " WHERE base_cell.name = ?",
            (essay,),
        ).fetchone()
    return score


def open_submission(page, lab):
    """Lab, Nbgrader > Formgrader, Manual Grading, the assignment, its notebook, the first
    submission: the frame that shows it, once formgrader's script has loaded its grades."""
    open_lab(page, lab.page_url(), "Lab")
    click_menu_command(page, "Nbgrader", "nbgrader:open-formgrader")
    frame = page.frame_locator(FRAME)
    frame.get_by_role("link", name="Manual Grading").first.click()
    frame.get_by_role("link", name=A, exact=True).click()  # the assignment
    frame.get_by_role("link", name=A, exact=True).click()  # its notebook
    frame.get_by_role("link", name="Submission #1").click()
    shown = page.locator(FRAME).element_handle().content_frame()
    # A score typed before formgrader's script has fetched the grades is never sent.
    shown.wait_for_function(READY_JS, timeout=SAVE_TIMEOUT_MS)
    return shown


def enter_score(page, frame, score: float) -> int:
    """Type a score for the written answer as a grader does (then Tab); the status of the
    request that saves it."""
    box = frame.locator(f"#{essay_cell(A)[0]}")
    with page.expect_response(
        lambda r: "/formgrader/api/grade/" in r.url and r.request.method == "PUT",
        timeout=SAVE_TIMEOUT_MS,
    ) as saved:
        box.fill(str(score))
        box.press("Tab")
    return saved.value.status


def test_a_score_entered_in_formgrader_survives_a_restore(
    graded_class, browser, tmp_path, screenshots
):
    root, gradebook = graded_class, graded_class / "gradebook.db"
    page = browser.new_page()
    lab = serve(root, tmp_path / "first")
    try:
        frame = open_submission(page, lab)
        assert enter_score(page, frame, 1.5) == 200
        assert manual_score(gradebook) == 1.5

        refused = course_command(root, "restore")
        assert refused.returncode == 3, refused.stdout + refused.stderr
        (line,) = refused.stderr.strip().splitlines()
        assert "JupyterLab is serving this course" in line, line
        assert f"pid {lab.process.pid}" in line and f"`kill {lab.process.pid}`" in line, line
        assert "Ctrl-C" in line and "run restore again" in line, line
        assert manual_score(gradebook) == 1.5, "the refused restore changed nothing"

        assert enter_score(page, frame, 2) == 200, "formgrader still writes the gradebook"
        assert manual_score(gradebook) == 2
        screenshot(page, screenshots, "formgrader-before-restore")
    finally:
        stop(lab.process)  # as the refusal says: `kill PID`
        page.close()

    done = course_command(root, "restore")
    assert done.returncode == 0, done.stdout + done.stderr
    replaced = done.stdout.split("the gradebook it replaced is kept as ")[1].strip()
    assert manual_score(replaced) == 2, "what was entered before the restore is kept"
    assert manual_score(gradebook) is None, "the backup, made before any score, is back"

    page = browser.new_page()
    lab = serve(root, tmp_path / "again")
    try:
        frame = open_submission(page, lab)
        assert frame.locator(f"#{essay_cell(A)[0]}").input_value() == ""
        assert enter_score(page, frame, 1) == 200
        assert manual_score(gradebook) == 1, "the lab started again grades the restored file"
        screenshot(page, screenshots, "formgrader-after-restore")
    finally:
        stop(lab.process)
        page.close()
