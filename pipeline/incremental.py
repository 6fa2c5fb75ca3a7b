"""Section diff: fingerprints, and the plan of what to keep, re-chunk and delete for one document."""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

from pipeline.normalize import Document, Section
from pipeline.sources import sha256


@dataclass(frozen=True)
class StoredSection:
    """What the diff needs to know about a stored section."""

    id: int
    fingerprint: str
    char_start: int
    chunk_count: int = 0


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


def section_hash(doc: Document, section: Section) -> str:
    """sha256 of the section's text."""
    return sha256(doc.text[section.start : section.end])


def fingerprint(doc: Document, section: Section, chunk_key: str) -> str:
    """Content + everything that shapes its chunks or their embedded text: heading path, title, settings."""
    parts = [
        section_hash(doc, section),
        "\x1f".join(section.heading_path),
        doc.title,
        section.kind,
        chunk_key,
    ]
    return sha256("\x1e".join(parts))[:32]


def plan_sections(doc: Document, fingerprints: list[str], stored: list[StoredSection]) -> SectionPlan:
    """Match new sections to stored ones by fingerprint (first come, first served), never by position."""
    pool: dict[str, deque[StoredSection]] = defaultdict(deque)
    for s in sorted(stored, key=lambda s: s.char_start):
        pool[s.fingerprint].append(s)
    plan = SectionPlan()
    for i, fp in enumerate(fingerprints):
        queue = pool.get(fp)
        if queue:
            old = queue.popleft()
            plan.keep.append((i, old.id, doc.sections[i].start - old.char_start))
        else:
            plan.new.append(i)
    for queue in pool.values():
        for old in queue:
            plan.delete.append(old.id)
            plan.deleted_chunks += old.chunk_count
    return plan
