"""The data model every stage shares: documents, sections, chunks, section plans, hashes, error records.

Storage imports only this module (and errors): it knows the shapes of the data, never how a parser or a
chunker made them. Identity is content-derived everywhere: sha256 of normalized text, never a position.
"""

from __future__ import annotations

import bisect
import hashlib
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple, Protocol

Span = tuple[int, int]


def strip_span(text: str, a: int, b: int) -> Span:
    """Shrink a span to exclude leading and trailing whitespace (chunks and sections span content only)."""
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


# ---------------------------------------------------------------------------------------------- hashes


def sha256(data: bytes | str) -> str:
    """Hex sha256 of bytes, or of a string's UTF-8 encoding."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    return hashlib.sha256(data).hexdigest()


def embedded_text(context: str, text: str) -> str:
    """What the model sees of a chunk: its context (if any), a blank line, and its span text."""
    return f"{context}\n\n{text}" if context else text


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
    lang: str = "en"  # natural language (ISO 639-1; '' = no letters): full-text configuration, sentences

    def text(self, doc_text: str) -> str:
        return doc_text[self.start : self.end]


@dataclass
class Document:
    """A normalized document: the text every offset points into, and its sections in order."""

    uri: str
    doc_type: str
    text: str
    sections: list[Section]
    language: str | None = None  # a programming language (code files)
    lang: str = "en"  # natural language of most of the text (ISO 639-1; '' = no letters): pipeline.language
    title: str = ""
    warnings: list[str] = field(default_factory=list)
    raw_hash: str = ""
    mime: str = "text/plain"
    pages: list[int] = field(default_factory=list)  # paged types (PDF): start offset of page i + 1
    ocr_pages: dict[int, float] = field(default_factory=dict)  # page number -> OCR confidence (0-1)
    metadata: dict[str, Any] = field(default_factory=dict)  # what the parser tells about the file

    @property
    def text_hash(self) -> str:
        return sha256(self.text)

    def page_metadata(self, start: int, end: int) -> dict[str, Any]:
        """Pages a span covers ({} for unpaged types), and the lowest OCR confidence among them."""
        if not self.pages:
            return {}
        first = bisect.bisect_right(self.pages, start)
        last = max(first, bisect.bisect_right(self.pages, max(start, end - 1)))
        out: dict[str, Any] = {"page": first, "page_end": last}
        conf = [self.ocr_pages[p] for p in range(first, last + 1) if p in self.ocr_pages]
        if conf:
            out |= {"ocr": True, "ocr_confidence": round(min(conf), 3)}
        return out

    def page_key(self, start: int, end: int) -> str:
        """What of the pagination a span's chunk metadata depends on ("" for unpaged types)."""
        if not self.pages:
            return ""
        first = bisect.bisect_right(self.pages, start)
        inner = [p - start for p in self.pages[first:] if p < end]
        conf = [f"{p}:{c:.3f}" for p, c in self.ocr_pages.items() if first <= p <= first + len(inner)]
        return f"p{first}+{inner}" + (f" ocr {','.join(conf)}" if conf else "")


def heading_context(doc: Document, section: Section) -> str:
    """The document's title and the section's heading path, "Title > Heading > Subheading" (a heading that
    repeats the title once): what full-text search reads with each chunk of the section (`search_context`)."""
    headings = [h for h in section.heading_path if h and h != doc.title]
    return " > ".join(([doc.title] if doc.title else []) + headings)


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
        return embedded_text(self.context, self.text)


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


@dataclass(frozen=True)
class EmbeddingSet:
    """A collection's vectors of one embedding model (a partition of chunk_vectors of its own)."""

    id: int
    model: str  # embedding key: the model, and the backend tag when not torch
    dim: int
    status: str  # building | active | retired


@dataclass(frozen=True)
class Collection:
    id: int
    name: str
    profile: dict
    model: str  # the model the chunks were sized with (its tokenizer): part of their fingerprints
    vectors: EmbeddingSet | None = None  # the active set: what search reads and ingest writes

    @property
    def embed_model(self) -> str:
        """The model whose vectors search compares a question with."""
        return self.vectors.model if self.vectors else self.model


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


# ------------------------------------------------------------------------------ a run's tally


class Progress(Protocol):
    """Where a run reports progress: a stage's total grows, and items of it get done."""

    def add_total(self, stage: str, n: int) -> None: ...

    def advance(self, stage: str, n: int = 1) -> None: ...


class NoProgress:
    """A reporter that reports nowhere (scheduled runs, tests, Prefect tasks)."""

    def add_total(self, stage: str, n: int) -> None:
        pass

    def advance(self, stage: str, n: int = 1) -> None:
        pass


@dataclass
class Stats:
    """What a run (or one batch of it) did; batches add up with `merge`."""

    counts: Counter = field(default_factory=Counter)
    timings: dict[str, float] = field(default_factory=dict)
    errors: list[ErrorRecord] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    seen: set[str] = field(default_factory=set)
    plan: list[dict] = field(default_factory=list)  # filled by dry runs

    def merge(self, other: Stats) -> Stats:
        self.counts.update(other.counts)
        for k, v in other.timings.items():
            self.timings[k] = self.timings.get(k, 0.0) + v
        self.errors += other.errors
        self.warnings += other.warnings
        self.skipped += other.skipped
        self.seen |= other.seen
        self.plan += other.plan
        return self

    def fail(self, uri: str, stage: str, message: str) -> ErrorRecord:
        """Count one failed file; the caller decides where the record is written."""
        rec = ErrorRecord(uri, str(stage), message)
        self.errors.append(rec)
        self.counts["documents_failed"] += 1
        return rec

    def skip(self, uri: str, reason: str) -> None:
        self.skipped.append((uri, reason))
        self.counts["documents_skipped"] += 1

    @contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings[stage] = self.timings.get(stage, 0.0) + time.perf_counter() - t0

    def to_json(self) -> dict:
        return {
            "counts": dict(self.counts),
            "timings": {k: round(v, 4) for k, v in self.timings.items()},
            "errors": [list(e) for e in self.errors],
            "warnings": [list(w) for w in self.warnings],
            "skipped": [list(s) for s in self.skipped],
            "seen": sorted(self.seen),
            "plan": self.plan,
        }

    @classmethod
    def from_json(cls, d: dict) -> Stats:
        return cls(
            counts=Counter(d.get("counts", {})),
            timings=dict(d.get("timings", {})),
            errors=[ErrorRecord(*e) for e in d.get("errors", [])],
            warnings=[tuple(w) for w in d.get("warnings", [])],
            skipped=[tuple(s) for s in d.get("skipped", [])],
            seen=set(d.get("seen", [])),
            plan=list(d.get("plan", [])),
        )


@dataclass(frozen=True)
class RunContext:
    """Everything a batch needs, as plain values (no connections, no models): it travels to any worker."""

    url: str
    run_id: int | None  # None: a dry run, nothing is written
    collection_id: int | None  # None: the collection does not exist yet (dry run)
    collection: str
    profile: dict
    model: str  # the embedding key of the set written (cache key, embedder)
    dry_run: bool = False
    device: str | None = None
    embed_batch_size: int = 64
    model_limit: int | None = None  # eval only: chunks may exceed the model's input (it truncates)
    db_retry_seconds: float = 60.0  # how long a lost database is waited for before the run stops
    vectors: int | None = None  # the embedding set new chunks' vectors go to (None: a dry run)
    chunk_model: str | None = None  # the model chunks are sized with, when not `model` (after a model switch)
    started: float = 0.0  # when the run began reading (epoch seconds): see reading.reread_empty
