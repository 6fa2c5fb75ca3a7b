"""What a strategy sees of one section: an immutable view of its text, offsets, budgets and span counts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pipeline.chunkers.measure import Measure
from pipeline.chunkers.spans import Fits
from pipeline.model import Document, Section, Span


@dataclass(frozen=True, slots=True)
class SectionView:
    """One section of one document as a strategy splits it, built afresh for every chunking call
    (`Chunker.view`).

    Offsets are absolute (into `text`, the document's whole text), so a span is exact by construction.
    `measure` counts spans (unit and model word pieces, off the section's span index where there is one)
    and holds the budgets; `shared` is the work a strategy did once for a whole batch (`Chunker.prepare`).
    """

    doc: Document
    section: Section
    #: the document's whole text, and the section's [start, end) in it
    text: str
    start: int
    end: int
    #: ranges no cut may fall inside while they fit (a fence, a table)
    atomic: Sequence[Span]
    measure: Measure
    #: within the unit budget, and within the model's limit together with the span's context
    fits: Fits
    #: `fits` with the budget of a paragraph kept whole (`keep_whole`) instead of the size
    fits_whole: Fits
    #: where recursive cutting looks for cut points, coarsest first (the config's, else the defaults)
    separators: Sequence[str]
    shared: Any = None
