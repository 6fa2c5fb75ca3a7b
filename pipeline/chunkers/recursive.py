"""Recursive splitting: the coarsest separator that keeps pieces in budget, then a greedy merge."""

from __future__ import annotations

from pipeline.chunkers.base import Chunker, Span, merge_spans, recursive_spans
from pipeline.config import DEFAULT_SEPARATORS
from pipeline.normalize import Document, Section


class RecursiveChunker(Chunker):
    """Paragraph, line, sentence, word, character: LangChain's idea, with exact offsets."""

    kind = "recursive"

    def split(self, doc: Document, section: Section) -> list[Span]:
        text, size = doc.text, self.config.size
        cnt = self.counter

        def fits(a: int, b: int) -> bool:
            return cnt.count(text[a:b]) <= size

        separators = getattr(self.config, "separators", DEFAULT_SEPARATORS)
        pieces = recursive_spans(text, section.start, section.end, fits, separators, section.atomic)
        return merge_spans(text, pieces, cnt, size, getattr(self.config, "overlap", 0))


class MarkdownChunker(RecursiveChunker):
    """Sections come from headings (normalize); fences and tables stay whole where they fit."""

    kind = "markdown"


class HtmlChunker(RecursiveChunker):
    """Sections come from h1-h6 (normalize); <pre> and tables stay whole where they fit."""

    kind = "html"
