"""The router: one chunker per document type, from the collection's profile."""

from __future__ import annotations

from functools import lru_cache

from pipeline.chunkers import REGISTRY
from pipeline.chunkers.base import Chunker
from pipeline.config import DEFAULT_MODEL, Profile
from pipeline.errors import ConfigError


@lru_cache(maxsize=64)
def _build(config, model: str) -> Chunker:
    cls = REGISTRY.get(config.kind)
    if cls is None:
        raise ConfigError(f"chunker {config.kind!r} is not available (known: {', '.join(sorted(REGISTRY))})")
    return cls(config, model=model)


class Router:
    """Picks the chunker for a document from its type; chunkers are built once and reused."""

    def __init__(self, profile: Profile, *, model: str = DEFAULT_MODEL) -> None:
        self.profile = profile
        self.model = model

    def chunker_for(self, doc_type: str) -> Chunker:
        return _build(self.profile.for_type(doc_type), self.model)

    def fingerprint(self, doc_type: str) -> str:
        """What, besides content, decides the chunks of this document type."""
        return f"{self.profile.fingerprint_for(doc_type)}:{self.model}"
