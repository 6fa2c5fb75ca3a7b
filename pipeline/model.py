"""The data model every stage shares: documents, sections, chunks, section plans, hashes, error records.

Storage imports only this module (and errors): it knows the shapes of the data, never how a parser or a
chunker made them. Identity is content-derived everywhere: sha256 of normalized text, never a position.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

Span = tuple[int, int]


# ---------------------------------------------------------------------------------------------- hashes


def sha256(data: bytes | str) -> str:
    """Hex sha256 of bytes, or of a string's UTF-8 encoding."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def embed_hash(text: str) -> str:
    """Cache key of an embedded text (with the model name, the embedding cache's key)."""
    return sha256(text)


# ------------------------------------------------------------------------------------ documents


@dataclass
class Section:
    """A parent: a character range of the normalized text with its place in the heading tree."""

    start: int
    end: int
    level: int = 0
    heading_path: tuple[str, ...] = ()
    kind: str = "body"
    parent: int | None = None  # index into Document.sections
    atomic: list[Span] = field(default_factory=list)  # absolute ranges never split

    def text(self, doc_text: str) -> str:
        return doc_text[self.start : self.end]


@dataclass
class Document:
    """A normalized document: the text every offset points into, and its sections in order."""

    uri: str
    doc_type: str
    text: str
    sections: list[Section]
    language: str | None = None
    title: str = ""
    warnings: list[str] = field(default_factory=list)
    raw_hash: str = ""
    mime: str = "text/plain"

    @property
    def text_hash(self) -> str:
        return sha256(self.text)


def section_hash(doc: Document, section: Section) -> str:
    """sha256 of the section's text."""
    return sha256(doc.text[section.start : section.end])


@dataclass(frozen=True)
class Chunk:
    """A child: an exact span of the document's normalized text, plus what is embedded with it."""

    start: int
    end: int
    text: str
    token_count: int
    context: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def embed_text(self) -> str:
        """What the model sees: the context (if any) and the span text."""
        return f"{self.context}\n\n{self.text}" if self.context else self.text


# -------------------------------------------------------------------------------- stored state, plans


@dataclass(frozen=True)
class StoredSection:
    """What the section diff needs to know about a stored section."""

    id: int
    fingerprint: str
    char_start: int
    chunk_count: int = 0


@dataclass(frozen=True)
class StoredDocument:
    """What the load stage needs to know about a stored document to skip it unparsed."""

    id: int
    content_hash: str
    chunk_key: str
    deleted: bool
    doc_type: str


@dataclass
class SectionPlan:
    """For one document: which stored sections survive (and where they moved), which are new, which go."""

    keep: list[tuple[int, int, int]] = field(default_factory=list)  # (new index, stored id, offset delta)
    new: list[int] = field(default_factory=list)  # indices into doc.sections to chunk and embed
    delete: list[int] = field(default_factory=list)  # stored section ids
    deleted_chunks: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.new or self.delete)


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    profile: dict
    model: str


# ---------------------------------------------------------------------------------------- the ledger


class RunKind(StrEnum):
    """What started a run (`runs.kind`, checked by the database)."""

    INGEST = "ingest"
    BACKFILL = "backfill"
    REINDEX = "reindex"
    PRUNE = "prune"
    EVAL = "eval"


class RunStatus(StrEnum):
    """Where a run is (`runs.status`, checked by the database)."""

    RUNNING = "running"
    COMPLETED = "completed"  # every file ingested
    FAILED = "failed"  # some files failed (each in ingest_errors); the rest was stored
    CRASHED = "crashed"  # the process died or raised; what was committed stays, the next run completes it


class Stage(StrEnum):
    """Where a file failed (`ingest_errors.stage`, checked by the database)."""

    DISCOVER = "discover"
    LOAD = "load"
    NORMALIZE = "normalize"
    DIFF = "diff"
    CHUNK = "chunk"
    EMBED = "embed"
    STORE = "store"
    PRUNE = "prune"
    TASK = "task"  # a whole batch failed for good (retries spent)


class ErrorRecord(NamedTuple):
    """One failed file: which, in what stage, and an actionable reason (a row of ingest_errors)."""

    uri: str
    stage: str
    message: str
