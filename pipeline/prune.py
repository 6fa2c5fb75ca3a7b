"""The prune steps: delete the rows of documents a run did not see, or whose source file is gone.

Plain functions of a `RunContext` (as the batches are), so the Prefect executor runs them as tasks on any
worker; `Run.prune_missing` and `Run.prune_vanished` call them through the run's executor.
"""

from __future__ import annotations

import os

from pipeline import db, store
from pipeline.model import RunContext, Stats
from pipeline.sources import uri_path


def prune_missing(ctx: RunContext, roots: list[str], seen: list[str], soft: bool) -> Stats:
    """Delete rows of documents under `roots` that were not seen in this run."""
    stats = Stats()
    if ctx.collection_id is None:
        return stats
    with stats.timed("prune"), db.connection(ctx.url) as conn:
        n_docs, n_chunks = store.prune(
            conn, ctx.collection_id, roots=roots, seen=set(seen), soft=soft, dry_run=ctx.dry_run
        )
    stats.counts["documents_deleted"] += n_docs
    stats.counts["chunks_deleted"] += n_chunks
    return stats


def prune_vanished(ctx: RunContext, roots: list[str], soft: bool) -> Stats:
    """Delete rows of documents whose local source file is gone (only under `roots` when given)."""
    stats = Stats()
    if ctx.dry_run or ctx.collection_id is None:
        return stats
    prefixes = tuple(r.rstrip("/") + "/" for r in roots)
    with stats.timed("prune"), db.connection(ctx.url) as conn:
        live = store.source_uris(conn, ctx.collection_id)
        under = [u for u in live if not roots or u in roots or u.startswith(prefixes)]
        gone = [u for u in under if (p := uri_path(u)) is not None and not os.path.lexists(p)]
        n_docs, n_chunks = store.prune(
            conn, ctx.collection_id, roots=gone, seen=set(live) - set(gone), soft=soft
        )
    stats.counts["documents_deleted"] += n_docs
    stats.counts["chunks_deleted"] += n_chunks
    return stats
