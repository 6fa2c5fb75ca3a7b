"""The per-file jobs: what `pipeline.guard` runs for a batch (in a worker process, or in-process when the
file bound is off), and the one-file preview of `chunkyard chunk`.

A job takes (shared, items, prepare) and yields READY once its shared work is done, then one
(value, error) per item: an error is that item's alone, reported by the stage that ran the job.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path

from pipeline import language
from pipeline.chunkers.router import Router
from pipeline.config import Profile
from pipeline.guard import READY
from pipeline.model import Chunk, Document
from pipeline.normalize import normalize
from pipeline.reading import read_bytes
from pipeline.sources import SourceFile


def read_document(src: SourceFile, data: bytes, profile: Profile) -> Document:
    """The normalized document, with its language and each section's (the profile's setting, or detected)."""
    doc = normalize(src, data, section_tokens=profile.section_tokens_for(src.doc_type))
    language.assign(doc, setting=profile.language, by_path=profile.languages)
    return doc


def parse_files(
    _shared: None, items: Sequence[tuple[SourceFile, bytes, Profile]], _prepare: bool
) -> Iterator[object]:
    """The guard's job for `parse` (in a worker, or in-process): READY, then (document, error) per file."""
    yield READY
    for src, data, profile in items:
        try:
            yield read_document(src, data, profile), None
        except Exception as exc:  # noqa: BLE001 - reported for this file by `parse`
            yield None, exc


#: The routers `chunk_files` built, by (profile, model, limit): kept for later batches of the process.
_ROUTERS: dict[str, Router] = {}


def chunk_files(
    shared: tuple[dict, str, int | None], items: Sequence[tuple[Document, Sequence[int]]], prepare: bool
) -> Iterator[object]:
    """The guard's job for `chunk`: READY once shared work is done, then (chunks by section, error) per
    document. With `prepare`, each chunker's shared work for all the documents is done once first
    (semantic: all sentences embedded in one call); if that fails, each document is chunked on its own."""
    import json
    from contextlib import suppress

    from pipeline.chunkers.base import Chunker

    profile, model, limit = shared
    key = json.dumps([profile, model, limit], sort_keys=True)
    router = _ROUTERS.get(key)
    if router is None:
        if len(_ROUTERS) > 8:
            _ROUTERS.clear()
        router = _ROUTERS[key] = Router(Profile.model_validate(profile), model=model, model_limit=limit)
    for doc, _ in items:  # the chunkers are built (tokenizers loaded) before any document's clock starts
        with suppress(Exception):
            router.chunker_for(doc.doc_type)
    shared: dict[int, object] = {}  # each chunker's work for the whole batch (`Chunker.prepare`)
    if prepare:
        by_chunker: dict[int, tuple[Chunker, list[tuple[Document, Sequence[int]]]]] = {}
        for doc, new in items:
            try:
                ch = router.chunker_for(doc.doc_type)
            except Exception:  # noqa: BLE001 - reported for that document below
                continue
            by_chunker.setdefault(id(ch), (ch, []))[1].append((doc, new))
        for key, (ch, batch) in by_chunker.items():
            with suppress(Exception):  # the documents are then chunked (and fail) one by one
                shared[key] = ch.prepare(batch)
    yield READY
    for doc, new in items:
        try:
            ch = router.chunker_for(doc.doc_type)
            yield ch.chunk_sections(doc, new, shared=shared.get(id(ch))), None
        except Exception as exc:  # noqa: BLE001 - reported for this document by `chunk`
            yield None, exc


def preview_chunks(
    path: Path, profile: Profile, *, model: str
) -> tuple[Document, str, list[tuple[int, Chunk]]]:
    """One file through load, normalize and chunk, nothing stored: (document, chunker line, chunks)."""
    from pipeline.errors import ConfigError
    from pipeline.sources import detect, source_uri

    kind = detect(path)
    if kind is None:
        raise ConfigError(f"{path}: unsupported file type {path.suffix!r}")
    src = SourceFile(path, source_uri(path), kind[0], kind[1])
    doc = read_document(src, read_bytes(src), profile)
    chunker = Router(profile, model=model).chunker_for(doc.doc_type)
    cfg = chunker.config
    out = [(i, c) for i, sec in enumerate(doc.sections) for c in chunker.chunk(doc, sec)]
    return doc, f"{cfg.kind} size={cfg.size} {cfg.unit}", out
