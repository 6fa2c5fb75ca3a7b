"""Header-aware HTML, on the text normalize renders: the markdown chunker's blocks, HTML's tables.

normalize drops boilerplate (nav, footer, cookie banners, ...), makes h1-h6 the sections, renders each
`<li>` as a `- ` block, each table as `a | b` rows and records tables and `<pre>` as atomic ranges.
"""

from __future__ import annotations

from typing import ClassVar

from pipeline.chunkers.base import register
from pipeline.chunkers.markdown import Dialect, MarkdownChunker, line_spans
from pipeline.model import Section


def heading_end(text: str, section: Section) -> int | None:
    """normalize emits a heading as its own one-line block at the section start."""
    if section.kind != "heading":
        return None
    lines = line_spans(text, section.start, section.end)
    return lines[0][1] if lines else None


def table_header_end(text: str, a: int, b: int) -> int | None:
    """A rendered table: two or more rows, each with ' | ' between cells; its first row heads it."""
    lines = line_spans(text, a, b)
    if len(lines) < 2:
        return None
    if any(" | " not in text[x:y] for x, y in lines):
        return None
    return lines[0][1]


def atomic_kind(text: str, a: int, b: int) -> str:
    """Atomic ranges in HTML text are tables or `<pre>` blocks (cut like code)."""
    return "table" if table_header_end(text, a, b) is not None else "code"


HTML = Dialect(heading_end, table_header_end, atomic_kind)


@register
class HtmlChunker(MarkdownChunker):
    """Blocks of an h1-h6 section; `<pre>` cut only by lines, tables by rows with the header row kept."""

    kind = "html"
    dialect: ClassVar[Dialect] = HTML
