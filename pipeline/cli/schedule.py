"""The `serve` command: scheduled ingestion and evaluation, on the Prefect server flows.server.where picks.

Schedules need a Prefect server that keeps running: its scheduler makes the runs this process executes.
Prefect's temporary server has none (issue 26: `serve` ran nothing for minutes and said nothing), so without
PREFECT_API_URL `serve` uses the local server of `chunkyard server start`, starting it when none runs.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.app import (
    CollectionOpt,
    ParamOpt,
    ProfileOpt,
    StrategyOpt,
    _DaskAddress,
    _debug,
    _profile,
    _settings,
    _Workers,
    app,
)
from pipeline.console import err
from pipeline.errors import ConfigError


@app.command()
def serve(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders to re-ingest.")] = None,
    collection: CollectionOpt = "default",
    every: Annotated[str | None, typer.Option(help="Interval: 30s, 15m, 1h30m, 1d.")] = None,
    cron: Annotated[str | None, typer.Option(help="Cron schedule, e.g. '*/15 * * * *'.")] = None,
    name: Annotated[str | None, typer.Option(help="Deployment name (default ingest-COLLECTION).")] = None,
    sources: Annotated[
        Path | None, typer.Option(help="TOML file of [[source]] (ingest) and [[eval]] tables (every|cron).")
    ] = None,
    profile: ProfileOpt = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    prune: Annotated[bool, typer.Option(help="Delete rows of files gone from the folders.")] = True,
    workers: _Workers = 0,
    dask_address: _DaskAddress = None,
) -> None:
    """Re-ingest sources on a schedule (`chunkyard serve ./docs --every 15m`) until interrupted (Ctrl-C)."""
    from pydantic import ValidationError

    from flows import serve as scheduling
    from flows.runners import task_runner

    if sources is not None:
        if paths:
            raise ConfigError("give paths or --sources, not both")
        schedules = scheduling.load_schedules(sources)
    elif not paths:
        raise ConfigError("nothing to serve: give paths (with --every or --cron) or --sources FILE")
    else:
        try:
            schedules = [
                scheduling.Schedule(
                    paths=[str(p) for p in paths],
                    collection=collection,
                    every=every,
                    cron=cron,
                    prune=prune,
                    name=name,
                )
            ]
        except ValidationError as exc:
            raise ConfigError(
                "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            ) from exc
    prof = _profile(profile, strategy, param) if (profile or strategy) else None
    s = _settings()
    url = _schedule_server(s.data_dir)
    runner = None
    if workers or dask_address or s.dask_workers or s.dask_address:
        runner = task_runner(workers=workers or s.dask_workers, address=dask_address or s.dask_address)
    names = ", ".join(x.deployment_name for x in schedules)
    err.print(f"serving {names} on {url}; Ctrl-C stops", highlight=False, soft_wrap=True)
    if not _debug():  # Prefect's logs go to its UI; Ctrl-C cancels its control channel: no traceback of it
        from flows import quiet_console

        quiet_console()
        logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    scheduling.serve(schedules, task_runner=runner, profile=prof, api_url=url)


def _schedule_server(data_dir: Path) -> str:
    """The server whose scheduler makes the runs: PREFECT_API_URL's, else the local one (started if need be)."""
    from flows import server
    from pipeline.cli import signals

    found = server.where(data_dir, prefect=True)
    url = found.url
    if url is None:
        err.print("starting the local Prefect server for the schedules ...", highlight=False)
        url = server.start(data_dir)
    if found.kind != "configured":
        os.environ["PREFECT_API_URL"] = url  # Dask workers inherit it
        signals.on_interrupt(f"stopped serving; the local Prefect server at {url} keeps the schedules "
                             "(`chunkyard server stop` stops it)")  # fmt: skip
    else:
        signals.on_interrupt("stopped serving")
    return url


