"""One batch of files through the stages: load -> normalize -> diff -> chunk -> embed -> store.

Each stage is a function with a typed result. `ingest_batch` is the one worker function that serial runs
call in-process and Prefect tasks call per batch (dlt's pattern): it takes plain values (`RunContext`),
opens its own connection, and reports progress to whatever reporter it is handed. A document that fails
is recorded in `ingest_errors` at once (pgai's pattern), so a crash later in the run loses no error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg

from pipeline import db, store
from pipeline.chunkers.router import Router
from pipeline.config import Profile
from pipeline.embed import cache_key, embed_with_cache, get_embedder
from pipeline.errors import ConcurrentUpdate, InputError, SkipFile, TransientError
from pipeline.guard import Bound, FileGuard, file_guard
from pipeline.incremental import fingerprint, plan_sections
from pipeline.jobs import chunk_files, parse_files
from pipeline.model import (
    Chunk,
    Document,
    NoProgress,
    Progress,
    RunContext,
    SectionPlan,
    Stage,
    Stats,
    StoredDocument,
    embed_hash,
    sha256,
)
from pipeline.reading import EMPTY_NOW, read_bytes, reread_empty
from pipeline.sources import SourceFile

# ------------------------------------------------------------------------------------- one batch


@dataclass
class Batch:
    """What the stages of one batch share: its connection, run, router, tally and progress."""

    conn: psycopg.Connection
    ctx: RunContext
    router: Router
    stats: Stats
    progress: Progress
    #: runs each file's parse and chunk within the time and memory bound (`pipeline.guard`)
    guard: FileGuard = field(default_factory=lambda: FileGuard(Bound(0, 0)))
    #: what resume read (by uri) of files it found changed: `load` takes it instead of reading again
    read: dict[str, Read] = field(default_factory=dict)

    def fail(self, uri: str, stage: Stage, message: str) -> None:
        """Count a failed file and write its ingest_errors row now."""
        rec = self.stats.fail(uri, stage, message)
        if self.ctx.run_id is not None:
            store.record_error(self.conn, self.ctx.run_id, *rec)


@dataclass
class Loaded:
    src: SourceFile
    data: bytes
    old: StoredDocument | None


@dataclass
class Parsed:
    src: SourceFile
    doc: Document
    old: StoredDocument | None


@dataclass
class Work:
    """One document's plan: its chunk settings, section fingerprints, what to keep / chunk / delete."""

    doc: Document
    chunk_key: str
    fingerprints: list[str]
    plan: SectionPlan
    expected: list[int]  # stored section ids the plan was made against (an optimistic check)
    is_new: bool
    chunks: dict[int, list[Chunk]] = field(default_factory=dict)


@dataclass
class Embedded:
    vectors: dict[str, np.ndarray]  # embed hash -> vector, for every chunk of the batch
    fresh: list[str]  # hashes embedded now (the rest came from the cache)


def router_for(ctx: RunContext) -> Router:
    """The run's chunkers, built from the profile it carries as JSON."""
    return Router(
        Profile.model_validate(ctx.profile), model=ctx.chunk_model or ctx.model, model_limit=ctx.model_limit
    )


def ingest_batch(
    ctx: RunContext,
    files: Sequence[SourceFile],
    progress: Progress | None = None,
    *,
    read: Mapping[str, Read] | None = None,
) -> Stats:
    """Ingest one batch of files: a bad file is recorded and the batch goes on with the rest. `read`: what
    resume read of some of them (bytes and sha256, by uri), found changed under this run's lock: not read again.

    The three parts below, one after another; `executor.overlapped` runs them for consecutive batches at once."""
    prepared = prepare_batch(ctx, files, progress, read=read)
    return store_batch(prepared, embed_batch(prepared))


@dataclass
class Prepared:
    """A batch loaded, parsed, diffed and chunked: what is left is to embed and store it."""

    ctx: RunContext
    router: Router
    stats: Stats
    progress: Progress
    work: list[Work]

    def batch(self, conn: psycopg.Connection) -> Batch:
        return Batch(conn, self.ctx, self.router, self.stats, self.progress)


