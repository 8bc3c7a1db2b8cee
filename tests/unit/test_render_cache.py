"""Memoized feedback rendering (`course.grading.render_cache`, `course.grading.cell_soup`) gives
the page nbconvert gives, for any cell text, cached or not."""

from __future__ import annotations

import random

from bs4 import BeautifulSoup
from nbconvert.exporters import HTMLExporter
from nbconvert.filters.highlight import Highlight2HTML

from course.grading import cell_soup
from course.grading.render_cache import memoize_rendering

HEAD = '<!DOCTYPE html>\n<html><head><meta charset="utf-8"><style>p {x: "<div>"}</style></head>\n'
CELL = cell_soup.CELL_START + 'code_cell rendered">'
FRAGMENTS = [
    '<div class="input"><pre><span class="k">def</span> f():  &amp; &lt;x&gt;</pre></div>',
    "<p>one</p>\n\n  <p>two &copy; &#97;</p>",
    "</div>",  # closes the notebook's container early
    "<div><span>left open",
    "<script>if (a < b) { '</div>' }",  # never closed: the rest is script text
    "<script>x = '<p>'</script>",
    "<style>p::before {content: '</br>'}</style>",
    '<img src="a.png">',
    '<img src="a.png" alt="a plot">',
    "<br></br>",
    "</br>",
    "<br/><hr>",
    '<div class="jp-Notebook"><div class="jp-Cell-inputWrapper">in</div></div>',
    '<div class="JP-OUTPUTAREA-OUTPUT">out</div>',
    '<div class="jp&#45;Cell-inputWrapper">x</div>',
    '<div title="never closed>text',
    "<!-- a comment never closed",
    "<!-- <div> -->",
    "tail &amp",
    "<textarea>  a\n  </textarea>",
    "<pre>\n\n  kept  </pre>",
    "<x-cell-0000000000000000-0></x-cell-0000000000000000-0>",
    '<meta charset="latin-1">',
    "<table><tr><td>1<td>2</table>",
    "<p><p>nested</p>",
    "   ",
    "\n",
]


def page(cells: list[str], wrap: tuple[str, str] = ('<div id="notebook">', "</div>")) -> str:
    body = "".join(f"{CELL}{text}</div>\n" for text in cells)
    return f"{HEAD}<body>\n{wrap[0]}\n{body}{wrap[1]}\n</body>\n</html>\n"


def nbconvert_pass(soup: BeautifulSoup) -> str:
    """What nbconvert's HTMLExporter does with the soup of a page (nbconvert 7.17)."""
    for elem in soup.select("img:not([alt])"):
        elem.attrs["alt"] = "No description has been provided for this image"
    for elem in soup.select(".jp-Notebook div.jp-Cell-inputWrapper"):
        elem.attrs["tabindex"] = "0"
    for elem in soup.select(".jp-Notebook div.jp-OutputArea-output"):
        elem.attrs["tabindex"] = "0"
    return str(soup)


def assert_same_page(html: str) -> None:
    expected = nbconvert_pass(BeautifulSoup(html, features="html.parser"))
    for _ in range(2):  # the second time from the cache
        assert nbconvert_pass(cell_soup.feedback_soup(html, features="html.parser")) == expected


def test_each_tricky_cell_between_plain_ones_gives_the_same_page():
    for text in FRAGMENTS:
        assert_same_page(page(["<p>before</p>", text, "<p>after</p>", "<p>last</p>"]))


def test_cells_inside_pre_or_script_or_a_jp_notebook_give_the_same_page():
    for wrap in [("<pre>", "</pre>"), ("<script>", "</script>"), ('<div class="jp-Notebook">', "")]:
        assert_same_page(
            page(["<p>a  b</p>", "<div class='jp-Cell-inputWrapper'>x</div>", "<p>"], wrap)
        )


def test_random_pages_give_the_same_page():
    rng = random.Random(22)
    for _ in range(300):
        cells = ["".join(rng.choices(FRAGMENTS, k=rng.randint(1, 3))) for _ in range(4)]
        assert_same_page(page(cells))


def test_a_cached_cell_is_parsed_once():
    text = "<p>the lesson's cell</p>"
    html = page([text, "<p>x</p>", "<p>y</p>"])
    cell_soup.feedback_soup(html, features="html.parser")
    assert cell_soup._kept[f"{CELL}{text}</div>\n"] == f"{CELL}{text}</div>\n"


def test_memoized_highlighting_keys_on_the_cell_metadata():
    memoize_rendering()
    highlight = Highlight2HTML(pygments_lexer="ipython3")
    python = highlight("x = 1", metadata={})
    assert highlight("x = 1", metadata={}) == python
    assert highlight("x = 1", metadata={"magics_language": "bash"}) != python


def test_memoized_templates_render_the_same_page_twice():
    memoize_rendering()
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

    nb = new_notebook(cells=[new_markdown_cell("# Title\n*x*"), new_code_cell("print(1)")])
    first, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    second, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    assert first == second
