"""The backfill flow: many sources, globs or a modification-date range; resumable by construction."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import CollectionName, PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_backfill
from pipeline.run import BATCH_BYTES


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
    follow_external_links: bool | None = None,
) -> dict | State:
    """Ingest many sources; re-running after an interruption skips every document already stored.

    Each document is committed on its own, so whatever an interrupted run finished is in the tables
    with its content hash; the next run finds those files unchanged and only does the rest.
    """
    result = run_backfill(
        sources,
        collection=collection,
        profile=profile,
        modified_since=modified_since,
        modified_until=modified_until,
        prune=prune,
        soft_delete=soft_delete,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
        executor=PrefectExecutor(),
        follow_external_links=follow_external_links,
    )
    return finish(result, collection)
