"""The reindex flow: re-chunk and re-embed a collection after a profile or model change."""

from __future__ import annotations

import os
from typing import Annotated

from prefect import flow
from prefect.states import State
from pydantic import Field

from flows.common import BATCH_BYTES, CollectionName, ingest_files
from flows.runners import settings_task_runner
from pipeline import ingest as stages
from pipeline.config import Profile, Settings


@flow(
    name="chunkyard-reindex", log_prints=False, validate_parameters=True, task_runner=settings_task_runner()
)
def reindex_flow(
    collection: CollectionName,
    profile: Profile | None = None,
    files_per_batch: Annotated[int, Field(ge=1)] | None = None,
    batch_bytes: Annotated[int, Field(ge=1024)] | None = BATCH_BYTES,
) -> dict | State:
    """Re-read a collection's source files and redo what the new profile or model (CHUNKYARD_MODEL) changes.

    Only sections whose fingerprint (content + chunker settings + model) changed are re-chunked, and a
    chunk whose text is unchanged takes its embedding from the cache: a profile change that keeps most
    chunk texts costs little embedding. Without a profile, the collection's stored one is used.
    """
    stored, uris = stages.collection_sources(Settings(), collection)
    pre = stages.Stats()
    files = []
    for uri in uris:
        path = stages.uri_path(uri)
        if path is None:
            why = "not a file URI: reindex can only re-read local files"
        elif not os.path.lexists(path):
            why = f"source file is gone (`chunkyard prune -c {collection}` removes its rows)"
        else:
            files.append(str(path))
            continue
        pre.seen.add(uri)
        pre.errors.append((uri, "load", why))
        pre.counts["documents_seen"] += 1
        pre.counts["documents_failed"] += 1
    return ingest_files(
        files,
        kind="reindex",
        collection=collection,
        profile=profile or stored,
        pre=pre,
        params={"collection": collection, "profile_given": profile is not None, "flow": "reindex"},
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes,
    )
