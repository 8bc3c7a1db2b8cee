"""Feedback pages without rendering the same text twice in a process: same pages, less CPU.

Runs in: a worker (feedback pages), and the grader for `python -m course feedback`.

nbgrader builds a new nbconvert exporter for every submission, so the page's Jinja templates are
compiled again each time (about a tenth of a page's CPU), and every code cell is highlighted by
Pygments although most of them are the lesson's, the same for every student. Both are pure
functions of their text: a compiled template of its source (Jinja's own bytecode-cache hook,
checked against the source's checksum), a highlighted cell of its source, language, metadata and
the formatter's options. So the first result is kept and reused for the identical input only;
nothing computed from one student's cell can come out for another's (different text, different
key).
"""

from __future__ import annotations

import json

import nbconvert.exporters.html
from jinja2 import BytecodeCache
from nbconvert.exporters.templateexporter import TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML

from .cell_soup import feedback_soup


class CompiledTemplates(BytecodeCache):
    """Jinja's bytecode cache, in memory, shared by every environment nbconvert makes."""

    def __init__(self):
        self._code = {}

    @staticmethod
    def _key(bucket) -> tuple:
        env = bucket.environment  # what changes the compiled code besides the source
        return (bucket.key, bucket.checksum, env.is_async, tuple(sorted(env.extensions)))

    def load_bytecode(self, bucket) -> None:
        bucket.code = self._code.get(self._key(bucket))

    def dump_bytecode(self, bucket) -> None:
        self._code[self._key(bucket)] = bucket.code


TEMPLATES = CompiledTemplates()


HIGHLIGHTED: dict[tuple, str] = {}
HIGHLIGHTED_MAX = 4096  # cells kept; past it the cache starts afresh


def memoize_rendering() -> None:
    """Patch nbconvert (once per process) to keep compiled templates, highlighted cells and
    parsed cells (`course.grading.cell_soup`)."""
    if getattr(TemplateExporter._create_environment, "memoized", False):
        return
    create, highlight = TemplateExporter._create_environment, Highlight2HTML.__call__

    def create_environment(self):
        environment = create(self)
        environment.bytecode_cache = TEMPLATES
        return environment

    def highlight_code(self, source, language=None, metadata=None):
        key = (
            source,
            language,
            json.dumps(metadata, sort_keys=True),
            self.pygments_lexer,
            json.dumps(self.extra_formatter_options, sort_keys=True),
        )
        if key not in HIGHLIGHTED:
            if len(HIGHLIGHTED) >= HIGHLIGHTED_MAX:
                HIGHLIGHTED.clear()
            HIGHLIGHTED[key] = highlight(self, source, language, metadata)
        return HIGHLIGHTED[key]

    create_environment.memoized = True
    TemplateExporter._create_environment = create_environment
    Highlight2HTML.__call__ = highlight_code
    nbconvert.exporters.html.BeautifulSoup = feedback_soup
