"""Small children for vector search inside parents that retrieval returns as context.

The parents are the document's sections: `Profile.section_tokens_for` hands normalize the configured
`parent_size`, so every section is a parent of at most that many cl100k tokens (or one block that cannot be
cut). A child is stored with its section's id (`chunks.section_id`, a real foreign key), and
`chunkyard_search(..., with_parent => true)` returns the section's text. All that is left to this module is
cutting small children, which is recursive splitting at a small size.
"""

from __future__ import annotations

from typing import Any

from pipeline.chunkers.base import register
from pipeline.chunkers.recursive import RecursiveChunker
from pipeline.model import Document, Section, Span


@register
class HierarchicalChunker(RecursiveChunker):
    """Recursive children of ~128-256 units; their parent is the section they lie in."""

    kind = "hierarchical"

    def metadata_for(self, doc: Document, section: Section, span: Span) -> dict[str, Any]:
        """Say where the parent is, for someone reading the chunk table without the join."""
        return {"parent": [section.start, section.end]}
