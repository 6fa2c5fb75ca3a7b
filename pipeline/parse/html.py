"""HTML: the visible text of a page with boilerplate dropped; h1-h6 make sections, pre and table atomic."""

from __future__ import annotations

import re

from pipeline.model import Section, Span
from pipeline.parse import Parsed, parser
from pipeline.parse.sections import Head, heading_sections

_DROP_TAGS = [
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "footer",
    "iframe",
    "svg",
    "form",
    "aside",
    "button",
]
_BOILERPLATE = re.compile(
    r"\b(cookie|consent|sidebar|breadcrumb|navbar|site-header|site-footer|advert|banner)\b", re.I
)
_BLOCK = {
    "p", "div", "section", "article", "main", "header", "blockquote", "ul", "ol", "li", "dl", "dt", "dd",
    "figure", "figcaption", "details", "summary", "address", "hr", "body", "html",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


def parse_html(html: str) -> tuple[str, list[Section], str]:
    """Visible text of an HTML page with boilerplate dropped; h1-h6 make sections, pre/table atomic."""
    from bs4 import BeautifulSoup, Comment, Declaration, Doctype, NavigableString, ProcessingInstruction, Tag

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for t in soup(_DROP_TAGS + ["head"]):
        t.decompose()
    for c in soup.find_all(string=lambda s: isinstance(s, Comment)):
        c.extract()
    for t in soup.find_all(True):
        if t.attrs is None or t.decomposed:
            continue
        marker = " ".join(t.get("class", []) or []) + " " + (t.get("id") or "") + " " + (t.get("role") or "")
        if t.name not in ("body", "html", "main", "article") and _BOILERPLATE.search(marker):
            t.decompose()

    out: list[str] = []
    pos = 0
    heads: list[Head] = []
    atomic: list[Span] = []

    def emit_block(s: str) -> Span | None:
        nonlocal pos
        s = s.strip("\n")
        if not s.strip():
            return None
        if out:
            out.append("\n\n")
            pos += 2
        start = pos
        out.append(s)
        pos += len(s)
        return start, pos

    inline: list[str] = []

    def flush() -> None:
        if inline:
            txt = re.sub(r"[ \t\r\f\v]+", " ", "".join(inline))
            txt = "\n".join(line.strip() for line in txt.split("\n"))
            emit_block(txt.strip())
            inline.clear()

    def walk(root: Tag) -> None:
        """Depth first with an explicit stack (iterators of children, and a flush to run when a block
        ends), so a page nested 10,000 deep is read like any other, not a RecursionError."""
        stack: list = [iter(root.children)]
        while stack:
            top = stack[-1]
            if callable(top):
                stack.pop()
                top()
                continue
            child = next(top, None)
            if child is None:
                stack.pop()
                continue
            if isinstance(child, (Doctype, Declaration, ProcessingInstruction)):
                continue
            if isinstance(child, NavigableString):
                inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _HEADINGS:
                flush()
                txt = child.get_text(" ", strip=True)
                span = emit_block(txt)
                if span:
                    heads.append((span[0], _HEADINGS[name], txt))
            elif name == "pre":
                flush()
                span = emit_block(child.get_text())
                if span:
                    atomic.append(span)
            elif name == "table":
                flush()
                rows = []
                for tr in child.find_all("tr"):
                    cells = [c.get_text(" ", strip=True) for c in tr.find_all(["th", "td"])]
                    if any(cells):
                        rows.append(" | ".join(cells))
                span = emit_block("\n".join(rows))
                if span:
                    atomic.append(span)
            elif name == "br":
                inline.append("\n")
            elif name == "li":
                flush()
                inline.append("- ")
                stack += [flush, iter(child.children)]
            elif name in _BLOCK:
                flush()
                stack += [flush, iter(child.children)]
            else:
                stack.append(iter(child.children))

    walk(soup)
    flush()
    text = "".join(out)
    sections = heading_sections(text, heads, atomic)
    if not title:
        title = next((t for _, lvl, t in heads if lvl == 1), "")
    return text, sections, title


@parser("html", mime="text/html")
def _parse(text: str, *, language: str | None, filename: str) -> Parsed:
    """The registered form of parse_html: the page is replaced by its visible text."""
    visible, sections, title = parse_html(text)
    return Parsed(visible, sections, title)
