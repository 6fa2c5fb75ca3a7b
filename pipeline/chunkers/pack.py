"""Packing and budget enforcement: pieces joined greedily into chunks that fit, and chunks cut until they do.

Both work on a `SectionView` and its `Measure`; a strategy decides where pieces start and end, this module
how many of them make a chunk, and the base runs `enforce` on whatever a strategy returns.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import TypedDict, Unpack

from pipeline.chunkers.spans import Fits, recursive_spans
from pipeline.chunkers.view import SectionView
from pipeline.config import DEFAULT_SEPARATORS
from pipeline.model import Span, strip_span


class PackOptions(TypedDict, total=False):
    """How `pack` joins pieces.

    `fits` replaces the section's own budget check. `overlap_units` / `overlap_items` repeat the end of a
    chunk at the start of the next, in units or in pieces. `glue[k]` asks not to end a chunk after piece k
    (a heading or a list's lead-in) when the chunk can end earlier instead. `max_items` and `overlap_items`
    count pieces, or the distinct `item_ids` of pieces (a chat turn cut into several pieces is still one
    turn). A group (first, last) of pieces (a lead-in and its list items) starts a new chunk rather than
    being cut, when it fits in one chunk but not in what is left of this one.
    """

    fits: Fits | None
    overlap_units: int
    overlap_items: int
    max_items: int | None
    item_ids: Sequence[int] | None
    glue: Sequence[bool] | None
    groups: Sequence[tuple[int, int]]


def pieces_of(view: SectionView, a: int, b: int, fits: Fits) -> list[Span]:
    """Contiguous pieces of [a, b) that each fit, cut at the coarsest of the view's separators."""
    return recursive_spans(view.text, a, b, fits, view.separators, view.atomic)


def pack(view: SectionView, pieces: Sequence[Span], **options: Unpack[PackOptions]) -> list[Span]:
    """Greedily join contiguous pieces into chunks that fit; overlap in units or in pieces (`PackOptions`)."""
    return [(pieces[i][0], pieces[j][1]) for i, j in pack_indices(view, pieces, **options)]


def pack_indices(
    view: SectionView,
    pieces: Sequence[Span],
    *,
    fits: Fits | None = None,
    overlap_units: int = 0,
    overlap_items: int = 0,
    max_items: int | None = None,
    item_ids: Sequence[int] | None = None,
    glue: Sequence[bool] | None = None,
    groups: Sequence[tuple[int, int]] = (),
) -> list[tuple[int, int]]:
    """`pack`, as (first, last) piece indices of each chunk; the options are `PackOptions`."""
    if not pieces:
        return []
    text = view.text
    m = view.measure
    fits = fits or m.fits
    m.prefetch_model(pieces)
    counts = m.counts
    ucum, mcum, u_sum, m_sum = [0], [0], 0, 0
    for a, b in pieces:
        u, w = counts(a, b)
        u_sum += u
        m_sum += w
        ucum.append(u_sum)
        mcum.append(m_sum)
    size, mbudget = m.size, m.section_budget
    n = len(pieces)
    ids = list(item_ids) if item_ids is not None else list(range(n))
    group_end = {first: last for first, last in groups if last > first}

    def estimate(i: int, j: int) -> bool:
        return ucum[j + 1] - ucum[i] <= size and mcum[j + 1] - mcum[i] <= mbudget

    # without an item cap or groups the greedy extension is a search: the sums only grow
    plain = max_items is None and not group_end
    out: list[tuple[int, int]] = []
    i = 0
    while i < n:
        if plain:
            # the last j with both sums of pieces i..j within budget (at least i)
            j = min(bisect_right(ucum, ucum[i] + size), bisect_right(mcum, mcum[i] + mbudget)) - 2
            j = min(max(j, i), n - 1)
        else:
            j = i
            while j + 1 < n and (max_items is None or ids[j + 1] - ids[i] < max_items) and estimate(i, j + 1):
                last = group_end.get(j + 1)
                if last is not None and not estimate(i, last) and estimate(j + 1, last):
                    break
                j += 1
        # the sum is an estimate; the real count of the span as it will be stored decides
        while j > i and not fits(*strip_span(text, pieces[i][0], pieces[j][1])):
            j -= 1
        if glue and j + 1 < n and glue[j]:
            k = j
            while k > i and glue[k]:
                k -= 1
            if not glue[k]:
                j = k
        out.append((i, j))
        if j + 1 >= n:
            break
        nxt = j + 1
        if overlap_items > 0:
            first = ids[j] - overlap_items + 1  # the first item repeated in the next chunk
            nxt = max(i + 1, next(k for k in range(i, j + 2) if ids[k] >= first))
        elif overlap_units > 0:
            k = j + 1
            while k - 1 > i and ucum[j + 1] - ucum[k - 1] <= overlap_units:
                k -= 1
            nxt = k
        # the overlap must leave room for the next new piece, or the next chunk adds nothing
        while nxt <= j and not estimate(nxt, j + 1):
            nxt += 1
        i = nxt
    return out


def enforce(view: SectionView, a: int, b: int, fits: Fits, *, accept: Fits | None = None) -> list[Span]:
    """Stripped spans of [a, b), re-split until each passes `fits` (a lone character always passes); a
    span the strategy returned whole passes `accept` instead (a paragraph kept whole, `keep_whole`)."""
    text = view.text
    out: list[Span] = []
    whole = strip_span(text, a, b)
    todo = [whole]
    while todo:
        x, y = todo.pop()
        if y <= x:
            continue
        if y - x == 1 or ((accept or fits) if (x, y) == whole else fits)(x, y):
            out.append((x, y))
            continue
        cut = [
            strip_span(text, p, q)
            for p, q in recursive_spans(text, x, y, fits, DEFAULT_SEPARATORS, view.atomic)
        ]
        if cut == [(x, y)]:  # cannot be cut further: halve it
            mid = x + (y - x) // 2
            cut = [strip_span(text, x, mid), strip_span(text, mid, y)]
        todo.extend(reversed(cut))
    return out
