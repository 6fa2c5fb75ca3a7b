"""The backfill flow: many sources, globs or a modification-date range; resumable by construction."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import BATCH_BYTES, CollectionName, ingest_files
from flows.runners import settings_task_runner
from pipeline import ingest as stages
from pipeline.config import Profile
from pipeline.errors import ConfigError


@flow(
    name="chunkyard-backfill", log_prints=False, validate_parameters=True, task_runner=settings_task_runner()
)
def backfill_flow(
    sources: Annotated[list[str], Field(min_length=1)],
    collection: CollectionName = "default",
    profile: Profile | None = None,
    modified_since: datetime | None = None,
    modified_until: datetime | None = None,
    prune: bool = False,
    soft_delete: bool = False,
    files_per_batch: Annotated[int, Field(ge=1)] | None = None,
    batch_bytes: Annotated[int, Field(ge=1024)] | None = BATCH_BYTES,
) -> dict | State:
    """Ingest many sources; re-running after an interruption skips every document already stored.

    Each document is committed on its own, so whatever an interrupted run finished is in the tables
    with its content hash; the next run finds those files unchanged and only does the rest.
    """
    has_glob = any(c in s for s in sources for c in "*?[")
    if prune and (has_glob or modified_since or modified_until):
        raise ConfigError("prune needs plain folders: with a glob or a date range, unseen files are not gone")
    if modified_since and modified_until and modified_since >= modified_until:
        raise ConfigError("modified_since must be before modified_until")
    paths, pre = stages.expand_sources(sources)
    batches, found, roots = stages.plan_batches([Path(p) for p in paths], 1)
    pre.merge(found)
    files = stages.filter_modified(
        [p for b in batches for p in b], since=modified_since, until=modified_until
    )
    return ingest_files(
        files,
        kind="backfill",
        collection=collection,
        profile=profile or Profile(),
        pre=pre,
        params={
            "sources": sources,
            "modified_since": modified_since,
            "modified_until": modified_until,
            "flow": "backfill",
        },
        prune_roots=roots if prune else None,
        soft_delete=soft_delete,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
    )
