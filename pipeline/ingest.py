"""The kinds of run: ingest, backfill, reindex and prune, each a `Run` over the files it selects.

The CLI (`--no-prefect`), the flows (with the Prefect executor), evaluation and benchmarks call these;
the life cycle they share is `pipeline.run.Run`, the batch work `pipeline.stages.ingest_batch`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

from pipeline import db, store
from pipeline.config import Profile, Settings, profile_from_dict
from pipeline.embed import key_for
from pipeline.errors import ConfigError
from pipeline.model import Progress, RunKind, Stage, Stats
from pipeline.run import BATCH_BYTES, Executor, Run, RunResult
from pipeline.sources import (
    UnlistedFolder,
    discover,
    expand_sources,
    filter_modified,
    read_folders,
    source_uri,
    uri_path,
)


def run_ingest(
    paths: Sequence[str | Path],
    *,
    settings: Settings | None = None,
    collection: str | None = None,
    profile: Profile | None = None,
    dry_run: bool = False,
    prune: bool = True,
    soft_delete: bool = False,
    files_per_batch: int | None = None,
    batch_bytes: int | None = BATCH_BYTES,
    executor: Executor | None = None,
    progress: Progress | None = None,
    model_limit: int | None = None,
    kind: RunKind = RunKind.INGEST,
    flow: str | None = None,
    follow_external_links: bool | None = None,
) -> RunResult:
    """Ingest files and folders into one collection; files gone from the folders are pruned."""
    settings = settings or Settings()
    require_some(paths)
    follow = settings.follow_external_links if follow_external_links is None else follow_external_links
    files, found, roots = discover_files(paths, follow_external_links=follow)
    params = {"paths": [str(p) for p in paths], "dry_run": dry_run} | ({"flow": flow} if flow else {})
    folders = read_folders(paths, follow_external_links=follow)
    opts = Options(files_per_batch or settings.files_per_batch, batch_bytes, executor, progress, folders)
    begin = dict(dry_run=dry_run, model_limit=model_limit)
    return _ingest(settings, settings.collection if collection is None else collection, profile or Profile(), kind, params, found, files,
                   roots if prune else None, soft_delete, opts, begin)  # fmt: skip


def run_backfill(
    sources: Sequence[str],
    *,
    settings: Settings | None = None,
    collection: str = "default",
    profile: Profile | None = None,
    modified_since: datetime | None = None,
    modified_until: datetime | None = None,
    prune: bool = False,
    soft_delete: bool = False,
    files_per_batch: int | None = None,
    batch_bytes: int | None = BATCH_BYTES,
    executor: Executor | None = None,
    progress: Progress | None = None,
    follow_external_links: bool | None = None,
) -> RunResult:
    """Ingest many sources (globs, a modification-date range); rerun after an interruption to finish."""
    settings = settings or Settings()
    has_glob = any(c in s for s in sources for c in "*?[")
    if prune and (has_glob or modified_since or modified_until):
        raise ConfigError("prune needs plain folders: with a glob or a date range, unseen files are not gone")
    if modified_since and modified_until and modified_since >= modified_until:
        raise ConfigError("modified_since must be before modified_until")
    paths, missing = expand_sources(sources)
    if not paths:
        raise ConfigError("nothing to ingest: " + "; ".join(f"{e.source}: {e.reason}" for e in missing))
    require_some(paths)
    follow = settings.follow_external_links if follow_external_links is None else follow_external_links
    files, pre, roots = discover_files(paths, follow_external_links=follow)
    for e in missing:
        pre.fail(e.source, Stage.DISCOVER, e.reason)
    files = filter_modified(files, since=modified_since, until=modified_until)
    params = {"sources": list(sources), "modified_since": modified_since, "modified_until": modified_until}
    folders = read_folders(paths, follow_external_links=follow)
    opts = Options(files_per_batch or settings.files_per_batch, batch_bytes, executor, progress, folders)
    return _ingest(settings, collection, profile or Profile(), RunKind.BACKFILL, params | {"flow": "backfill"},
                   pre, files, roots if prune else None, soft_delete, opts)  # fmt: skip


def run_reindex(
    collection: str,
    *,
    settings: Settings | None = None,
    profile: Profile | None = None,
    files_per_batch: int | None = None,
    batch_bytes: int | None = BATCH_BYTES,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Re-read a collection's source files and redo what a new profile or model changes.

    Only sections whose fingerprint (content + chunker settings + model) changed are re-chunked, and a
    chunk whose text is unchanged takes its embedding from the cache. Without a profile, the stored one.
    """
    settings = settings or Settings()
    stored, uris = collection_sources(settings, collection)
    files, pre = [], Stats()
    for uri in uris:
        path = uri_path(uri)
        if path is None:
            why = "not a file URI: reindex can only re-read local files"
        elif not os.path.lexists(path):
            why = f"source file is gone (`chunkyard prune -c {collection}` removes its rows)"
        else:
            files.append(str(path))
            continue
        pre.seen.add(uri)
        pre.counts["documents_seen"] += 1
        pre.fail(uri, Stage.LOAD, why)
    params = {"collection": collection, "profile_given": profile is not None, "flow": "reindex"}
    opts = Options(files_per_batch or settings.files_per_batch, batch_bytes, executor, progress)
    return _ingest(
        settings, collection, profile or stored, RunKind.REINDEX, params, pre, files, None, False, opts
    )


