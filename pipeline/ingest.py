"""The stages wired together: load -> normalize -> diff -> chunk -> embed -> store, plus the run ledger.

Plain functions over ids and paths; flows/ wraps them in Prefect tasks.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psycopg

from pipeline import db, store
from pipeline.chunkers.router import Router
from pipeline.config import Profile, Settings
from pipeline.embed import embed_with_cache, get_embedder
from pipeline.errors import InputError, SkipFile, TransientError
from pipeline.incremental import fingerprint, plan_sections
from pipeline.model import Chunk, Document, SectionPlan, StoredDocument, embed_hash
from pipeline.normalize import normalize
from pipeline.sources import SourceFile, discover, read_bytes, source_uri

#: Progress callback: (stage, items done now, new total or None).
Progress = Callable[[str, int, int | None], None]

STAGES = ("load", "normalize", "diff", "chunk", "embed", "store", "prune")


@dataclass
class Stats:
    """What a run (or one batch of it) did; batches add up with `merge`."""

    counts: Counter = field(default_factory=Counter)
    timings: dict[str, float] = field(default_factory=dict)
    errors: list[tuple[str, str, str]] = field(default_factory=list)  # (uri, stage, message)
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
            errors=[tuple(e) for e in d.get("errors", [])],
            warnings=[tuple(w) for w in d.get("warnings", [])],
            skipped=[tuple(s) for s in d.get("skipped", [])],
            seen=set(d.get("seen", [])),
            plan=list(d.get("plan", [])),
        )


@dataclass(frozen=True)
class RunContext:
    """Everything a batch task needs, as plain values (no connections, no models)."""

    url: str
    run_id: int
    collection_id: int
    collection: str
    profile: dict
    model: str
    dry_run: bool = False
    device: str | None = None
    embed_batch_size: int = 64


_reporter: Progress | None = None


def set_reporter(fn: Progress | None) -> None:
    """Where stage progress goes in this process (the CLI's progress bars); None = nowhere."""
    global _reporter
    _reporter = fn


def _report(stage: str, n: int = 1, total: int | None = None) -> None:
    if _reporter is not None:
        _reporter(stage, n, total)


# ------------------------------------------------------------------------------------------ run


def begin_run(
    *,
    settings: Settings,
    collection: str,
    profile: Profile,
    kind: str = "ingest",
    params: dict | None = None,
    dry_run: bool = False,
    lock_wait: bool = True,
) -> tuple[RunContext, psycopg.Connection]:
    """Open the ledger row and take the collection's lock; the returned connection holds the lock."""
    url = db.database_url(settings)
    conn = db.connect(url)
    dim = _model_dim(settings.model)
    if dry_run:
        coll = store.get_collection(conn, collection)
        coll_id = coll.id if coll else -1
        run_id = -1
    else:
        coll = store.ensure_collection(
            conn, collection, profile=profile.as_json(), model=settings.model, dim=dim
        )
        coll_id = coll.id
        if not store.lock_collection(conn, coll_id, wait=lock_wait):
            conn.close()
            raise TransientError(f"another run is writing collection {collection!r}; try again when it ends")
        run_id = store.start_run(conn, coll_id, kind=kind, params=params or {})
    ctx = RunContext(
        url=url,
        run_id=run_id,
        collection_id=coll_id,
        collection=collection,
        profile=profile.as_json(),
        model=settings.model,
        dry_run=dry_run,
        device=settings.device,
        embed_batch_size=settings.embed_batch_size,
    )
    return ctx, conn


def _model_dim(model: str) -> int:
    """Embedding dimension from the model's config, without loading the weights."""
    import json

    from pipeline.tokens import model_path

    p = Path(model_path(model))
    for name in ("1_Pooling/config.json", "config.json"):
        f = p / name
        if f.exists():
            cfg = json.loads(f.read_text())
            for key in ("word_embedding_dimension", "hidden_size", "dim"):
                if key in cfg:
                    return int(cfg[key])
    return get_embedder(model).dim


def abort_run(conn: psycopg.Connection, ctx: RunContext, stats: Stats) -> None:
    """Mark the ledger row crashed (what was done so far is recorded) and release the connection."""
    if ctx.run_id >= 0:
        store.finish_run(conn, ctx.run_id, status="crashed", counts=dict(stats.counts), timings=stats.timings)
    conn.close()


def end_run(conn: psycopg.Connection, ctx: RunContext, stats: Stats) -> str:
    """Record the ledger row and errors; release the lock. Returns the run's status."""
    status = "failed" if stats.errors else "completed"
    if ctx.run_id >= 0:
        for uri, stage, msg in stats.errors:
            store.record_error(conn, ctx.run_id, uri, stage, msg)
        store.refresh_fts_stats(conn, ctx.collection_id)
        store.finish_run(conn, ctx.run_id, status=status, counts=dict(stats.counts), timings=stats.timings)
        store.unlock_collection(conn, ctx.collection_id)
    conn.close()
    return status


# ---------------------------------------------------------------------------------------- batch


@dataclass
class _Work:
    src: SourceFile
    doc: Document
    chunk_key: str
    fingerprints: list[str]
    plan: SectionPlan
    chunks: dict[int, list[Chunk]]
    expected: list[int]
    is_new: bool


def ingest_batch(ctx: RunContext, paths: Sequence[str]) -> Stats:
    """Ingest one batch of files: per-file errors are recorded and the batch goes on."""
    stats = Stats()
    profile = Profile.model_validate(ctx.profile)
    router = Router(profile, model=ctx.model)
    files = _as_sources(paths, stats)
    if not files:
        return stats
    with db.connection(ctx.url) as conn:
        stored = (
            store.stored_documents(conn, ctx.collection_id, [f.uri for f in files])
            if ctx.collection_id > 0
            else {}
        )
        loaded: list[tuple[SourceFile, bytes]] = []
        with stats.timed("load"):
            for src in files:
                stats.seen.add(src.uri)
                stats.counts["documents_seen"] += 1
                try:
                    data = read_bytes(src)
                except InputError as exc:
                    stats.errors.append((src.uri, exc.stage, exc.reason))
                    stats.counts["documents_failed"] += 1
                    _report("load")
                    continue
                if is_unchanged(stored.get(src.uri), data, router):
                    stats.counts["documents_unchanged"] += 1
                    _report("load")
                    continue
                loaded.append((src, data))
                _report("load")
        docs: list[tuple[SourceFile, Document]] = []
        with stats.timed("normalize"):
            for src, data in loaded:
                try:
                    doc = normalize(src, data, section_tokens=profile.section_tokens_for(src.doc_type))
                except SkipFile as exc:
                    stats.skipped.append((src.uri, exc.reason))
                    stats.counts["documents_skipped"] += 1
                except InputError as exc:
                    stats.errors.append((src.uri, "normalize", exc.reason))
                    stats.counts["documents_failed"] += 1
                except Exception as exc:  # a parser bug must not take the run down with it
                    stats.errors.append(
                        (src.uri, "normalize", f"could not parse: {type(exc).__name__}: {exc}")
                    )
                    stats.counts["documents_failed"] += 1
                else:
                    stats.warnings += [(src.uri, w) for w in doc.warnings]
                    docs.append((src, doc))
                _report("normalize")
        with stats.timed("diff"):
            old_sections = store.stored_sections(conn, [stored[s.uri].id for s, _ in docs if s.uri in stored])
            work: list[_Work] = []
            for src, doc in docs:
                key = router.fingerprint(doc.doc_type)
                fps = [fingerprint(doc, s, key) for s in doc.sections]
                old = stored.get(src.uri)
                prev = old_sections.get(old.id, []) if old else []
                plan = plan_sections(doc, fps, prev)
                work.append(
                    _Work(src, doc, key, fps, plan, {}, [p.id for p in prev], old is None or old.deleted)
                )
        with stats.timed("chunk"):
            for w in work:
                try:
                    chunker = router.chunker_for(w.doc.doc_type)
                    for i in w.plan.new:
                        w.chunks[i] = chunker.chunk(w.doc, w.doc.sections[i])
                except Exception as exc:
                    stats.errors.append((w.src.uri, "chunk", f"chunker failed: {type(exc).__name__}: {exc}"))
                    stats.counts["documents_failed"] += 1
                    w.chunks = {}
                    w.plan = None  # type: ignore[assignment]
                _report("chunk")
            work = [w for w in work if w.plan is not None]
        texts = [c.embed_text for w in work for cs in w.chunks.values() for c in cs]
        with stats.timed("embed"):
            _report("embed", 0, len(texts))
            if ctx.dry_run:
                hashes = {embed_hash(t) for t in texts}
                hits = store.cache_lookup(conn, ctx.model, list(hashes)) if hashes else {}
                vectors, fresh = {}, [h for h in hashes if h not in hits]
            else:
                vectors, fresh = embed_with_cache(
                    texts,
                    lookup=lambda hs: store.cache_lookup(conn, ctx.model, hs),
                    embedder=lambda: get_embedder(ctx.model, ctx.device, ctx.embed_batch_size),
                    progress=lambda n: _report("embed", n),
                )
            stats.counts["chunks_embedded"] += len(fresh)
            stats.counts["chunks_cached"] += len(texts) - len(fresh)
        with stats.timed("store"):
            if not ctx.dry_run and fresh:
                store.cache_store(conn, ctx.model, {h: vectors[h] for h in fresh})
            for w in work:
                _count_plan(stats, w)
                if ctx.dry_run:
                    stats.plan.append(_plan_row(w))
                    _report("store")
                    continue
                try:
                    store.write_document(
                        conn,
                        collection_id=ctx.collection_id,
                        doc=w.doc,
                        chunk_key=w.chunk_key,
                        fingerprints=w.fingerprints,
                        plan=w.plan,
                        new_chunks=w.chunks,
                        vectors=vectors,
                        model=ctx.model,
                        run_id=ctx.run_id,
                        expected_sections=w.expected,
                    )
                except psycopg.errors.SerializationFailure as exc:
                    raise TransientError(f"{w.src.uri}: {exc}") from exc
                except psycopg.OperationalError as exc:
                    raise TransientError(
                        f"database connection lost while storing {w.src.uri}: {exc}"
                    ) from exc
                except psycopg.IntegrityError as exc:  # e.g. a chunker bug: this document only, rolled back
                    stats.errors.append((w.src.uri, "store", f"rejected by the database: {exc}".strip()))
                    stats.counts["documents_failed"] += 1
                _report("store")
    return stats


def is_unchanged(old: StoredDocument | None, data: bytes, router: Router) -> bool:
    """Same bytes and same chunk settings as stored: the one rule for skipping a file unparsed."""
    return bool(
        old
        and not old.deleted
        and old.content_hash == _raw_hash(data)
        and old.chunk_key == router.fingerprint(old.doc_type)
    )


def _raw_hash(data: bytes) -> str:
    from pipeline.model import sha256

    return sha256(data)


def _count_plan(stats: Stats, w: _Work) -> None:
    c = stats.counts
    c["documents_new" if w.is_new else "documents_changed"] += 1
    c["sections_kept"] += len(w.plan.keep)
    c["sections_rechunked"] += len(w.plan.new)
    c["sections_deleted"] += len(w.plan.delete)
    c["chunks_written"] += sum(len(v) for v in w.chunks.values())
    c["chunks_deleted"] += w.plan.deleted_chunks


def _plan_row(w: _Work) -> dict:
    return {
        "uri": w.src.uri,
        "action": "new" if w.is_new else "update",
        "sections_kept": len(w.plan.keep),
        "sections_rechunked": len(w.plan.new),
        "sections_deleted": len(w.plan.delete),
        "chunks": sum(len(v) for v in w.chunks.values()),
    }


def _as_sources(paths: Sequence[str], stats: Stats) -> list[SourceFile]:
    files, skipped, errors = discover(paths)
    for e in errors:
        stats.errors.append((e.source, e.stage, e.reason))
        stats.counts["documents_failed"] += 1
    for s in skipped:
        stats.skipped.append((s.uri, s.reason))
        stats.counts["documents_skipped"] += 1
        stats.seen.add(s.uri)
    return files


# ------------------------------------------------------------------------------------ whole runs


def plan_batches(
    paths: Sequence[str | Path], files_per_batch: int
) -> tuple[list[list[str]], Stats, list[str]]:
    """Discover files and cut them into batches; returns (batches, discovery stats, prune roots)."""
    stats = Stats()
    files, skipped, errors = discover(paths)
    for e in errors:
        stats.errors.append((e.source, e.stage, e.reason))
        stats.counts["documents_failed"] += 1
    for s in skipped:
        stats.skipped.append((s.uri, s.reason))
        stats.counts["documents_skipped"] += 1
        stats.seen.add(s.uri)
    roots = [source_uri(Path(p).expanduser()) for p in paths if Path(p).expanduser().exists()]
    ordered = [str(f.path) for f in files]
    batches = [ordered[i : i + files_per_batch] for i in range(0, len(ordered), files_per_batch)]
    return batches, stats, roots


def prune_missing(ctx: RunContext, roots: Sequence[str], seen: set[str], *, soft: bool) -> Stats:
    """Delete rows of documents under `roots` that were not seen in this run."""
    stats = Stats()
    if ctx.dry_run or ctx.collection_id < 0:
        return stats
    with stats.timed("prune"), db.connection(ctx.url) as conn:
        n_docs, n_chunks = store.prune(conn, ctx.collection_id, roots=roots, seen=seen, soft=soft)
    stats.counts["documents_deleted"] += n_docs
    stats.counts["chunks_deleted"] += n_chunks
    return stats


def run_ingest(
    paths: Sequence[str | Path],
    *,
    settings: Settings | None = None,
    collection: str | None = None,
    profile: Profile | None = None,
    dry_run: bool = False,
    prune: bool = True,
    soft_delete: bool = False,
) -> tuple[Stats, int, str]:
    """The whole ingest without Prefect (tests, benchmarks, and the flow's reference)."""
    settings = settings or Settings()
    profile = profile or Profile()
    collection = collection or settings.collection
    batches, stats, roots = plan_batches(paths, settings.files_per_batch)
    ctx, conn = begin_run(
        settings=settings,
        collection=collection,
        profile=profile,
        dry_run=dry_run,
        params={"paths": [str(p) for p in paths], "dry_run": dry_run},
    )
    try:
        for batch in batches:
            stats.merge(ingest_batch(ctx, batch))
        if prune:
            stats.merge(prune_missing(ctx, roots, stats.seen, soft=soft_delete))
    except BaseException:
        abort_run(conn, ctx, stats)
        raise
    status = end_run(conn, ctx, stats)
    return stats, ctx.run_id, status


# ------------------------------------------------------------ for flows: sources, batches, resume, prune


def expand_sources(sources: Sequence[str]) -> tuple[list[str], Stats]:
    """Paths and glob patterns (`docs/**/*.md`) as paths; a pattern that matches nothing is an error."""
    import glob
    import os

    paths: list[str] = []
    stats = Stats()
    for s in sources:
        if not any(c in s for c in "*?["):
            paths.append(s)
            continue
        hits = sorted(glob.glob(os.path.expanduser(s), recursive=True))
        if not hits:
            stats.errors.append((s, "discover", "no files match this pattern"))
            stats.counts["documents_failed"] += 1
        paths += hits
    return paths, stats


def filter_modified(
    paths: Sequence[str], *, since: datetime | None = None, until: datetime | None = None
) -> list[str]:
    """Files last modified in [since, until): a backfill over a date range."""
    if since is None and until is None:
        return list(paths)
    lo = since.timestamp() if since else float("-inf")
    hi = until.timestamp() if until else float("inf")
    out = []
    for p in paths:
        try:
            mtime = Path(p).lstat().st_mtime
        except OSError:
            out.append(p)  # let the load stage report it
            continue
        if lo <= mtime < hi:
            out.append(p)
    return out


def cut_batches(paths: Sequence[str], *, max_files: int, max_bytes: int | None = None) -> list[list[str]]:
    """Batches of at most max_files files and about max_bytes bytes, biggest first: big ones start early."""
    if max_bytes is None:
        return [list(paths[i : i + max_files]) for i in range(0, len(paths), max_files)]

    def size(p: str) -> int:
        try:
            return Path(p).lstat().st_size
        except OSError:
            return 0

    batches: list[list[str]] = []
    cur: list[str] = []
    cur_bytes = 0
    for n, p in sorted(((size(p), p) for p in paths), key=lambda t: (-t[0], t[1])):
        if cur and (len(cur) >= max_files or cur_bytes + n > max_bytes):
            batches.append(cur)
            cur, cur_bytes = [], 0
        cur.append(p)
        cur_bytes += n
    if cur:
        batches.append(cur)
    return batches


def split_done(ctx: RunContext, paths: Sequence[str]) -> tuple[list[str], Stats]:
    """Files still to do, and stats for those stored unchanged (what a resumed backfill need not redo)."""
    stats = Stats()
    if ctx.collection_id < 0:
        return list(paths), stats
    router = Router(Profile.model_validate(ctx.profile), model=ctx.model)
    by_uri = {source_uri(Path(p)): p for p in paths}
    with db.connection(ctx.url) as conn:
        stored = store.stored_documents(conn, ctx.collection_id, list(by_uri))
    todo = []
    for uri, p in by_uri.items():
        old = stored.get(uri)
        if old is not None:
            try:
                data = Path(p).read_bytes()
            except OSError:
                todo.append(p)  # the batch reports why
                continue
            if is_unchanged(old, data, router):
                stats.seen.add(uri)
                stats.counts["documents_seen"] += 1
                stats.counts["documents_unchanged"] += 1
                continue
        todo.append(p)
    return todo, stats


def uri_path(uri: str) -> Path | None:
    """The local path of a file URI; None for any other kind of source."""
    from urllib.parse import urlparse
    from urllib.request import url2pathname

    u = urlparse(uri)
    return Path(url2pathname(u.path)) if u.scheme == "file" else None


def collection_sources(settings: Settings, collection: str) -> tuple[Profile, list[str]]:
    """A collection's stored profile and its live documents' source URIs (what a reindex re-reads)."""
    from pipeline.config import profile_from_dict
    from pipeline.errors import ConfigError

    with db.connection(db.database_url(settings)) as conn:
        coll = store.get_collection(conn, collection)
        if coll is None:
            raise ConfigError(
                f"no collection {collection!r}: run `chunkyard ingest PATH -c {collection}` first"
            )
        uris = store.source_uris(conn, coll.id)
    return profile_from_dict(coll.profile, origin=f"collection {collection} profile"), uris


def prune_vanished(ctx: RunContext, *, roots: Sequence[str] = (), soft: bool = False) -> Stats:
    """Delete rows of documents whose source file is gone (only under `roots` when given)."""
    import os

    stats = Stats()
    if ctx.dry_run or ctx.collection_id < 0:
        return stats
    prefixes = [r.rstrip("/") + "/" for r in roots]
    with stats.timed("prune"), db.connection(ctx.url) as conn:
        live = store.source_uris(conn, ctx.collection_id)
        under = [u for u in live if not roots or u in roots or u.startswith(tuple(prefixes))]
        gone = [u for u in under if (p := uri_path(u)) is not None and not os.path.lexists(p)]
        n_docs, n_chunks = store.prune(
            conn, ctx.collection_id, roots=gone, seen=set(live) - set(gone), soft=soft
        )
    stats.counts["documents_deleted"] += n_docs
    stats.counts["chunks_deleted"] += n_chunks
    return stats
