"""The kinds of run: ingest, backfill, reindex and prune, each a `Run` over the files it selects.

The CLI (`--no-prefect`), the flows (with the Prefect executor), evaluation and benchmarks call these;
the life cycle they share is `pipeline.run.Run`, the batch work `pipeline.stages.ingest_batch`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from pipeline import db, store
from pipeline.config import Profile, Settings, profile_from_dict
from pipeline.embed import key_for
from pipeline.errors import ConfigError
from pipeline.executor import Executor
from pipeline.model import Progress, Stage, Stats
from pipeline.requests import (
    BackfillRequest,
    IngestRequest,
    ModelSwitchRequest,
    PruneRequest,
    ReindexRequest,
    RunRequest,
)
from pipeline.run import Run, RunResult
from pipeline.sources import (
    SourceFile,
    UnlistedFolder,
    discover,
    expand_sources,
    filter_modified,
    source_uri,
    typed,
    uri_path,
)

R = TypeVar("R", bound=RunRequest)


def asked(cls: type[R], given: R | object, first: str, fields: dict[str, Any]) -> R:
    """The request a run_* function was given, or the one its first argument (the field `first`) and keyword
    fields make: `run_ingest(["docs"], collection="d")` is `run_ingest(IngestRequest(paths=["docs"], ...))`."""
    if not isinstance(given, cls):
        return cls(**{first: given}, **fields)
    if fields:
        raise TypeError(f"give a {cls.__name__} or its fields, not both ({', '.join(sorted(fields))})")
    return given


def run_ingest(
    request: IngestRequest | Sequence[str | Path],
    *,
    settings: Settings | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    **fields: Any,
) -> RunResult:
    """Ingest files and folders into one collection; files gone from the folders are pruned."""
    settings = settings or Settings()
    req = asked(IngestRequest, request, "paths", fields)
    require_some(req.paths)
    follow = (
        settings.follow_external_links if req.follow_external_links is None else req.follow_external_links
    )
    files, found, roots = discover_files(req.paths, follow_external_links=follow)
    return _ingest(
        req, settings, found, files, roots if req.prune else None, req.soft_delete, executor, progress
    )


def run_backfill(
    request: BackfillRequest | Sequence[str],
    *,
    settings: Settings | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    **fields: Any,
) -> RunResult:
    """Ingest many sources (globs, a modification-date range); rerun after an interruption to finish."""
    settings = settings or Settings()
    req = asked(BackfillRequest, request, "sources", fields)
    since, until = req.modified_since, req.modified_until
    has_glob = any(c in s for s in req.sources for c in "*?[")
    if req.prune and (has_glob or since or until):
        raise ConfigError("prune needs plain folders: with a glob or a date range, unseen files are not gone")
    if since and until and since >= until:
        raise ConfigError("modified_since must be before modified_until")
    paths, missing = expand_sources(req.sources)
    if not paths:
        raise ConfigError("nothing to ingest: " + "; ".join(f"{e.source}: {e.reason}" for e in missing))
    require_some(paths)
    follow = (
        settings.follow_external_links if req.follow_external_links is None else req.follow_external_links
    )
    files, pre, roots = discover_files(paths, follow_external_links=follow)
    for e in missing:
        pre.fail(e.source, Stage.DISCOVER, e.reason)
    kept = set(filter_modified([str(f.path) for f in files], since=since, until=until))
    files = [f for f in files if str(f.path) in kept]
    return _ingest(
        req, settings, pre, files, roots if req.prune else None, req.soft_delete, executor, progress
    )


def run_reindex(
    request: ReindexRequest | str,
    *,
    settings: Settings | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    **fields: Any,
) -> RunResult:
    """Re-read a collection's source files and redo what a new profile or model changes.

    Only sections whose fingerprint (content + chunker settings + model) changed are re-chunked, and a
    chunk whose text is unchanged takes its embedding from the cache. Without a profile, the stored one.
    """
    settings = settings or Settings()
    req = asked(ReindexRequest, request, "collection", fields)
    collection = req.collection
    stored, uris = collection_sources(settings, collection)
    paths, pre = [], Stats()
    for uri in uris:
        path = uri_path(uri)
        if path is None:
            why = "not a file URI: reindex can only re-read local files"
        elif not os.path.lexists(path):
            why = f"source file is gone (`chunkyard prune -c {collection}` removes its rows)"
        else:
            paths.append(path)
            continue
        pre.seen.add(uri)
        pre.counts["documents_seen"] += 1
        pre.fail(uri, Stage.LOAD, why)
    files, skipped = typed(paths)  # the stored files as sources again (no folder: none was given)
    for s in skipped:
        pre.skip(s.uri, s.reason)
        pre.seen.add(s.uri)
    return _ingest(req, settings, pre, files, None, False, executor, progress, profile=stored)


def run_model_switch(
    request: ModelSwitchRequest | str,
    model: str | None = None,
    *,
    settings: Settings | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    **fields: Any,
) -> RunResult:
    """Move a collection to another embedding model without downtime: its chunks are embedded into a new
    set while search reads the old one, which the new one replaces in one transaction when complete. The
    backend is this machine's (CHUNKYARD_EMBED_BACKEND); a dry run counts the vectors needed and cached."""
    settings = settings or Settings()
    req = asked(
        ModelSwitchRequest, request, "collection", fields if model is None else fields | {"model": model}
    )
    key = str(key_for(settings, req.model))
    stored, _ = collection_sources(settings, req.collection)
    req = req.model_copy(update={"model": key})  # the ledger names the key (model + backend)
    with Run.begin(req, settings=settings, executor=executor, progress=progress, profile=stored) as run:
        run.switch_model(key, batch=req.batch)
        return run.finish()


