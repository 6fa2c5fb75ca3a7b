"""The ingest flow: files and folders into one collection, vanished files pruned, one task per batch."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from flows.common import PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_ingest
from pipeline.requests import BATCH_BYTES, BatchBytes, CollectionName, FilesPerBatch, IngestRequest, Paths


@flow(name="chunkyard-ingest", log_prints=False, validate_parameters=True, task_runner=settings_task_runner())
def ingest_flow(
    paths: Paths,
    collection: CollectionName = "default",
    profile: Profile | None = None,
    dry_run: bool = False,
    prune: bool = True,
    soft_delete: bool = False,
    files_per_batch: FilesPerBatch = None,
    batch_bytes: BatchBytes = BATCH_BYTES,
    follow_external_links: bool | None = None,
) -> dict | State:
    """Ingest files and folders into one collection; Failed (with the summary) when any file failed."""
    request = IngestRequest(**locals()).with_flow()  # the parameters, by name, are the request's fields
    return finish(run_ingest(request, executor=PrefectExecutor()), collection)
