"""Recursive splitting: the coarsest separator that keeps pieces in budget, then a greedy merge."""

from __future__ import annotations

from pipeline.chunkers.base import Chunker, register
from pipeline.model import Document, Section, Span


@register
class RecursiveChunker(Chunker):
    """Paragraph, line, sentence (also 。！？), word, character: LangChain's idea, with exact offsets."""

    kind = "recursive"

    def split(self, doc: Document, section: Section) -> list[Span]:
        fits = self.fits_for(doc, section)
        pieces = self.pieces_for(doc, section, section.start, section.end, fits)
        return self.pack(doc, section, pieces, fits=fits, overlap_units=getattr(self.config, "overlap", 0))
