"""Where flow tasks run: a few threads here (default), a local Dask cluster, or an existing Dask scheduler."""

from __future__ import annotations

import logging
import os
from typing import Any

from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner

from pipeline.config import Settings
from pipeline.errors import ConfigError

#: Batches in flight at once on the default runner: one can load, chunk or store while another embeds;
#: more threads only fight over the same cores (torch already uses all of them for one batch).
THREADS = 2


def task_runner(*, workers: int = 0, address: str | None = None, threads: int = THREADS) -> TaskRunner:
    """Dask at `address`, else a local Dask cluster of `workers` processes, else `threads` threads."""
    if address or workers:
        try:
            from prefect_dask import DaskTaskRunner
        except ImportError as exc:
            raise ConfigError("running on Dask needs prefect-dask: pip install 'chunkyard[dask]'") from exc
        if address:
            return DaskTaskRunner(address=address)
        return DaskTaskRunner(cluster_class=local_cluster, cluster_kwargs={"n_workers": workers})
    return ThreadPoolTaskRunner(max_workers=threads)


def settings_task_runner(settings: Settings | None = None) -> TaskRunner:
    """The runner CHUNKYARD_DASK_ADDRESS / CHUNKYARD_DASK_WORKERS ask for (deployments pick it up at import)."""
    s = settings or Settings()
    return task_runner(workers=s.dask_workers, address=s.dask_address or None)


def local_cluster(n_workers: int, torch_threads: int | None = None) -> Any:
    """Single-threaded worker processes that split the cores for torch and report to this process's API.

    Dask pins each worker to 1 OpenMP thread by default, so N workers on N cores each get one; with
    fewer workers than cores, each gets its share. Without PREFECT_API_URL a worker would start its own
    ephemeral Prefect server (slow, and its task runs would be invisible), so it gets this one's URL.
    """
    import dask
    import distributed
    from prefect.client.orchestration import get_client

    logging.getLogger("distributed").setLevel(logging.WARNING)
    per_worker = str(torch_threads or max(1, (os.cpu_count() or 1) // n_workers))
    env = {"OMP_NUM_THREADS": per_worker, "MKL_NUM_THREADS": per_worker, "TOKENIZERS_PARALLELISM": "false"}
    env["PREFECT_API_URL"] = str(get_client(sync_client=True).api_url)
    # A worker takes a new batch only when it is idle: no batch waits behind a long one on a busy worker.
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}):
        return distributed.LocalCluster(
            n_workers=n_workers,
            threads_per_worker=1,
            processes=True,
            env=env,
            dashboard_address=None,
            silence_logs=logging.WARNING,
        )
