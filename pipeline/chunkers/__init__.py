"""Chunking strategies behind one base class, and the registry the router and CLI pick from."""

from __future__ import annotations

from pipeline.chunkers.base import Chunk, Chunker
from pipeline.chunkers.chat import ChatChunker
from pipeline.chunkers.code import CodeChunker
from pipeline.chunkers.fixed import FixedChunker
from pipeline.chunkers.hierarchical import HierarchicalChunker
from pipeline.chunkers.html import HtmlChunker
from pipeline.chunkers.markdown import MarkdownChunker
from pipeline.chunkers.recursive import RecursiveChunker
from pipeline.chunkers.semantic import SemanticChunker
from pipeline.chunkers.sentence import SentenceChunker

#: kind -> class. Every strategy registers here; tests run the contracts over all of them.
REGISTRY: dict[str, type[Chunker]] = {
    cls.kind: cls
    for cls in (
        FixedChunker,
        RecursiveChunker,
        SentenceChunker,
        SemanticChunker,
        MarkdownChunker,
        HtmlChunker,
        CodeChunker,
        ChatChunker,
        HierarchicalChunker,
    )
}

__all__ = ["Chunk", "Chunker", "REGISTRY"]
