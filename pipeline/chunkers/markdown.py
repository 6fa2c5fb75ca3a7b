"""Heading-aware markdown: blocks packed whole; fences and tables cut only at line ends, if at all.

Sections (normalize) already follow the headings, and the base puts `Title > H1 > H2` in the context.
Inside a section this chunker works on blocks: the heading line, paragraphs, lists, and the atomic
ranges normalize recorded (fenced or indented code, tables, HTML blocks). A block that fits is never
cut. A block that does not is cut where its structure allows: a table by rows (every later piece
carries the header rows in its *context*, never in its span), code by lines, a list by items, prose
like recursive text. A heading and a list's lead-in paragraph are glued to what follows them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.context import MAX_CONTEXT_TOKENS, ContextScope, clip_context
from pipeline.chunkers.pack import pack, pieces_of
from pipeline.chunkers.spans import Fits
from pipeline.chunkers.view import SectionView
from pipeline.model import Document, Section, Span, strip_span

Block = tuple[int, int, str]  # start, end, kind

_BLANK = re.compile(r"\n[ \t]*\n")
_ITEM = r"[ \t]*(?:[-*+]|\d{1,9}[.)])[ \t]+\S"
_LIST_ITEM = re.compile(_ITEM)  # at a position
_LIST_ITEMS = re.compile("^" + _ITEM, re.M)  # every item line
_ATX = re.compile(r"[ \t]{0,3}#{1,6}(?:[ \t]|$)")
_SETEXT = re.compile(r"[ \t]{0,3}(?:=+|-+)[ \t]*$")
_DELIM_ROW = re.compile(r"[ \t]*\|?[ \t]*:?-+:?[ \t]*(?:\|[ \t]*:?-+:?[ \t]*)*\|?[ \t]*")


def line_spans(text: str, a: int, b: int) -> list[Span]:
    """Each line of [a, b) without its newline."""
    out, pos = [], a
    while pos < b:
        nl = text.find("\n", pos, b)
        end = b if nl < 0 else nl
        out.append((pos, end))
        pos = end + 1
    return out


def first_lines(text: str, a: int, b: int, n: int = 2) -> list[Span]:
    """The first `n` lines of [a, b): what a heading or table header test needs, without splitting it all."""
    out, pos = [], a
    while pos < b and len(out) < n:
        nl = text.find("\n", pos, b)
        end = b if nl < 0 else nl
        out.append((pos, end))
        pos = end + 1
    return out


def paragraphs(text: str, a: int, b: int) -> list[Span]:
    """Stripped non-empty runs of [a, b) between blank lines."""
    bounds = [a, *(m.end() for m in _BLANK.finditer(text, a, b)), b]
    out = [strip_span(text, x, y) for x, y in zip(bounds, bounds[1:], strict=False)]
    return [(x, y) for x, y in out if y > x]


def heading_end(text: str, section: Section) -> int | None:
    """End of the heading line(s) a heading section starts with (ATX, or setext's two lines)."""
    if section.kind != "heading":
        return None
    lines = first_lines(text, section.start, section.end)
    if not lines:
        return None
    if _ATX.match(text, lines[0][0], lines[0][1]) is None and len(lines) > 1:
        x, y = lines[1]
        if _SETEXT.fullmatch(text, x, y):
            return y
    return lines[0][1]


def table_header_end(text: str, a: int, b: int) -> int | None:
    """End of a markdown table's header and delimiter rows, or None if [a, b) is no table."""
    lines = first_lines(text, a, b)
    if len(lines) >= 2 and "|" in text[lines[0][0] : lines[0][1]] and _DELIM_ROW.fullmatch(text, *lines[1]):
        return lines[1][1]
    return None


def atomic_kind(text: str, a: int, b: int) -> str:
    """What an atomic range holds: table, fence, html or code."""
    if table_header_end(text, a, b) is not None:
        return "table"
    head = text[a : a + 4].lstrip()
    if head.startswith(("```", "~~~")):
        return "fence"
    if head.startswith("<"):
        return "html"
    return "code"


@dataclass(frozen=True, slots=True)
class Dialect:
    """How a text marks its structure for the block chunker: markdown's, or the rendering of HTML."""

    #: end of the heading line(s) a section starts with, or None
    heading_end: Callable[[str, Section], int | None]
    #: end of a table's header rows in [a, b), or None if it is no table
    table_header_end: Callable[[str, int, int], int | None]
    #: what an atomic range [a, b) holds: table, fence, html or code
    atomic_kind: Callable[[str, int, int], str]


MARKDOWN = Dialect(heading_end, table_header_end, atomic_kind)


def blocks(dialect: Dialect, text: str, section: Section) -> list[Block]:
    """The section's blocks in order: heading, para, list, and atomic table/fence/code/html."""
    a, b = section.start, section.end
    out: list[Block] = []
    cursor = a
    h_end = dialect.heading_end(text, section)
    if h_end is not None:
        out.append((*strip_span(text, a, h_end), "heading"))
        cursor = h_end
    atomic = sorted((x, y) for x, y in section.atomic if a <= x < y <= b)
    for x, y in [*atomic, (b, b)]:
        x = max(x, cursor)
        for p, q in paragraphs(text, cursor, x):
            kind = "list" if _LIST_ITEM.match(text, p, q) else "para"
            if kind == "list" and out and out[-1][2] == "list" and not text[out[-1][1] : p].strip():
                out[-1] = (out[-1][0], q, "list")  # a loose list (or HTML's <li> blocks) is one list
            else:
                out.append((p, q, kind))
        if y > x:
            out.append((*strip_span(text, x, y), dialect.atomic_kind(text, x, y)))
        cursor = max(cursor, y)
    return [blk for blk in out if blk[1] > blk[0]]


def cut_block(
    view: SectionView, dialect: Dialect, a: int, b: int, kind: str, fits: Fits
) -> tuple[list[Span], list[bool]]:
    """Pieces of one over-budget block, cut where its structure allows, and their glue flags."""
    text = view.text
    if kind == "table":
        header_end = dialect.table_header_end(text, a, b) or a
        units = [(x, y, y <= header_end) for x, y in line_spans(text, a, b)]
    elif kind in ("fence", "code", "html"):
        units = [(x, y, k == 0) for k, (x, y) in enumerate(line_spans(text, a, b))]
    elif kind in ("list", "para") and (starts := [m.start() for m in _LIST_ITEMS.finditer(text, a, b)]):
        bounds = sorted({a, *starts, b})
        pairs = zip(bounds, bounds[1:], strict=False)
        units = [(x, y, k == 0 and x not in starts) for k, (x, y) in enumerate(pairs)]
    else:
        units = [(a, b, False)]
    pieces: list[Span] = []
    glue: list[bool] = []
    for x, y, g in units:
        x, y = strip_span(text, x, y)
        if y <= x:
            continue
        sub = [(x, y)] if fits(x, y) else pieces_of(view, x, y, fits)
        pieces += sub
        glue += [False] * (len(sub) - 1) + [g]
    return pieces or [(a, b)], glue or [False]


def header_for(dialect: Dialect, text: str, section: Section, pos: int) -> str:
    """The header rows of the table that `pos` lies in, past those rows; else ''."""
    for x, y in section.atomic:
        if x < pos < y:
            end = dialect.table_header_end(text, x, y)
            if end is not None and pos >= end:
                return text[x:end].strip()
    return ""


@register
class MarkdownChunker(Chunker):
    """Blocks of a heading section packed up to the budget, structure kept where the budget allows."""

    kind = "markdown"
    #: the heading path (48 word pieces at most, as for every strategy) and a table's header rows
    context_tokens: ClassVar[int] = 96
    #: the context (heading path, a table's header rows) depends only on where a span starts
    context_scope: ClassVar[ContextScope] = "start"
    #: how the text marks headings, tables and atomic ranges
    dialect: ClassVar[Dialect] = MARKDOWN

    def split(self, view: SectionView) -> list[Span]:
        fits, text, dialect = view.fits, view.text, self.dialect
        found = blocks(dialect, text, view.section)
        pieces: list[Span] = []
        glue: list[bool] = []
        groups: list[tuple[int, int]] = []
        for k, (x, y, kind) in enumerate(found):
            nxt = found[k + 1][2] if k + 1 < len(found) else None
            sticky = kind == "heading" or (kind == "para" and nxt == "list")
            if kind in ("list", "para") and _LIST_ITEMS.search(text, x, y):
                # a list is always cut into items, kept together (with its lead-in) as a group
                first = len(pieces)
                while first > 0 and glue[first - 1]:
                    first -= 1
                parts, part_glue = cut_block(view, dialect, x, y, "list", fits)
                groups.append((first, len(pieces) + len(parts) - 1))
            elif fits(x, y) or (kind == "para" and view.fits_whole(x, y)):
                parts, part_glue = [(x, y)], [False]  # a paragraph within `keep_whole` stays whole
            else:
                parts, part_glue = cut_block(view, dialect, x, y, kind, fits)
            part_glue[-1] = part_glue[-1] or sticky
            pieces += parts
            glue += part_glue
        overlap = getattr(self.config, "overlap", 0)
        return pack(view, pieces, fits=fits, glue=glue, groups=groups, overlap_units=overlap)

    # ---------------------------------------------------------------------------------- context

    def metadata_for(self, doc: Document, section: Section, span: Span) -> dict[str, Any]:
        """The heading path as data too, so SQL can filter chunks by it without a join."""
        return {"heading_path": list(section.heading_path)} if section.heading_path else {}

    def context_for(self, doc: Document, section: Section, span: Span) -> str:
        """Heading path (as short as everywhere else), plus a table's header rows below them."""
        if getattr(self.config, "context", "none") == "none":
            return ""
        base = super().context_for(doc, section, span)
        base = clip_context(self.model, MAX_CONTEXT_TOKENS, base) if base else base
        header = header_for(self.dialect, doc.text, section, span[0])
        return f"{base}\n{header}" if base and header else base or header

    def context_varies(self, doc: Document, section: Section) -> bool:
        """Only a table's header rows make one span's context differ from another's in a section."""
        return any(self.dialect.table_header_end(doc.text, x, y) is not None for x, y in section.atomic)