def run_model_switch(
    collection: str,
    model: str,
    *,
    settings: Settings | None = None,
    dry_run: bool = False,
    executor: Executor | None = None,
    progress: Progress | None = None,
    batch: int = 256,
) -> RunResult:
    """Move a collection to another embedding model without downtime: its chunks are embedded into a new
    set while search reads the old one, which the new one replaces in one transaction when complete. The
    backend is this machine's (CHUNKYARD_EMBED_BACKEND); a dry run counts the vectors needed and cached."""
    settings = settings or Settings()
    key = str(key_for(settings, model))
    stored, _ = collection_sources(settings, collection)
    params = {"collection": collection, "model": key, "flow": "reindex"}
    with Run.begin(
        settings=settings, collection=collection, profile=stored, kind=RunKind.REINDEX, params=params,
        dry_run=dry_run, executor=executor, progress=progress, switching_model=True,
    ) as run:  # fmt: skip
        run.switch_model(key, batch=batch)
        return run.finish()


class Options(NamedTuple):
    """How a run's files are batched and run, and where its progress goes."""

    files_per_batch: int
    batch_bytes: int | None
    executor: Executor | None
    progress: Progress | None
    roots: Sequence[str] = ()  # the folders given: reads of files found under them never leave them


def _ingest(
    settings: Settings,
    collection: str,
    profile: Profile,
    kind: RunKind,
    params: dict,
    pre: Stats,
    files: list[str],
    prune_roots: list[str] | None,
    soft_delete: bool,
    opts: Options,
    begin: dict | None = None,
) -> RunResult:
    """The body every ingesting run shares: begin, record discovery, batches, prune, finish."""
    with Run.begin(
        settings=settings,
        collection=collection,
        profile=profile,
        kind=kind,
        params=params,
        executor=opts.executor,
        progress=opts.progress,
        **(begin or {}),
    ) as run:
        run.add(pre, recorded=False)
        run.ingest(
            files, files_per_batch=opts.files_per_batch, batch_bytes=opts.batch_bytes, roots=opts.roots
        )
        if prune_roots is not None:
            run.prune_missing(prune_roots, soft=soft_delete)
        return run.finish()


def run_prune(
    collection: str,
    *,
    settings: Settings | None = None,
    paths: Sequence[str] = (),
    soft: bool = False,
    executor: Executor | None = None,
    progress: Progress | None = None,
) -> RunResult:
    """Check every live document's source file (only under `paths` when given); drop the vanished ones."""
    settings = settings or Settings()
    profile, _ = collection_sources(settings, collection)
    roots = [source_uri(Path(p).expanduser()) for p in paths]
    with Run.begin(
        settings=settings,
        collection=collection,
        profile=profile,
        kind=RunKind.PRUNE,
        params={"paths": list(paths), "soft": soft, "flow": "prune"},
        executor=executor,
        progress=progress,
    ) as run:
        run.prune_vanished(roots, soft=soft)
        return run.finish()


def require_some(paths: Sequence[str | Path]) -> None:
    """A usage error, before any collection or ledger row exists, when no path given exists at all."""
    given = [Path(p).expanduser() for p in paths]
    if given and not any(p.exists() or p.is_symlink() for p in given):
        raise ConfigError(f"nothing to ingest: {', '.join(map(str, paths))}: no such file or directory")


def discover_files(
    paths: Sequence[str | Path], *, follow_external_links: bool = False
) -> tuple[list[str], Stats, list[str]]:
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
    return [str(f.path) for f in files], stats, roots


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
