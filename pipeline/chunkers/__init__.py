"""Chunking strategies behind one base class; each registers itself beside its class (`@register`).

A strategy implements `Chunker.split(view)` over a `SectionView`; `pack` joins and enforces, `measure`
counts, `context` builds what is embedded before a chunk.
"""

from __future__ import annotations

# Imported for their `@register`: importing the package fills REGISTRY with every strategy.
from pipeline.chunkers import (  # noqa: F401
    chat,
    code,
    fixed,
    hierarchical,
    html,
    markdown,
    recursive,
    semantic,
    sentence,
)
from pipeline.chunkers.base import REGISTRY, Chunker
from pipeline.chunkers.view import SectionView
from pipeline.model import Chunk

__all__ = ["Chunk", "Chunker", "REGISTRY", "SectionView"]
