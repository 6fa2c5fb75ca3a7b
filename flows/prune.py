"""The prune flow: delete the rows of documents whose source files are gone."""

from __future__ import annotations

from pathlib import Path

from prefect import flow

from flows.common import CollectionName, prune_vanished_task
from flows.runners import settings_task_runner
from pipeline import ingest as stages
from pipeline import store
from pipeline.config import Settings
from pipeline.sources import source_uri


@flow(name="chunkyard-prune", log_prints=False, validate_parameters=True, task_runner=settings_task_runner())
def prune_flow(
    collection: CollectionName = "default", paths: list[str] | None = None, soft: bool = False
) -> dict:
    """Check every live document's source file (only under `paths` when given) and drop the vanished ones."""
    settings = Settings()
    profile, _ = stages.collection_sources(settings, collection)
    roots = [source_uri(Path(p).expanduser()) for p in paths or []]
    ctx, conn = stages.begin_run(
        settings=settings,
        collection=collection,
        profile=profile,
        kind="prune",
        params={"paths": paths, "soft": soft, "flow": "prune"},
    )
    stats = stages.Stats()
    try:
        stats.merge(stages.Stats.from_json(prune_vanished_task(ctx, roots, soft)))
    except BaseException:
        store.finish_run(conn, ctx.run_id, status="crashed", counts=dict(stats.counts), timings=stats.timings)
        conn.close()
        raise
    status = stages.end_run(conn, ctx, stats)
    out = stats.to_json()
    out.pop("seen")
    out.update(run_id=ctx.run_id, status=status, collection=collection)
    return out
