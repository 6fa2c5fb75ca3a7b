"""Run a flow from the CLI or a script: ephemeral Prefect, or the server at PREFECT_API_URL; any runner."""

from __future__ import annotations

import importlib
import logging
from typing import Any

from flows import own_temporary_server
from flows.common import outcome
from flows.runners import task_runner
from flows.server import using, where
from pipeline.config import Settings
from pipeline.model import NoProgress, Progress
from pipeline.run import reporting

log = logging.getLogger(__name__)

#: Flow name -> "module:attribute".
FLOWS = {
    "ingest": "flows.ingest:ingest_flow",
    "backfill": "flows.backfill:backfill_flow",
    "reindex": "flows.reindex:reindex_flow",
    "prune": "flows.prune:prune_flow",
    "evaluate": "flows.evaluate:evaluate_flow",
}


def get_flow(name: str) -> Any:
    """The flow object by its short name (imported on demand: Prefect is slow to import)."""
    module, attr = FLOWS[name].split(":")
    return getattr(importlib.import_module(module), attr)


def run_flow(
    name: str,
    params: dict,
    *,
    workers: int = 0,
    address: str | None = None,
    progress: Progress | None = None,
) -> dict:
    """Run a flow here and return its summary (also when files failed: the state is Failed, not raised)."""
    settings = Settings()
    workers = workers or settings.dask_workers
    address = address or settings.dask_address or None
    server = where(settings.data_dir, prefect=True, dask=bool(workers or address))
    if address and server.kind == "temporary":
        log.warning(
            "tasks on the Dask cluster at %s cannot reach this process's temporary Prefect server; "
            "set PREFECT_API_URL to a Prefect server they can reach to see their task runs",
            address,
        )
    if server.kind == "temporary":
        own_temporary_server()  # a temporary server will start: mark it ours, stop orphans of killed commands
    flow = get_flow(name)
    if workers or address:
        flow = flow.with_options(task_runner=task_runner(workers=workers, address=address))
    with reporting(progress or NoProgress()), using(server.url):
        state = flow(**params, return_state=True)
    result = outcome(state)
    result["flow_run_id"] = str(state.state_details.flow_run_id)
    return result
