"""The backfill flow: many sources, globs or a modification-date range; resumable by construction."""

from __future__ import annotations

from datetime import datetime

from prefect import flow
from prefect.states import State

from flows.common import PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_backfill
from pipeline.requests import BATCH_BYTES, BackfillRequest, BatchBytes, CollectionName, FilesPerBatch, Paths


@flow(
    name="chunkyard-backfill", log_prints=False, validate_parameters=True, task_runner=settings_task_runner()
)
def backfill_flow(
    sources: Paths,
    collection: CollectionName = "default",
    profile: Profile | None = None,
    modified_since: datetime | None = None,
    modified_until: datetime | None = None,
    prune: bool = False,
    soft_delete: bool = False,
    files_per_batch: FilesPerBatch = None,
    batch_bytes: BatchBytes = BATCH_BYTES,
    follow_external_links: bool | None = None,
) -> dict | State:
    """Ingest many sources; re-running after an interruption skips every document already stored.

    Each document is committed on its own, so whatever an interrupted run finished is in the tables
    with its content hash; the next run finds those files unchanged and only does the rest.
    """
    request = BackfillRequest(**locals())  # the parameters, by name, are the request's fields
    return finish(run_backfill(request, executor=PrefectExecutor()), collection)
