"""PDF page layout, library-free: text runs to lines, paragraphs and tables (columns: `pdf_columns`).

Input is a column's text runs (`Seg`: a box in PDF points, y up, and its text), from PDFium's text layer
or from OCR alike. Lines join into paragraphs (end-of-line hyphens repaired); rows of separate cells
become a markdown table, kept whole by the chunker where it fits.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field


@dataclass(slots=True)
class Seg:
    """A run of text on one line: its box (PDF points, y up: y1 is the top), text and glyph height."""

    x0: float
    y0: float
    x1: float
    y1: float
    text: str
    size: float

    @property
    def cy(self) -> float:
        return (self.y0 + self.y1) / 2


#: A table cell candidate: (left, right, text).
Cell = tuple[float, float, str]


@dataclass
class Line:
    """Runs that share a baseline, left to right; `cells` are runs split by wide gaps (table cells)."""

    segs: list[Seg]
    cells: list[Cell] = field(default_factory=list)

    @property
    def x0(self) -> float:
        return min(s.x0 for s in self.segs)

    @property
    def x1(self) -> float:
        return max(s.x1 for s in self.segs)

    @property
    def top(self) -> float:
        return max(s.y1 for s in self.segs)

    @property
    def size(self) -> float:
        return max(s.size for s in self.segs)

    @property
    def text(self) -> str:
        return " ".join(c[2] for c in self.cells)


@dataclass
class Block:
    """A paragraph, heading candidate or table of one page, in reading order."""

    kind: str  # "para" | "table"
    text: str
    top: float
    size: float
    lines: int = 1


#: Gaps wider than this many glyph heights separate table cells (or columns).
CELL_GAP = 1.0
_BULLET = re.compile(r"^[•◦▪▫●○■□·‣⁃–]\s*")
_ITEM = re.compile(r"(?:\(?\d{1,3}[.)]|\([ivx]{1,4}\)|\(?[a-h]\))\s")  # 1. 2) (iii) a)
_HYPHEN = ("-", "\x02", "\u00ad", "\ufffe")  # PDFium marks a soft hyphen at a line end as U+FFFE


def median_size(segs: list[Seg]) -> float:
    """The typical glyph height, weighted by characters (body text outweighs headings)."""
    sizes = [s.size for s in segs for _ in range(min(len(s.text), 200))]
    return statistics.median(sizes) if sizes else 10.0


# --------------------------------------------------------------------------------------- lines


def group_lines(segs: list[Seg]) -> list[Line]:
    """Runs whose vertical centres fall within each other's boxes, top-down, each left to right."""
    lines: list[list[Seg]] = []
    for s in sorted(segs, key=lambda s: -s.cy):
        if lines:
            cur = lines[-1]
            top, bottom = max(x.y1 for x in cur), min(x.y0 for x in cur)
            cy = (top + bottom) / 2
            stacked = any(
                min(s.x1, x.x1) - max(s.x0, x.x0) > 0.5 * min(s.x1 - s.x0, x.x1 - x.x0) for x in cur
            )
            if (bottom <= s.cy <= top or s.y0 <= cy <= s.y1) and not stacked:
                cur.append(s)
                continue
        lines.append([s])
    out = []
    for ln in lines:
        ln.sort(key=lambda s: s.x0)
        out.append(Line(ln, _cells(ln)))
    return out


def _cells(segs: list[Seg]) -> list[Cell]:
    """The line's text, split where a gap is wide enough to separate table cells."""
    cells: list[Cell] = []
    cur, start = "", 0.0
    prev: Seg | None = None
    for s in segs:
        text = s.text.strip()
        if not text:
            continue
        if prev is not None:
            gap = s.x0 - prev.x1
            if gap > CELL_GAP * max(prev.size, s.size):
                cells.append((start, prev.x1, cur))
                cur = ""
            elif gap > 0.12 * s.size and cur and not cur.endswith(" "):
                cur += " "
        if not cur:
            start = s.x0
        cur += text
        prev = s
    if cur and prev is not None:
        cells.append((start, prev.x1, cur))
    return cells


def join_lines(a: str, b: str) -> str:
    """Two lines of a paragraph as one: a hyphen at the end of a word followed by lowercase goes."""
    if a.endswith(_HYPHEN) and len(a) > 1 and a[-2].isalpha() and b[:1].isalpha():
        return a[:-1] + b if b[0].islower() else a[:-1] + "-" + b
    return f"{a} {b}"