def prepare_batch(
    ctx: RunContext,
    files: Sequence[SourceFile],
    progress: Progress | None = None,
    *,
    read: Mapping[str, Read] | None = None,
) -> Prepared:
    """Load, parse, diff and chunk a batch (parse and chunk in the guard's worker process)."""
    stats, progress, router = Stats(), progress or NoProgress(), router_for(ctx)
    if not files:
        return Prepared(ctx, router, stats, progress, [])
    with db.connection(ctx.url) as conn, file_guard() as guard:
        b = Batch(conn, ctx, router, stats, progress, guard, dict(read or {}))
        return Prepared(ctx, router, stats, progress, chunk(b, diff(b, parse(b, load(b, files)))))


def embed_batch(p: Prepared) -> Embedded:
    """The vectors of a prepared batch's chunks (the embedding cache first)."""
    if not p.work:
        return Embedded({}, [])
    with db.connection(p.ctx.url) as conn:
        return embed(p.batch(conn), p.work)


def load_model(ctx: RunContext) -> None:
    """Load the run's embedding model into this process (ahead of the first batch that needs it)."""
    get_embedder(ctx.model, ctx.device, ctx.embed_batch_size)


def store_batch(p: Prepared, embedded: Embedded) -> Stats:
    """Write a prepared, embedded batch; its tally."""
    if p.work:
        with db.connection(p.ctx.url) as conn:
            store_documents(p.batch(conn), p.work, embedded)
    return p.stats


#: A file's bytes as resume read them, with their sha256: its batch neither reads nor hashes them again.
Read = tuple[bytes, str]


def is_unchanged(
    old: StoredDocument | None, data: bytes, router: Router, *, digest: str | None = None
) -> bool:
    """Same bytes, same chunk settings and parser as stored: the one rule for skipping a file unparsed.
    `digest`: the bytes' sha256, when it is known."""
    return bool(
        old
        and not old.deleted
        and old.content_hash == (digest or sha256(data))
        and old.chunk_key == router.document_key(old.doc_type)
    )


def load(b: Batch, files: Sequence[SourceFile]) -> list[Loaded]:
    """Read each file (the one checked open); skip the ones stored unchanged.

    A stored document whose file reads empty is read again after a pause; still empty and written just
    now, it is a file caught mid-rewrite: its rows stay for this run, with a warning (`reread_empty`)."""
    stored = (
        store.stored_documents(b.conn, b.ctx.collection_id, [f.uri for f in files])
        if b.ctx.collection_id is not None
        else {}
    )
    out: list[Loaded] = []
    with b.stats.timed("load"):
        for src in files:
            b.stats.seen.add(src.uri)
            b.stats.counts["documents_seen"] += 1
            old = stored.get(src.uri)
            data, digest = b.read.pop(src.uri, (None, None))  # resume read it (and found it changed)
            try:
                if data is None:
                    data = read_bytes(src)
                if not data and old is not None and not old.deleted:
                    data, digest = reread_empty(src, since=b.ctx.started), None
            except SkipFile as exc:  # a link out of the folder, swapped in after discovery
                b.stats.skip(src.uri, exc.reason)
                if old is not None and not old.deleted:
                    _forget(b, src.uri)
            except InputError as exc:
                b.fail(src.uri, Stage(exc.stage), exc.reason)
            else:
                if data is None:
                    b.stats.warnings.append((src.uri, EMPTY_NOW))
                    b.stats.counts["documents_unchanged"] += 1
                elif is_unchanged(old, data, b.router, digest=digest):  # carried too: a retry after a commit
                    b.stats.counts["documents_unchanged"] += 1
                else:
                    out.append(Loaded(src, data, old))
            b.progress.advance("load")
    return out


