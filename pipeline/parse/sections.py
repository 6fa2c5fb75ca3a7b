"""What every parser shares: line offsets, the heading tree, parent links, content-defined sub-sections."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from pipeline.model import Section, Span
from pipeline.tokens import counter

#: A heading as a parser finds it: (character offset, level 1-6, title).
Head = tuple[int, int, str]


class Lines:
    """Line number -> character offset (parsers report lines, sections need offsets)."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.n = len(text)

    def offset(self, line: int) -> int:
        """Offset of the start of `line`; past the last line, the end of the text."""
        return self.starts[line] if line < len(self.starts) else self.n


def heading_sections(text: str, heads: Sequence[Head], atomic: Sequence[Span]) -> list[Section]:
    """A preamble before the first heading, then one section per heading up to the next, with its path."""
    sections: list[Section] = []
    first = heads[0][0] if heads else len(text)
    if first > 0:
        sections.append(Section(0, first, 0, (), "preamble"))
    path: list[tuple[int, str]] = []  # (level, title) of the enclosing headings
    for j, (off, level, title) in enumerate(heads):
        end = heads[j + 1][0] if j + 1 < len(heads) else len(text)
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        sections.append(Section(off, end, level, tuple(t for _, t in path), "heading"))
    for s in sections:
        s.atomic = [(a, b) for a, b in atomic if a >= s.start and b <= s.end]
    return sections


def link_parents(sections: list[Section]) -> None:
    """Parent = the nearest earlier section with a shorter heading path that prefixes this one."""
    stack: list[int] = []
    for i, s in enumerate(sections):
        while stack and not (
            len(sections[stack[-1]].heading_path) < len(s.heading_path)
            and s.heading_path[: len(sections[stack[-1]].heading_path)] == sections[stack[-1]].heading_path
        ):
            stack.pop()
        s.parent = stack[-1] if stack else None
        if s.kind != "part":
            stack.append(i)


# ------------------------------------------------------------------------- content-defined sub-sections

_PARA = re.compile(r"\n[ \t]*\n+")


def split_large_sections(text: str, sections: list[Section], *, max_tokens: int) -> list[Section]:
    """Cut sections over max_tokens at content-defined paragraph boundaries (robust to inserts above)."""
    tok = counter("cl100k_base")
    out: list[Section] = []
    for s in sections:
        body = text[s.start : s.end]
        if len(body) < max_tokens * 2 or tok.count(body) <= max_tokens:
            out.append(s)
            continue
        cuts = content_defined_cuts(text, s.start, s.end, s.atomic, max_tokens=max_tokens)
        bounds = [s.start, *cuts, s.end]
        for k, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            if b <= a:
                continue
            out.append(
                Section(
                    a,
                    b,
                    s.level,
                    s.heading_path,
                    s.kind if k == 0 else "part",
                    None,
                    [(x, y) for x, y in s.atomic if x >= a and y <= b],
                )
            )
    return out


def _unit_bounds(text: str, start: int, end: int, atomic: list[Span], cap: int) -> list[int]:
    """Candidate cut offsets: paragraph ends outside atomic blocks; long paragraphs at lines/sentences."""

    def inside(pos: int) -> bool:
        return any(a < pos < b for a, b in atomic)

    cuts = [m.end() for m in _PARA.finditer(text, start, end) if not inside(m.end())]
    bounds = [start, *cuts, end]
    out: list[int] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b - a > cap * 4:
            for pat in (r"\n", r"[.!?。！？]\s+", r"\s+"):
                sub = [m.end() for m in re.finditer(pat, text[a:b]) if not inside(a + m.end())]
                if sub:
                    out.extend(a + x for x in sub if a + x < b)
                    break
        out.append(b)
    return [c for c in out if start < c < end]


def content_defined_cuts(
    text: str, start: int, end: int, atomic: list[Span], *, max_tokens: int
) -> list[int]:
    """Cut where a unit's own hash says so (once past a minimum), or where the maximum forces it."""
    tok = counter("cl100k_base")
    cands = _unit_bounds(text, start, end, atomic, max_tokens)
    bounds = [start, *cands, end]
    units = [(a, b, tok.count(text[a:b])) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    min_tokens = max_tokens // 4
    cuts: list[int] = []
    acc = 0
    for i, (a, b, n) in enumerate(units[:-1]):
        acc += n
        nxt = units[i + 1][2]
        h = zlib.crc32(text[a:b].strip().encode("utf-8"))
        if (acc >= min_tokens and h % 4 == 0) or acc + nxt > max_tokens:
            cuts.append(b)
            acc = 0
    return cuts
