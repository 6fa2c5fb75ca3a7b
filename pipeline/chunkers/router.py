"""The router: one chunker per document type, from the collection's profile."""

from __future__ import annotations

from functools import lru_cache

from pipeline.chunkers import REGISTRY
from pipeline.chunkers.base import Chunker
from pipeline.config import DEFAULT_MODEL, ChunkerConfig, Profile
from pipeline.errors import ConfigError


@lru_cache(maxsize=64)
def _build(config: ChunkerConfig, model: str, model_limit: int | None = None) -> Chunker:
    """One chunker per (config, model, limit), shared by every document and thread that asks."""
    cls = REGISTRY.get(config.kind)
    if cls is None:
        raise ConfigError(f"chunker {config.kind!r} is not available (known: {', '.join(sorted(REGISTRY))})")
    return cls(config, model=model, model_limit=model_limit)


class Router:
    """Picks the chunker for a document from its type; chunkers are built once and reused.

    `model_limit` overrides the model's input limit (None = the model's own), for evaluations that let
    the model truncate oversized chunks rather than re-split them.
    """

    def __init__(
        self, profile: Profile, *, model: str = DEFAULT_MODEL, model_limit: int | None = None
    ) -> None:
        self.profile = profile
        self.model = model
        self.model_limit = model_limit

    def chunker_for(self, doc_type: str) -> Chunker:
        return _build(self.profile.for_type(doc_type), self.model, self.model_limit)

    def fingerprint(self, doc_type: str) -> str:
        """What, besides content, decides the chunks of this document type."""
        from pipeline.embed import model_prompts

        limit = "" if self.model_limit is None else f":limit={self.model_limit}"
        return f"{self.profile.fingerprint_for(doc_type)}:{self.model}{limit}{model_prompts(self.model).tag}"

    def document_key(self, doc_type: str) -> str:
        """The key stored with a document: `fingerprint`, the parser's version and the language settings. A
        file stored under another key is read again, even with the same bytes (documents stored before
        languages were detected are read once more to learn theirs)."""
        from pipeline.parse import parser_key

        return self.fingerprint(doc_type) + parser_key(doc_type) + self.profile.language_key()
