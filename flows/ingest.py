"""The ingest flow: files and folders into one collection, vanished files pruned, one task per batch."""

from __future__ import annotations

from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import CollectionName, PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.config import Profile
from pipeline.ingest import run_ingest
from pipeline.run import BATCH_BYTES


@flow(name="chunkyard-ingest", log_prints=False, validate_parameters=True, task_runner=settings_task_runner())
def ingest_flow(
    paths: Annotated[list[str], Field(min_length=1)],
    collection: CollectionName = "default",
    profile: Profile | None = None,
    dry_run: bool = False,
    prune: bool = True,
    soft_delete: bool = False,
    files_per_batch: Annotated[int, Field(ge=1)] | None = None,
    batch_bytes: Annotated[int, Field(ge=1024)] | None = BATCH_BYTES,
    follow_external_links: bool | None = None,
) -> dict | State:
    """Ingest files and folders into one collection; Failed (with the summary) when any file failed."""
    result = run_ingest(
        paths,
        collection=collection,
        profile=profile,
        dry_run=dry_run,
        prune=prune,
        soft_delete=soft_delete,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
        executor=PrefectExecutor(),
        follow_external_links=follow_external_links,
        flow="ingest",
    )
    return finish(result, collection)