def parse(b: Batch, loaded: Sequence[Loaded]) -> list[Parsed]:
    """Decode, clean and parse each file into a Document with its sections (within the file bound)."""
    profile = b.router.profile
    out: list[Parsed] = []
    with b.stats.timed("normalize"):
        items = [(i.src, i.data, profile) for i in loaded]
        results = b.guard.run(parse_files, None, items, [i.src.uri for i in loaded])
        for item, res in zip(loaded, results, strict=True):
            src, exc = item.src, res.error
            if isinstance(exc, SkipFile):
                b.stats.skip(src.uri, exc.reason)
                if item.old is not None and not item.old.deleted:
                    _forget(b, src.uri)  # its old text must not stay searchable
            elif isinstance(exc, InputError):
                b.fail(src.uri, Stage.NORMALIZE, exc.reason)
            elif exc is not None:  # a parser bug must not take the run down with it
                b.fail(src.uri, Stage.NORMALIZE, f"could not parse: {type(exc).__name__}: {exc}")
            else:
                doc = res.value
                b.stats.warnings += [(src.uri, w) for w in doc.warnings]
                out.append(Parsed(src, doc, item.old))
            b.progress.advance("normalize")
    return out


def _forget(b: Batch, uri: str) -> None:
    """Delete the rows of a stored document whose file now holds nothing to index."""
    assert b.ctx.collection_id is not None
    n_docs, n_chunks = store.prune(
        b.conn, b.ctx.collection_id, roots=[uri], seen=set(), soft=False, dry_run=b.ctx.dry_run
    )
    b.stats.counts["documents_deleted"] += n_docs
    b.stats.counts["chunks_deleted"] += n_chunks


def diff(b: Batch, parsed: Sequence[Parsed]) -> list[Work]:
    """Match each document's sections to the stored ones by fingerprint: what to keep, chunk, delete."""
    with b.stats.timed("diff"):
        old_ids = [p.old.id for p in parsed if p.old is not None]
        old_sections = store.stored_sections(b.conn, old_ids) if old_ids else {}
        out: list[Work] = []
        for p in parsed:
            key = b.router.fingerprint(p.doc.doc_type)
            fps = [fingerprint(p.doc, s, key) for s in p.doc.sections]
            prev = old_sections.get(p.old.id, []) if p.old else []
            plan = plan_sections(p.doc, fps, prev)
            is_new = p.old is None or p.old.deleted
            doc_key = b.router.document_key(p.doc.doc_type)
            out.append(Work(p.doc, doc_key, fps, plan, [s.id for s in prev], is_new))
    return out


def chunk(b: Batch, work: Sequence[Work]) -> list[Work]:
    """Chunk the new or changed sections (within the file bound); a chunker failure fails that document only."""
    out: list[Work] = []
    with b.stats.timed("chunk"):
        shared = (b.ctx.profile, b.ctx.chunk_model or b.ctx.model, b.ctx.model_limit)
        items = [(w.doc, w.plan.new) for w in work]
        results = b.guard.run(chunk_files, shared, items, [w.doc.uri for w in work])
        for w, res in zip(work, results, strict=True):
            exc = res.error
            if isinstance(exc, InputError):  # over the file bound
                b.fail(w.doc.uri, Stage.CHUNK, exc.reason)
            elif exc is not None:
                b.fail(w.doc.uri, Stage.CHUNK, f"chunker failed: {type(exc).__name__}: {exc}")
            else:
                w.chunks = res.value
                out.append(w)
            b.progress.advance("chunk")
    return out


def embed(b: Batch, work: Sequence[Work]) -> Embedded:
    """Vectors for every chunk: from the cache by model + text hash, the rest embedded in batches."""
    ctx = b.ctx
    texts = [c.embed_text for w in work for cs in w.chunks.values() for c in cs]
    with b.stats.timed("embed"):
        b.progress.add_total("embed", len(texts))
        if ctx.dry_run:
            hashes = list({embed_hash(t) for t in texts})
            hits = store.cache_lookup(b.conn, cache_key(ctx.model), hashes) if hashes else {}
            vectors, fresh = {}, [h for h in hashes if h not in hits]
        else:
            vectors, fresh = embed_with_cache(
                texts,
                lookup=lambda hs: store.cache_lookup(b.conn, cache_key(ctx.model), hs),
                embedder=lambda: get_embedder(ctx.model, ctx.device, ctx.embed_batch_size),
                progress=lambda n: b.progress.advance("embed", n),
            )
        b.stats.counts["chunks_embedded"] += len(fresh)
        b.stats.counts["chunks_cached"] += len(texts) - len(fresh)
    return Embedded(vectors, fresh)


