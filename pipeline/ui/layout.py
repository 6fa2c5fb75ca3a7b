"""How a window of a document's text is drawn: cut at every chunk boundary, each piece knowing its chunks.

Chunks may overlap (an overlap setting), so they cannot be nested elements: the text is cut into segments
at every chunk start and end (and at the ends of a highlighted span), and each segment lists the chunks
covering it. A chunk is then exactly the run of segments that carry its id, and its text their join.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Chunks per page of the document view: a 5 MB document is drawn a window at a time.
CHUNKS_PER_PAGE = 300
#: Most characters drawn in one window (a document with no chunks, or huge gaps between them).
MAX_WINDOW = 400_000


@dataclass(frozen=True)
class Segment:
    start: int
    end: int
    text: str
    chunks: tuple[int, ...]  # ids of the chunks covering it, in start order
    highlight: bool = False


def segments(
    text: str, lo: int, chunks: list[tuple[int, int, int]], *, highlight: tuple[int, int] | None = None
) -> list[Segment]:
    """Cut `text` (the document's characters from offset `lo`) at the boundaries of `chunks`
    ((id, start, end) in document offsets) and of `highlight`, one sweep over the chunks in start order."""
    hi = lo + len(text)

    def clip(x: int) -> int:
        return min(max(x, lo), hi)

    points = {lo, hi}
    for _, s, e in chunks:
        points.update((clip(s), clip(e)))
    if highlight:
        points.update((clip(highlight[0]), clip(highlight[1])))
    pts = sorted(points)
    order = sorted(chunks, key=lambda c: (c[1], c[0]))
    out: list[Segment] = []
    active: list[tuple[int, int, int]] = []
    i = 0
    for a, b in zip(pts, pts[1:], strict=False):
        while i < len(order) and order[i][1] <= a:
            active.append(order[i])
            i += 1
        active = [c for c in active if c[2] > a]  # every end is a cut point: ending after a means covering [a, b)
        hl = bool(highlight and highlight[0] <= a and b <= highlight[1])
        out.append(Segment(a, b, text[a - lo : b - lo], tuple(c[0] for c in active), hl))
    return out


def window(page: int, n_chunks: int, doc_chars: int, page_chunks: list[tuple[int, int, int]]) -> tuple[int, int]:
    """The characters a page draws: from its first chunk's start (0 on the first page) to its last chunk's
    end (the text's end on the last page), at most MAX_WINDOW of them."""
    last_page = max(0, (n_chunks - 1) // CHUNKS_PER_PAGE)
    lo = 0 if page == 0 or not page_chunks else min(c[1] for c in page_chunks)
    hi = doc_chars if page >= last_page or not page_chunks else max(c[2] for c in page_chunks)
    return lo, min(hi, lo + MAX_WINDOW)


def pages(n_chunks: int) -> int:
    """Pages of the document view (at least one)."""
    return max(1, -(-n_chunks // CHUNKS_PER_PAGE))
