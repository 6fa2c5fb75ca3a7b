"""The reindex flow: re-chunk and re-embed a collection after a profile change, or switch its embedding model."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from flows.common import PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_model_switch, run_reindex
from pipeline.requests import (
    BATCH_BYTES,
    BatchBytes,
    CollectionName,
    FilesPerBatch,
    ModelSwitchRequest,
    ReindexRequest,
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
    if model is not None:  # a model switch keeps the chunks: the profile and batching do not apply
        switch = ModelSwitchRequest(collection=collection, model=model, dry_run=dry_run)
        return finish(run_model_switch(switch, executor=PrefectExecutor()), collection)
    request = ReindexRequest(
        collection=collection, profile=profile, files_per_batch=files_per_batch, batch_bytes=batch_bytes
    )
    return finish(run_reindex(request, executor=PrefectExecutor()), collection)
