"""Chunking strategies behind one base class, and the registry the router and CLI pick from."""

from __future__ import annotations

from pipeline.chunkers.base import Chunk, Chunker
from pipeline.chunkers.recursive import HtmlChunker, MarkdownChunker, RecursiveChunker

#: kind -> class. Every strategy registers here; tests run the contracts over all of them.
REGISTRY: dict[str, type[Chunker]] = {
    "recursive": RecursiveChunker,
    "markdown": MarkdownChunker,
    "html": HtmlChunker,
    "code": RecursiveChunker,  # sections are already syntax-tree units (normalize.parse_code)
}

__all__ = ["Chunk", "Chunker", "REGISTRY"]
