"""nbconvert's BeautifulSoup pass over an HTML page, with each cell that is the same as on an
earlier page of this process parsed only once: the same page, a third of its CPU time.

Runs in: a worker (feedback pages), and the grader for `python -m course feedback`.

nbconvert's HTML exporter parses every page it renders with BeautifulSoup (``html.parser``), sets
``alt`` on images without one and ``tabindex`` under ``.jp-Notebook``, and writes the tree out
again: three quarters of a feedback page's CPU time, spent mostly on the lesson's cells, the
same on every student's page. `feedback_soup` takes BeautifulSoup's place there. It parses a
*skeleton*: the page with each cached cell replaced by a placeholder element; its output is the
skeleton's with each placeholder replaced by the cell's own output, kept from the first page
that had exactly that cell's text.

This gives what parsing the whole page gives when a cell parses "self-contained": alone it ends
with every tag it opened closed and nothing left half-read, none of its end tags closes or
skips a tag it did not open (``</br>`` and the like are never cached), and nothing in it is
touched by nbconvert's pass (no image without ``alt``, no ``jp-`` class it selects). Such a
cell becomes the same subtree wherever it stands, as long as it does not stand inside an element
that changes how text is parsed or written (``pre``, ``script``, ...); the skeleton is checked
for that, and for placeholders that did not become elements. Any other page, or a page that
fails a check, is parsed whole, as before. The split points (where nbconvert's classic template
opens a cell) only decide what can be cached, never what comes out.
"""

from __future__ import annotations

import re
import secrets

from bs4 import BeautifulSoup
from bs4.builder import HTMLParserTreeBuilder
from bs4.builder._htmlparser import BeautifulSoupHTMLParser

CELL_START = '<div class="cell border-box-sizing '  # nbconvert's classic template, each cell
TOUCHED_CLASSES = {"jp-notebook", "jp-cell-inputwrapper", "jp-outputarea-output"}
KEPT_MAX = 4096  # cells kept; past it the cache starts afresh
_kept: dict[str, str | None] = {}  # a cell's text -> its output, None where it cannot be cached


class _Parser(BeautifulSoupHTMLParser):
    """html.parser as BeautifulSoup drives it, noting what makes a fragment not self-contained."""

    def handle_endtag(self, tag, check_already_closed=True):
        if check_already_closed and tag in self.soup.builder.empty_element_tags:
            self.soup.void_end = True  # `</br>`: its effect depends on the `<br>`s before it
        elif not self.soup.open_tag_counter.get(tag):
            self.soup.contained = False  # would close (or skip) a tag opened outside
        super().handle_endtag(tag, check_already_closed)

    def close(self):
        if self.rawdata or self.cdata_elem is not None or len(self.soup.tagStack) > 1:
            self.soup.contained = False  # something left open or half-read
        super().close()


class _Builder(HTMLParserTreeBuilder):
    def feed(self, markup):
        super().feed(markup, _parser_class=_Parser)


class _CheckedSoup(BeautifulSoup):
    """BeautifulSoup(markup, "html.parser"), noting whether it parsed self-contained."""

    def __init__(self, markup: str):
        self.contained, self.void_end = True, False
        super().__init__(markup, builder=_Builder())


def _cell_output(text: str) -> str | None:
    """The output of one cell's fragment, or None when it is not self-contained or is touched
    by nbconvert's pass."""
    if text in _kept:
        return _kept[text]
    soup = _CheckedSoup(text)
    touched = any(
        (tag.name == "img" and "alt" not in tag.attrs)
        or any(c.lower() in TOUCHED_CLASSES for c in tag.get("class") or ())
        for tag in soup.find_all(True)
    )
    output = str(soup) if soup.contained and not soup.void_end and not touched else None
    if len(_kept) >= KEPT_MAX:
        _kept.clear()
    _kept[text] = output
    return output


class _SkeletonSoup(_CheckedSoup):
    """A page's soup without its cached cells; written out with them."""

    def __init__(self, skeleton: str, placed: dict[str, str]):
        self.placed = placed  # placeholder name -> the cell's output
        super().__init__(skeleton)

    def sound(self) -> bool:
        """Whether the whole page would parse into this tree with the cells in place: each
        placeholder an element, once, where text is parsed and written as usual, and no end
        tag of a void element (cached cells may have left `<br>`s it would have matched)."""
        if self.void_end:
            return False
        inert = self.builder.preserve_whitespace_tags | set(self.builder.string_containers)
        found = self.find_all(list(self.placed))
        return sorted(t.name for t in found) == sorted(self.placed) and not any(
            p.name in inert for t in found for p in t.parents
        )

    def decode(self, *args, **kwargs) -> str:
        text = super().decode(*args, **kwargs)
        for name, output in self.placed.items():
            text = text.replace(f"<{name}></{name}>", output, 1)
        return text


def feedback_soup(markup, features=None, **kwargs) -> BeautifulSoup:
    """``BeautifulSoup(markup, features, **kwargs)`` for nbconvert's HTML exporter (see above)."""
    starts = (
        [m.start() for m in re.finditer(re.escape(CELL_START), markup)]
        if (isinstance(markup, str) and features == "html.parser" and not kwargs)
        else []
    )
    nonce = secrets.token_hex(8)
    if len(starts) < 2 or nonce in markup:
        return BeautifulSoup(markup, features, **kwargs)
    parts, placed, end = [markup[: starts[0]]], {}, starts[0]
    for start, stop in zip(starts, starts[1:]):  # the last cell runs on into the page's end
        text = markup[start:stop]
        output = _cell_output(text)
        if output is None:
            parts.append(text)
        else:
            name = f"x-cell-{nonce}-{len(placed)}"
            placed[name] = output
            parts.append(f"<{name}></{name}>")
        end = stop
    parts.append(markup[end:])
    soup = _SkeletonSoup("".join(parts), placed)
    return soup if soup.sound() else BeautifulSoup(markup, features, **kwargs)
