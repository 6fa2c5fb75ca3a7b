"""Chat logs and transcripts: speaker turns grouped up to `max_turns` and the budget, overlap in turns."""

from __future__ import annotations

from typing import Any

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.pack import pack, pieces_of
from pipeline.chunkers.spans import Span
from pipeline.chunkers.view import SectionView
from pipeline.model import Document, Section, strip_span
from pipeline.parse.chat import TURN as _TURN
from pipeline.parse.chat import chat_turns


@register
class ChatChunker(Chunker):
    """A turn is never cut while it fits; a turn over budget is cut like recursive text."""

    kind = "chat"

    def split(self, view: SectionView) -> list[Span]:
        text, fits = view.text, view.fits
        turns = turn_spans(text, view.start, view.end)
        if len(turns) < 2:  # no speakers here: nothing to count in turns, cut it like prose
            return pack(view, pieces_of(view, view.start, view.end, fits), fits=fits)
        pieces: list[Span] = []
        ids: list[int] = []  # the turn each piece belongs to
        for t, (x, y) in enumerate(turns):
            x, y = strip_span(text, x, y)
            parts = [(x, y)] if y > x and fits(x, y) else pieces_of(view, x, y, fits)
            for p, q in parts:
                p, q = strip_span(text, p, q)
                if q > p:
                    pieces.append((p, q))
                    ids.append(t)
        return pack(
            view,
            pieces,
            fits=fits,
            max_items=self.config.max_turns,
            overlap_items=self.config.overlap,
            item_ids=ids,
        )

    def metadata_for(self, doc: Document, section: Section, span: Span) -> dict[str, Any]:
        """The speakers in the chunk, in order of first appearance."""
        speakers = [m.group(1).strip() for m in _TURN.finditer(doc.text, span[0], span[1])]
        return {"speakers": list(dict.fromkeys(speakers))} if speakers else {}


def turn_spans(text: str, a: int, b: int) -> list[Span]:
    """Contiguous turn spans of [a, b); text before the first turn is a turn of its own."""
    starts = [s for s in chat_turns(text, a, b) if s > a]
    bounds = [a, *starts, b]
    return [(x, y) for x, y in zip(bounds, bounds[1:], strict=False) if y > x]
