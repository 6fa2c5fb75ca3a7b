"""Markdown: ATX/setext headings make the section tree (plain text's headings where there are none);
fences, tables and HTML blocks are atomic."""

from __future__ import annotations

from bisect import bisect_right
from functools import cache
from typing import TYPE_CHECKING

from pipeline.model import Section, Span
from pipeline.parse import Parsed, parser
from pipeline.parse.sections import Head, Lines, heading_sections

if TYPE_CHECKING:
    from markdown_it import MarkdownIt

#: A markdown document's first H1 is its title only if it starts within this many characters.
TITLE_WITHIN = 1000


def parse_markdown(text: str) -> tuple[list[Section], str]:
    """Sections from ATX/setext headings (markdown-it-py); fences and tables recorded as atomic."""
    tokens = _block_parser().parse(text)
    lines = Lines(text)
    heads: list[Head] = []
    atomic: list[Span] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map and tok.level == 0:
            # a setext heading can underline a whole paragraph: one line of at most 200 characters
            title = " ".join(tokens[i + 1].content.split())[:200] if i + 1 < len(tokens) else ""
            heads.append((lines.offset(tok.map[0]), int(tok.tag[1]), title))
        elif tok.type in ("fence", "code_block", "table_open", "html_block") and tok.map:
            atomic.append((lines.offset(tok.map[0]), _rstrip_to(text, lines.offset(tok.map[1]))))
    if not heads:  # no markdown heading: plain text saved as .md, its headings are plain text's
        from pipeline.parse.text import headings

        title, found = headings(text)
        starts = [a for a, _ in atomic]  # in document order, never overlapping
        heads = [h for h in found if (i := bisect_right(starts, h[0]) - 1) < 0 or h[0] >= atomic[i][1]]
        return heading_sections(text, heads, atomic), title if heads and heads[0][2] == title else ""
    sections = heading_sections(text, heads, atomic)
    # The title is an H1 that is the first heading, near the top (a badge line may precede it). An H1 deep in
    # the text (in a file that is not really markdown, a paragraph underlined by a stray "=") would otherwise
    # be embedded with every chunk of the document.
    doc_title = heads[0][2] if heads and heads[0][1] == 1 and heads[0][0] <= TITLE_WITHIN else ""
    return sections, doc_title


@parser("markdown", mime="text/markdown", version=3)  # 2: plain-text headings without markdown ones; 3: in other languages
def _parse(text: str, *, language: str | None, filename: str) -> Parsed:
    """The registered form of parse_markdown: the text is kept as it is."""
    sections, title = parse_markdown(text)
    return Parsed(text, sections, title)


@cache
def _block_parser() -> MarkdownIt:
    """CommonMark with tables, block structure only: the inline rules (links, emphasis: two thirds of the parse)
    are off, since only block tokens and a heading's raw inline text (set by the block parser) are read."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").disable(["inline", "text_join"])


def _rstrip_to(text: str, end: int) -> int:
    """Move an end offset back over trailing newlines."""
    while end > 0 and text[end - 1] == "\n":
        end -= 1
    return end
