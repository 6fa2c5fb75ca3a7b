"""Per-page text of a PDF: runs from PDFium's text layer, and running headers, footers and page numbers."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pipeline.parse.pdf_layout import CELL_GAP, Seg, median_size


@dataclass
class PageText:
    """A page's runs and size; `scanned`: no text layer but images (a case for OCR)."""

    number: int  # 1-based
    width: float
    height: float
    segs: list[Seg] = field(default_factory=list)
    scanned: bool = False
    ocr_confidence: float | None = None


def text_runs(textpage: Any) -> list[Seg]:
    """Runs of PDFium's text layer: its own lines, split further at wide gaps (cells, columns)."""
    import pypdfium2.raw as pdfium_c

    raw = textpage.raw
    n = pdfium_c.FPDFText_CountChars(raw)
    if n <= 0:
        return []
    text = textpage.get_text_range(0, n)
    if len(text) != n:  # surrogate pairs: fall back to one code unit per index
        text = "".join(chr(pdfium_c.FPDFText_GetUnicode(raw, i)) for i in range(n))
    box = pdfium_c.FS_RECTF()
    out: list[Seg] = []
    chars: list[str] = []
    bottoms: list[float] = []
    tops: list[float] = []
    x0 = x1 = 0.0
    last = (0.0, 0.0, 0.0)  # right, bottom, top of the previous glyph

    def close() -> None:
        run = "".join(chars).strip()
        if run:  # the median glyph box: a tall math symbol or an accent does not stretch the line
            y0, y1 = sorted(bottoms)[len(bottoms) // 2], sorted(tops)[len(tops) // 2]
            out.append(Seg(x0, y0, x1, y1, run, y1 - y0))
        chars.clear()
        bottoms.clear()
        tops.clear()

    for i, ch in enumerate(text):
        if ch in "\r\n":
            close()
            continue
        if ch.isspace():
            if chars:
                chars.append(" ")
            continue
        pdfium_c.FPDFText_GetLooseCharBox(raw, i, box)
        left, bottom, right, top = box.left, box.bottom, box.right, box.top
        h = max(top - bottom, 0.1)
        if chars:  # plain comparisons: this loop runs once per glyph
            lb, lt = last[1], last[2]
            overlap = (top if top < lt else lt) - (bottom if bottom > lb else lb)
            gap = left - last[0]
            if overlap < 0.5 * (h if h < lt - lb else lt - lb) or gap > CELL_GAP * h or gap < -2 * h:
                close()
        if not chars:
            x0, x1 = left, right
        else:
            if left < x0:
                x0 = left
            if right > x1:
                x1 = right
        chars.append(ch)
        bottoms.append(bottom)
        tops.append(top)
        last = (right, bottom, top)
    close()
    return out


# ------------------------------------------------------------------------ running headers and footers

_PAGE_NUMBER = re.compile(
    r"^[\W_]*(?:(?:page|seite|p\.?|s\.?)\s*)?(?:\d{1,5}|[ivxlcdm]{1,8})(?:\s*(?:/|of|von)\s*\d{1,5})?[\W_]*$",
    re.I,
)


def _band(segs: list[Seg], top: bool) -> list[int]:
    """Indices of the topmost (or bottommost) line of a page, if a gap sets it apart from the rest."""
    if len(segs) < 2:
        return []
    edge = max(segs, key=lambda s: s.y1) if top else min(segs, key=lambda s: s.y0)
    band = [i for i, s in enumerate(segs) if edge.y0 <= s.cy <= edge.y1]
    inside = set(band)
    rest = [s for i, s in enumerate(segs) if i not in inside]
    if not rest:
        return []
    h = max(segs[i].y1 - segs[i].y0 for i in band)
    gap = (
        (min(segs[i].y0 for i in band) - max(s.y1 for s in rest))
        if top
        else (min(s.y0 for s in rest) - max(segs[i].y1 for i in band))
    )
    return band if gap >= 0.3 * h else []


def _key(text: str) -> str:
    return re.sub(r"\d+", "#", " ".join(text.lower().split()))


def drop_running(pages: list[PageText]) -> int:
    """Remove headers and footers that repeat across pages, and lone page numbers; returns how many."""
    bands: list[tuple[PageText, list[int], str]] = []
    body = body_size(pages) * 1.05  # running heads are set no larger than the text (chapter titles are)
    for page in pages:
        for top in (True, False):
            idx = _band(page.segs, top)
            if idx and max(page.segs[i].size for i in idx) <= body:
                text = " ".join(page.segs[i].text for i in sorted(idx, key=lambda i: page.segs[i].x0))
                bands.append((page, idx, ("T" if top else "B") + text))
    n = len(pages)
    need = max(3, int(0.3 * n))
    keys = Counter(t[0] + _key(t[1:]) for _, _, t in bands)
    # a running header names the page number: printed number - page index is the same on many pages
    offsets = Counter(
        (t[0], int(m) - p.number) for p, _, t in bands for m in set(re.findall(r"\b\d{1,5}\b", t[1:]))
    )
    gone: dict[int, set[int]] = {}  # page number -> indices of runs to drop
    for page, idx, t in bands:
        nums = {int(m) - page.number for m in re.findall(r"\b\d{1,5}\b", t[1:])}
        if (
            keys[t[0] + _key(t[1:])] >= need
            or any(offsets[(t[0], d)] >= need for d in nums)
            or _PAGE_NUMBER.match(t[1:])
        ):
            gone.setdefault(page.number, set()).update(idx)
    for page in pages:
        if page.number in gone:
            page.segs = [s for i, s in enumerate(page.segs) if i not in gone[page.number]]
    return sum(len(v) for v in gone.values())


def body_size(pages: list[PageText]) -> float:
    """The document's body text height: headings are runs clearly larger than this."""
    return median_size([s for p in pages for s in p.segs])
