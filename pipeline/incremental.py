"""Section diff: fingerprints, and the plan of what to keep, re-chunk and delete for one document."""

from __future__ import annotations

from collections import defaultdict, deque

from pipeline.model import Document, Section, SectionPlan, StoredSection, section_hash, sha256


def fingerprint(doc: Document, section: Section, chunk_key: str) -> str:
    """Content + everything that shapes its chunks or their embedded text: heading path, title, settings."""
    parts = [
        section_hash(doc, section),
        "\x1f".join(section.heading_path),
        doc.title,
        section.kind,
        chunk_key,
    ]
    pages = doc.page_key(section.start, section.end)  # a PDF's page numbers are chunk metadata
    if pages:
        parts.append(pages)
    if section.lang != "en":  # its lexemes and sentences; English sections keep the keys stored before languages
        parts.append(f"lang={section.lang}")
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
