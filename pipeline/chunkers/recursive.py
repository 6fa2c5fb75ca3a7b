"""Recursive splitting: the coarsest separator that keeps pieces in budget, then a greedy merge."""

from __future__ import annotations

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.pack import pack, pieces_of
from pipeline.chunkers.spans import split_points
from pipeline.chunkers.view import SectionView
from pipeline.model import Span, strip_span


@register
class RecursiveChunker(Chunker):
    """Paragraph, line, sentence (also 。！？), word, character: LangChain's idea, with exact offsets."""

    kind = "recursive"

    def split(self, view: SectionView) -> list[Span]:
        fits, m, text = view.fits, view.measure, view.text
        if m.whole > m.size and not fits(view.start, view.end):
            # paragraphs (pieces at the first separator) that fit `keep_whole` stay one piece each
            seps = view.separators
            pts = split_points(text, view.start, view.end, seps[0], view.atomic) if seps else []
            bounds = [view.start, *pts, view.end]
            pieces: list[Span] = []
            for a, b in zip(bounds, bounds[1:], strict=False):
                if fits(a, b) or m.fits_whole(*strip_span(text, a, b)):
                    pieces.append((a, b))
                else:
                    pieces += pieces_of(view, a, b, fits)
        else:
            pieces = pieces_of(view, view.start, view.end, fits)
        return pack(view, pieces, fits=fits, overlap_units=getattr(self.config, "overlap", 0))
