"""grades/report.html as an instructor reads it in a browser: the per-test tables keep each test's
name whole (a break only at an underscore, never inside a word), at a wide and a narrow window."""

from __future__ import annotations

import pytest
from conftest import GRADED_ASSIGNMENT
from labdriver import screenshot

from course_testing import grade_ids

pytestmark = pytest.mark.browser

# Each test name's line breaks: the offsets in its text where a new line starts.
BREAKS_JS = """
() => {
  const tables = [...document.querySelectorAll('table')]
    .filter(t => t.querySelector('th')?.textContent === 'test');
  const range = document.createRange();
  return tables.flatMap(t => [...t.querySelectorAll('td:first-child')].map(td => {
    const walker = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
    const breaks = [];
    let offset = 0, lastTop = null;
    for (let n = walker.nextNode(); n; n = walker.nextNode()) {
      for (let i = 0; i < n.length; i++) {
        range.setStart(n, i);
        range.setEnd(n, i + 1);
        const top = range.getClientRects()[0]?.top;
        if (lastTop !== null && top > lastTop + 1) breaks.push(offset + i);
        if (top !== undefined) lastTop = top;
      }
      offset += n.length;
    }
    return {name: td.textContent, breaks};
  }));
}
"""


@pytest.mark.parametrize("width", [1440, 800])
def test_test_names_never_wrap_inside_a_word(graded_class, browser, screenshots, width):
    report = graded_class / "grades" / "report.html"
    page = browser.new_page(viewport={"width": width, "height": 900})
    try:
        page.goto(report.as_uri())
        names = page.evaluate(BREAKS_JS)
        screenshot(page, screenshots, f"report-{width}")
    finally:
        page.close()
    assert sorted(n["name"] for n in names) == sorted(grade_ids(GRADED_ASSIGNMENT)), "a row a test"
    inside = {
        n["name"]: n["breaks"] for n in names if any(n["name"][i - 1] != "_" for i in n["breaks"])
    }
    assert not inside, f"{GRADED_ASSIGNMENT}'s test names break inside a word: {inside}"
