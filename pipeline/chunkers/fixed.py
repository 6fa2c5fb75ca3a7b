"""Fixed windows of N units with overlap, cut only where a unit starts, so offsets stay exact."""

from __future__ import annotations

from bisect import bisect_right
from itertools import accumulate

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.spans import Fits
from pipeline.chunkers.view import SectionView
from pipeline.model import Span, strip_span
from pipeline.tokens import Counter, TokenStarts


@register
class FixedChunker(Chunker):
    """Token (cl100k / o200k / the model's word pieces), character or word windows: the baseline."""

    kind = "fixed"
    token_starts = True  # tiktoken windows come straight off the span index's tokens

    def split(self, view: SectionView) -> list[Span]:
        text, fits = view.text, view.fits
        found = view.measure.token_starts(view.start, view.end)
        if found is not None:
            bounds, weights = starts_units(found, view.start, view.end)
        else:
            bounds, weights = units(self.counter, text, view.start, view.end)

        def stripped_fits(a: int, b: int) -> bool:
            # judged as stored: without its outer whitespace (" grated" is one token, "grated" two)
            x, y = strip_span(text, a, b)
            return y <= x or fits(x, y)

        return windows(bounds, weights, stripped_fits, self.config.size, self.config.overlap)


def units(unit: Counter, text: str, a: int, b: int) -> tuple[list[int], list[int]]:
    """A partition of [a, b) into units of `unit`: boundaries (n + 1 offsets) and each unit's size."""
    name = unit.name
    if name == "chars":  # every character is a unit: no need to ask the counter
        return list(range(a, b + 1)), [1] * (b - a)
    offsets = unit.encode_offsets(text[a:b])
    if name == "model":  # one unit per distinct word-piece start
        starts = sorted({a + s for s, _ in offsets})
        bounds = [a, *[s for s in starts if s > a], b]
        return bounds, [1] * (len(bounds) - 1)
    return token_units(offsets, a, b)


def token_units(offsets: list[tuple[int, int]], a: int, b: int) -> tuple[list[int], list[int]]:
    """Tokens grouped into units that each start on a character, weighted by how many tokens they hold.

    A token that starts inside a character (a byte-level token holding part of one) or where the unit
    before it starts stays in that unit; text before the first token belongs to the first unit.
    """
    bounds, weights = [a], []
    prev_end = a
    for s, e in offsets:
        s += a
        if weights and bounds[-1] < s and prev_end <= s:
            bounds.append(s)
            weights.append(0)
        if not weights:
            weights.append(0)
        weights[-1] += 1
        prev_end = a + e
    bounds.append(b)
    if not weights:
        weights.append(0)
    return bounds, weights


def starts_units(starts: TokenStarts, a: int, b: int) -> tuple[list[int], list[int]]:
    """`token_units` of [a, b) from where its tokens start (`tokens.TokenStarts`): the same units, whole
    tokens that each start on a character, without decoding a token in Python."""
    import numpy as np

    n = len(starts)
    if n == 0:
        return [a, b], [0]
    new = np.flatnonzero(starts[1:] >= 0) + 1  # the tokens that begin a unit (the first always does)
    bounds = [a, *starts[new].tolist(), b]
    weights = np.diff(np.concatenate(([0], new, [n]))).tolist()
    return bounds, weights


def windows(bounds: list[int], weights: list[int], fits: Fits, size: int, overlap: int) -> list[Span]:
    """Greedy windows of whole units up to `size`, shrunk until `fits`, sharing up to `overlap` units."""
    n = len(weights)
    cum = [0, *accumulate(weights)]
    out: list[Span] = []
    i = 0
    while i < n:
        j = max(bisect_right(cum, cum[i] + size, i, n + 1) - 1, i + 1)  # the most units within size
        if not fits(bounds[i], bounds[j]):  # the real count or the model limit says less
            lo, hi = i + 1, j - 1
            while lo < hi:
                mid = (lo + hi + 1) // 2
                if fits(bounds[i], bounds[mid]):
                    lo = mid
                else:
                    hi = mid - 1
            j = lo
        out.append((bounds[i], bounds[j]))
        if j >= n:
            break
        k, back = j, 0
        while k - 1 > i and back + weights[k - 1] <= overlap:
            k -= 1
            back += weights[k]
        i = k
    return out