def store_documents(b: Batch, work: Sequence[Work], embedded: Embedded) -> None:
    """Swap each document's new state in, one transaction per document (a dry run only plans)."""
    ctx = b.ctx
    with b.stats.timed("store"):
        if not ctx.dry_run and embedded.fresh:
            store.cache_store(b.conn, cache_key(ctx.model), {h: embedded.vectors[h] for h in embedded.fresh})
        done = set() if ctx.dry_run else _write_new_in_bulk(b, work, embedded.vectors)
        for w in work:
            _count_plan(b.stats, w)
            if ctx.dry_run:
                b.stats.plan.append(_plan_row(w))
            elif w.doc.uri not in done:
                _write(b, w, embedded.vectors)
            b.progress.advance("store")


def _write_new_in_bulk(b: Batch, work: Sequence[Work], vectors: dict[str, np.ndarray]) -> set[str]:
    """During a bulk load (`store.bulk_mode`), the batch's new documents in one transaction; the uris written.
    If that transaction fails, nothing of it stays and each document goes the per-document way."""
    new = [w for w in work if w.is_new and not w.expected]
    if len(new) < 2 or b.ctx.vectors is None or not store.bulk_mode(b.conn, b.ctx.vectors):
        return set()
    docs = [store.NewDocument(w.doc, w.chunk_key, w.fingerprints, w.chunks) for w in new]
    try:
        written = store.write_documents(
            b.conn, collection_id=b.ctx.collection_id, docs=docs, vectors=vectors, set_id=b.ctx.vectors,
            run_id=b.ctx.run_id,
        )  # fmt: skip
    except psycopg.Error:
        return set()
    return set(written)


def _write(b: Batch, w: Work, vectors: dict[str, np.ndarray]) -> None:
    assert b.ctx.collection_id is not None
    try:
        store.write_document(
            b.conn,
            collection_id=b.ctx.collection_id,
            doc=w.doc,
            chunk_key=w.chunk_key,
            fingerprints=w.fingerprints,
            plan=w.plan,
            new_chunks=w.chunks,
            vectors=vectors,
            set_id=b.ctx.vectors,
            run_id=b.ctx.run_id,
            expected_sections=w.expected,
        )
    except ConcurrentUpdate as exc:
        raise TransientError(f"{w.doc.uri}: {exc}") from exc
    except psycopg.errors.SerializationFailure as exc:
        raise TransientError(f"{w.doc.uri}: {exc}") from exc
    except psycopg.OperationalError as exc:
        raise TransientError(f"database connection lost while storing {w.doc.uri}: {exc}") from exc
    except psycopg.IntegrityError as exc:  # e.g. a chunker bug: this document only, rolled back
        b.fail(w.doc.uri, Stage.STORE, f"rejected by the database: {exc}".strip())


def _count_plan(stats: Stats, w: Work) -> None:
    c = stats.counts
    c["documents_new" if w.is_new else "documents_changed"] += 1
    c["sections_kept"] += len(w.plan.keep)
    c["sections_rechunked"] += len(w.plan.new)
    c["sections_deleted"] += len(w.plan.delete)
    c["chunks_written"] += sum(len(v) for v in w.chunks.values())
    c["chunks_deleted"] += w.plan.deleted_chunks


def _plan_row(w: Work) -> dict:
    return {
        "uri": w.doc.uri,
        "action": "new" if w.is_new else "update",
        "sections_kept": len(w.plan.keep),
        "sections_rechunked": len(w.plan.new),
        "sections_deleted": len(w.plan.delete),
        "chunks": sum(len(v) for v in w.chunks.values()),
    }


def index_prepared(ctx: RunContext, work: Sequence[Work], progress: Progress | None = None) -> Stats:
    """Embed and store documents whose chunks were made elsewhere (a peer library in a benchmark)."""
    stats = Stats()
    with db.connection(ctx.url) as conn:
        b = Batch(conn, ctx, router_for(ctx), stats, progress or NoProgress())
        store_documents(b, work, embed(b, work))
    return stats
