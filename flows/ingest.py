"""The ingest flow: files and folders into one collection, vanished files pruned, one task per batch."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import BATCH_BYTES, CollectionName, ingest_files
from flows.runners import settings_task_runner
from pipeline import ingest as stages
from pipeline.config import Profile


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
) -> dict | State:
    """Ingest files and folders into one collection; Failed (with the summary) when any file failed."""
    batches, pre, roots = stages.plan_batches([Path(p) for p in paths], 1)
    return ingest_files(
        [p for b in batches for p in b],
        kind="ingest",
        collection=collection,
        profile=profile or Profile(),
        pre=pre,
        params={"paths": paths, "dry_run": dry_run, "flow": "ingest"},
        prune_roots=roots if prune else None,
        soft_delete=soft_delete,
        dry_run=dry_run,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
    )
