"""The ingest flow: discover, one task per batch of files, prune, ledger."""

from __future__ import annotations

from pathlib import Path

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from pipeline import ingest as stages
from pipeline.config import Profile, Settings
from pipeline.errors import TransientError


def _transient(task, task_run, state) -> bool:
    """Retry only transient failures (connection, serialization); never bad input."""
    try:
        state.result()
    except TransientError:
        return True
    except Exception:
        return False
    return False


@task(
    name="ingest-batch",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=[1, 5, 15],
    retry_condition_fn=_transient,
)
def ingest_batch_task(ctx: stages.RunContext, paths: list[str]) -> dict:
    """One batch of files through load..store; returns the batch's stats as JSON."""
    return stages.ingest_batch(ctx, paths).to_json()


@task(
    name="prune",
    cache_policy=NO_CACHE,
    retries=3,
    retry_delay_seconds=[1, 5, 15],
    retry_condition_fn=_transient,
)
def prune_task(ctx: stages.RunContext, roots: list[str], seen: list[str], soft: bool) -> dict:
    return stages.prune_missing(ctx, roots, set(seen), soft=soft).to_json()


@flow(name="chunkyard-ingest", log_prints=False, validate_parameters=True)
def ingest_flow(
    paths: list[str],
    collection: str = "default",
    profile: dict | None = None,
    dry_run: bool = False,
    prune: bool = True,
    soft_delete: bool = False,
) -> dict:
    """Ingest files and folders into one collection; returns stats JSON with run_id and status."""
    settings = Settings()
    prof = Profile.model_validate(profile or {})
    batches, stats, roots = stages.plan_batches([Path(p) for p in paths], settings.files_per_batch)
    ctx, conn = stages.begin_run(
        settings=settings,
        collection=collection,
        profile=prof,
        dry_run=dry_run,
        params={"paths": paths, "dry_run": dry_run, "flow": "ingest"},
    )
    try:
        futures = [ingest_batch_task.submit(ctx, b) for b in batches]
        for f in futures:
            stats.merge(stages.Stats.from_json(f.result()))
        if prune:
            stats.merge(stages.Stats.from_json(prune_task(ctx, roots, sorted(stats.seen), soft_delete)))
    except BaseException:
        if ctx.run_id >= 0:
            from pipeline import store

            store.finish_run(
                conn, ctx.run_id, status="crashed", counts=dict(stats.counts), timings=stats.timings
            )
        conn.close()
        raise
    status = stages.end_run(conn, ctx, stats)
    out = stats.to_json()
    out.update(run_id=ctx.run_id, status=status)
    return out
