"""The reindex flow: re-chunk and re-embed a collection after a profile or model change."""

from __future__ import annotations

from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import CollectionName, PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_reindex
from pipeline.run import BATCH_BYTES


@flow(
    name="chunkyard-reindex", log_prints=False, validate_parameters=True, task_runner=settings_task_runner()
)
def reindex_flow(
    collection: CollectionName,
    profile: Profile | None = None,
    files_per_batch: Annotated[int, Field(ge=1)] | None = None,
    batch_bytes: Annotated[int, Field(ge=1024)] | None = BATCH_BYTES,
) -> dict | State:
    """Re-read a collection's source files and redo what the new profile or model (CHUNKYARD_MODEL) changes."""
    result = run_reindex(
        collection,
        profile=profile,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
        executor=PrefectExecutor(),
    )
    return finish(result, collection)
