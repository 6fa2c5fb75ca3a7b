"""The reindex flow: re-chunk and re-embed a collection after a profile change, or switch its embedding model."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from flows.common import PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_request
from pipeline.requests import (
    BATCH_BYTES,
    BatchBytes,
    CollectionName,
    FilesPerBatch,
    flow_request,
)


@flow(
    name="chunkyard-reindex", log_prints=False, validate_parameters=True, task_runner=settings_task_runner()
)
def reindex_flow(
    collection: CollectionName,
    profile: Profile | None = None,
    files_per_batch: FilesPerBatch = None,
    batch_bytes: BatchBytes = BATCH_BYTES,
    model: str | None = None,
    dry_run: bool = False,
) -> dict | State:
    """Re-read a collection's source files and redo what the new profile changes; or, given a model, embed
    its chunks with that model into a new set and switch search to it when complete (no downtime)."""
    request = flow_request("reindex", {  # with a model, a model switch (it keeps the chunks)
        "collection": collection, "profile": profile, "files_per_batch": files_per_batch,
        "batch_bytes": batch_bytes, "model": model, "dry_run": dry_run,
    })  # fmt: skip
    return finish(run_request(request, executor=PrefectExecutor()), collection)
