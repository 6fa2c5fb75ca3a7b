"""Recursive splitting: the coarsest separator that keeps pieces in budget, then a greedy merge."""

from __future__ import annotations

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.spans import split_points
from pipeline.config import DEFAULT_SEPARATORS
from pipeline.model import Document, Section, Span, strip_span


@register
class RecursiveChunker(Chunker):
    """Paragraph, line, sentence (also 。！？), word, character: LangChain's idea, with exact offsets."""

    kind = "recursive"

    def split(self, doc: Document, section: Section) -> list[Span]:
        fits = self.fits_for(doc, section)
        m = self.measure(doc, section)
        if m.whole > m.size and not fits(section.start, section.end):
            # paragraphs (pieces at the first separator) that fit `keep_whole` stay one piece each
            seps = getattr(self.config, "separators", DEFAULT_SEPARATORS)
            pts = split_points(doc.text, section.start, section.end, seps[0], section.atomic) if seps else []
            bounds = [section.start, *pts, section.end]
            pieces: list[Span] = []
            for a, b in zip(bounds, bounds[1:], strict=False):
                if fits(a, b) or m.fits_whole(*strip_span(doc.text, a, b)):
                    pieces.append((a, b))
                else:
                    pieces += self.pieces_for(doc, section, a, b, fits)
        else:
            pieces = self.pieces_for(doc, section, section.start, section.end, fits)
        return self.pack(doc, section, pieces, fits=fits, overlap_units=getattr(self.config, "overlap", 0))