def run_request(
    request: RunRequest,
    *,
    settings: Settings | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Run any typed request (`requests.flow_request` makes one from a flow's parameters) with its run_*."""
    runs: dict[type[RunRequest], Any] = {
        IngestRequest: run_ingest, BackfillRequest: run_backfill, ReindexRequest: run_reindex,
        ModelSwitchRequest: run_model_switch, PruneRequest: run_prune,
    }  # fmt: skip
    return runs[type(request)](request, settings=settings, executor=executor, progress=progress)


def _ingest(
    req: IngestRequest | BackfillRequest | ReindexRequest,
    settings: Settings,
    pre: Stats,
    files: list[SourceFile],
    prune_roots: list[str] | None,
    soft_delete: bool,
    executor: Executor | None,
    progress: Progress | None,
    *,
    profile: Profile | None = None,
) -> RunResult:
    """The body every ingesting run shares: begin, record discovery, batches, prune, finish."""
    with Run.begin(req, settings=settings, executor=executor, progress=progress, profile=profile) as run:
        run.add(pre, recorded=False)
        run.ingest(
            files,
            files_per_batch=req.files_per_batch or settings.files_per_batch,
            batch_bytes=req.batch_bytes,
        )
        if prune_roots is not None:
            run.prune_missing(prune_roots, soft=soft_delete)
        return run.finish()


def run_prune(
    request: PruneRequest | str,
    *,
    settings: Settings | None = None,
    executor: Executor | None = None,
    progress: Progress | None = None,
    **fields: Any,
) -> RunResult:
    """Check every live document's source file (only under `paths` when given); drop the vanished ones."""
    settings = settings or Settings()
    req = asked(PruneRequest, request, "collection", fields)
    profile, _ = collection_sources(settings, req.collection)
    roots = [source_uri(Path(p).expanduser()) for p in req.paths]
    with Run.begin(req, settings=settings, executor=executor, progress=progress, profile=profile) as run:
        run.prune_vanished(roots, soft=req.soft)
        return run.finish()


def require_some(paths: Sequence[str | Path]) -> None:
    """A usage error, before any collection or ledger row exists, when no path given exists at all."""
    given = [Path(p).expanduser() for p in paths]
    if given and not any(p.exists() or p.is_symlink() for p in given):
        raise ConfigError(f"nothing to ingest: {', '.join(map(str, paths))}: no such file or directory")


def discover_files(
    paths: Sequence[str | Path], *, follow_external_links: bool = False
) -> tuple[list[SourceFile], Stats, list[str]]:
    """Supported files under the paths, the discovery tally (skipped, missing) and the prune roots."""
    stats = Stats()
    files, skipped, errors = discover(paths, follow_external_links=follow_external_links)
    for e in errors:
        stats.fail(e.source, e.stage, e.reason)
        if isinstance(e, UnlistedFolder):
            stats.seen.add(e.keep)  # its files are unknown: a prune keeps what is stored under it
    for s in skipped:
        stats.skip(s.uri, s.reason)
        if not s.forget:  # a link out of the folder is not seen: a prune removes rows read through it
            stats.seen.add(s.uri)
    roots = [source_uri(Path(p).expanduser()) for p in paths if Path(p).expanduser().exists()]
    return files, stats, roots


def collection_sources(settings: Settings, collection: str) -> tuple[Profile, list[str]]:
    """A collection's stored profile and its live documents' source URIs (what a reindex re-reads)."""
    with db.connection(db.database_url(settings)) as conn:
        coll = store.get_collection(conn, collection)
        if coll is None:
            raise ConfigError(
                f"no collection {collection!r}: run `chunkyard ingest PATH -c {collection}` first"
            )
        uris = store.source_uris(conn, coll.id)
    return profile_from_dict(coll.profile, origin=f"collection {collection} profile"), uris
