"""The prune flow: delete the rows of documents whose source files are gone."""

from __future__ import annotations

from prefect import flow
from prefect.states import State

from flows.common import PrefectExecutor, finish
from flows.runners import settings_task_runner
from pipeline.ingest import run_prune
from pipeline.requests import CollectionName, PruneRequest


@flow(name="chunkyard-prune", log_prints=False, validate_parameters=True, task_runner=settings_task_runner())
def prune_flow(
    collection: CollectionName = "default", paths: list[str] | None = None, soft: bool = False
) -> dict | State:
    """Check every live document's source file (only under `paths` when given) and drop the vanished ones."""
    request = PruneRequest(collection=collection, paths=paths or [], soft=soft)
    return finish(run_prune(request, executor=PrefectExecutor()), collection)
