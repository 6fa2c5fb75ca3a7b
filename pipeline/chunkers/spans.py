"""Span mechanics every strategy shares: strip, find cut points, cut recursively until each piece fits.

Everything here works on absolute offsets into one text and never copies it, so a chunk's offsets are
exact by construction; what "fits" means (budget, model limit, context) is the caller's `Fits`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pipeline.model import Span

__all__ = ["Fits", "Span", "recursive_spans", "split_points"]

#: Does text[a:b] fit? Unit budget and model limit, as the chunker judges it.
Fits = Callable[[int, int], bool]


def _inside(pos: int, atomic: Sequence[Span]) -> bool:
    """Whether a cut at pos would fall strictly inside an atomic block (a fence, a table)."""
    return any(x < pos < y for x, y in atomic)


def split_points(text: str, a: int, b: int, sep: str, atomic: Sequence[Span]) -> list[int]:
    """Offsets just after each occurrence of sep in [a, b), outside atomic blocks."""
    if sep == "":
        return []
    pts = []
    n = len(sep)
    i = text.find(sep, a, b)
    if not atomic:
        while i >= 0:
            p = i + n
            if p < b:
                pts.append(p)
            i = text.find(sep, p, b)
        return pts
    while i >= 0:
        p = i + n
        if p < b and not _inside(p, atomic):
            pts.append(p)
        i = text.find(sep, p, b)
    return pts


def recursive_spans(
    text: str,
    a: int,
    b: int,
    fits: Fits,
    separators: Sequence[str],
    atomic: Sequence[Span] = (),
) -> list[Span]:
    """Contiguous pieces of [a, b) that each fit, cut at the coarsest separator that works."""
    if b <= a:
        return []
    if fits(a, b):
        return [(a, b)]
    # Inside a single atomic block that is too big by itself, its boundaries no longer bind.
    inner_atomic = [] if any(x <= a and b <= y for x, y in atomic) else atomic
    for k, sep in enumerate(separators):
        if sep == "":
            return _hard_split(text, a, b, fits)
        pts = split_points(text, a, b, sep, inner_atomic)
        if not pts:
            continue
        bounds = [a, *pts, b]
        out: list[Span] = []
        rest = separators[k + 1 :]
        for x, y in zip(bounds, bounds[1:], strict=False):
            if fits(x, y):  # what the call below would return first (the points rise: y > x)
                out.append((x, y))
            else:
                out.extend(recursive_spans(text, x, y, fits, rest, inner_atomic))
        return out
    if inner_atomic:  # only atomic-protected separators were left: split the block itself
        return recursive_spans(text, a, b, fits, separators, [])
    return _hard_split(text, a, b, fits)


def _hard_split(text: str, a: int, b: int, fits: Fits) -> list[Span]:
    """Largest prefixes that fit (binary search), for text with no separator left."""
    out = []
    while a < b:
        lo, hi = a + 1, b
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(a, mid):
                lo = mid
            else:
                hi = mid - 1
        out.append((a, lo))
        a = lo
    return out
