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
    """One section of one document as a strategy splits it, built afresh for every chunking call.

    Offsets are absolute (into `text`, the document's whole text), so a span is exact by construction.
    `measure` counts spans (unit and model word pieces, off the section's span index where there is one)
    and holds the budgets; `shared` is the work a strategy did once for a whole batch (`Chunker.prepare`).
    """

    doc: Document
    section: Section
    measure: Measure
    #: where recursive cutting looks for cut points, coarsest first (the config's, else the defaults)
    separators: Sequence[str]
    shared: Any = None

    @property
    def text(self) -> str:
        return self.doc.text

    @property
    def start(self) -> int:
        return self.section.start

    @property
    def end(self) -> int:
        return self.section.end

    @property
    def atomic(self) -> Sequence[Span]:
        """Ranges no cut may fall inside while they fit (a fence, a table)."""
        return self.section.atomic

    @property
    def fits(self) -> Fits:
        """Within the unit budget, and within the model's limit together with the span's context."""
        return self.measure.fits

    @property
    def fits_whole(self) -> Fits:
        """`fits` with the budget of a paragraph kept whole (`keep_whole`) instead of the size."""
        return self.measure.fits_whole