# ---------------------------------------------------------------------------------- paragraphs


def region_blocks(lines: list[Line]) -> list[Block]:
    """Paragraphs and tables of one column or zone, top-down."""
    lines = [ln for ln in lines if ln.cells]
    if not lines:
        return []
    pitches = [a.top - b.top for a, b in zip(lines, lines[1:], strict=False) if a.top > b.top]
    pitch = statistics.median(pitches) if pitches else 0.0
    ends = sorted(ln.x1 for ln in lines)
    right = ends[int(0.9 * (len(ends) - 1))]  # the text's right edge; an overlong line does not move it
    left = min(ln.x0 for ln in lines)
    out: list[Block] = []
    i = 0
    while i < len(lines):
        j = _table_end(lines, i)
        if j > i:
            out.append(_table(lines[i:j]))
            i = j
            continue
        para = [lines[i]]
        i += 1
        while (
            i < len(lines)
            and not _breaks(para[-1], lines[i], pitch, left, right)
            and _table_end(lines, i) == i
        ):
            para.append(lines[i])
            i += 1
        out.append(_paragraph(para))
    return out


def _table_end(lines: list[Line], i: int) -> int:
    """End of a table starting at line i (i if none): two or more rows of cells in two or more columns."""
    j = i
    while j < len(lines) and len(lines[j].cells) >= 2:
        j += 1
    return j if j - i >= 2 and len(_columns(lines[i:j])) >= 2 else i


def _columns(rows: list[Line]) -> list[tuple[float, float]]:
    """Table columns: the cells' horizontal extents merged where they overlap (a wrapped word does not)."""
    cols: list[list[float]] = []
    for x0, x1, _ in sorted(c for ln in rows for c in ln.cells):
        if cols and x0 <= cols[-1][1]:
            cols[-1][1] = max(cols[-1][1], x1)
        else:
            cols.append([x0, x1])
    return [(a, b) for a, b in cols]


def _breaks(p: Line, ln: Line, pitch: float, left: float, right: float) -> bool:
    """Whether `ln` starts a new paragraph after `p`: a wider gap, a size change, an indent, a bullet."""
    size = max(p.size, ln.size)
    if abs(p.size - ln.size) > 0.15 * size:
        return True
    step = p.top - ln.top
    if step <= 0 or (pitch and step > 1.35 * pitch) or step > 2.2 * size:
        return True
    if _BULLET.match(ln.text) or (_ITEM.match(ln.text) and p.x1 < right - 2 * size):
        return True
    room = right - p.x1
    if room < 2.5 * size:
        return False
    text = ln.text.strip()
    first = text.split(" ", 1)[0]
    per_char = (ln.x1 - ln.x0) / max(len(text), 1)
    if first and not p.text.endswith(_HYPHEN) and room > (len(first) + 2) * per_char:
        return True  # the next line's first word would have fitted: the line was ended on purpose
    indented = ln.x0 > left + 0.8 * size and ln.x0 > p.x0 + 0.8 * size
    return indented or p.text.rstrip().endswith((".", "!", "?", ":"))


def _paragraph(lines: list[Line]) -> Block:
    text = lines[0].text.strip()
    for ln in lines[1:]:
        text = join_lines(text, ln.text.strip())
    text = _BULLET.sub("- ", text)
    return Block("para", text, lines[0].top, statistics.median(ln.size for ln in lines), len(lines))


def _table(rows: list[Line]) -> Block:
    """Rows of cells as a markdown table, each cell in the column its extent falls in."""
    cols = _columns(rows)
    grid = []
    for ln in rows:
        row = [""] * len(cols)
        for x0, _x1, text in ln.cells:
            k = next(k for k, (a, b) in enumerate(cols) if a <= x0 <= b)
            row[k] = f"{row[k]} {text}".strip()
        grid.append([c.replace("|", "\\|") for c in row])
    md = ["| " + " | ".join(grid[0]) + " |", "|" + " --- |" * len(cols)]
    md += ["| " + " | ".join(r) + " |" for r in grid[1:]]
    return Block("table", "\n".join(md), rows[0].top, rows[0].size, len(rows))
