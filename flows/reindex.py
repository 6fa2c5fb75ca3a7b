"""The reindex flow: re-chunk and re-embed a collection after a profile change, or switch its embedding model."""

from __future__ import annotations

from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import CollectionName, PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_model_switch, run_reindex
from pipeline.run import BATCH_BYTES


@flow(
    name="chunkyard-reindex", log_prints=False, validate_parameters=True, task_runner=settings_task_runner()
)
def reindex_flow(
    collection: CollectionName,
    profile: Profile | None = None,
    files_per_batch: Annotated[int, Field(ge=1)] | None = None,
    batch_bytes: Annotated[int, Field(ge=1024)] | None = BATCH_BYTES,
    model: str | None = None,
    dry_run: bool = False,
) -> dict | State:
    """Re-read a collection's source files and redo what the new profile changes; or, given a model, embed
    its chunks with that model into a new set and switch search to it when complete (no downtime)."""
    if model is not None:
        return finish(
            run_model_switch(collection, model, dry_run=dry_run, executor=PrefectExecutor()), collection
        )
    result = run_reindex(
        collection,
        profile=profile,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
        executor=PrefectExecutor(),
    )
    return finish(result, collection)
