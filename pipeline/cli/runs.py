"""The run commands: ingest, backfill, reindex, prune (each a typed request run where flows.server.where says)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Annotated

import typer

from pipeline.cli.app import (
    CollectionOpt,
    FollowOpt,
    JsonOpt,
    LanguageOpt,
    ParamOpt,
    ProfileOpt,
    StrategyOpt,
    _check_model,
    _DaskAddress,
    _flow,
    _profile,
    _run,
    _Workers,
    app,
)


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders to ingest.")],
    collection: CollectionOpt = "default",
    profile: ProfileOpt = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    language: LanguageOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
    prune: Annotated[bool, typer.Option(help="Delete rows of files gone from the given folders.")] = True,
    soft_delete: Annotated[
        bool, typer.Option(help="Mark vanished files deleted instead of deleting.")
    ] = False,
    prefect: Annotated[
        bool | None,
        typer.Option(
            help="A Prefect flow run (default when PREFECT_API_URL or `chunkyard server start` gives a server; "
            "--prefect without one starts a temporary server) or plain functions here."
        ),
    ] = None,
    follow_external_links: FollowOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Load, normalize, chunk, embed and store documents; only changed sections are re-embedded."""
    from pipeline.requests import IngestRequest

    request = IngestRequest(
        paths=[str(p) for p in paths],
        collection=collection,
        profile=_profile(profile, strategy, param, language),
        dry_run=dry_run,
        prune=prune,
        soft_delete=soft_delete,
        follow_external_links=follow_external_links,
    )
    _run(_flow("ingest", request.flow_params(), prefect=prefect), as_json=as_json)


@app.command()
def backfill(
    sources: Annotated[list[str], typer.Argument(help="Files, folders or glob patterns ('docs/**/*.md').")],
    collection: CollectionOpt = "default",
    profile: ProfileOpt = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    language: LanguageOpt = None,
    since: Annotated[datetime | None, typer.Option(help="Only files modified at or after this time.")] = None,
    until: Annotated[datetime | None, typer.Option(help="Only files modified before this time.")] = None,
    prune: Annotated[
        bool, typer.Option(help="Also delete rows of files gone from these folders (no globs, no dates).")
    ] = False,
    files_per_batch: Annotated[int | None, typer.Option(min=1, help="Most files per task.")] = None,
    batch_bytes: Annotated[int | None, typer.Option(min=1024, help="About this many bytes per task.")] = None,
    workers: _Workers = 0,
    dask_address: _DaskAddress = None,
    follow_external_links: FollowOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Ingest many sources as one Prefect run; run it again after an interruption and it does only the rest."""
    from pipeline.requests import BATCH_BYTES, BackfillRequest

    request = BackfillRequest(
        sources=sources,
        collection=collection,
        profile=_profile(profile, strategy, param, language),
        modified_since=since,
        modified_until=until,
        prune=prune,
        files_per_batch=files_per_batch,
        batch_bytes=batch_bytes or BATCH_BYTES,
        follow_external_links=follow_external_links,
    )
    _run(_flow("backfill", request.flow_params(), workers=workers, dask_address=dask_address), as_json=as_json)


@app.command()
def reindex(
    collection: Annotated[str, typer.Option("--collection", "-c", help="The collection to redo.")],
    profile: Annotated[
        Path | None, typer.Option(help="New chunking profile (TOML); default: stored.")
    ] = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    model: Annotated[
        str | None,
        typer.Option(
            help="Move the collection to this embedding model (search serves the old one until done)."
        ),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="With --model: count the vectors needed and cached, write nothing."),
    ] = False,
    workers: _Workers = 0,
    dask_address: _DaskAddress = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-chunk and re-embed a collection from its source files after a profile change; with --model, embed
    its chunks with another model and switch to it in one transaction when complete."""
    if model is not None and (profile or strategy):
        raise typer.BadParameter("--model keeps the chunks: change the profile in a run of its own")
    if dry_run and model is None:
        raise typer.BadParameter(
            "--dry-run goes with --model here (`chunkyard ingest --dry-run` plans a re-chunk)"
        )
    from pipeline.requests import ModelSwitchRequest, ReindexRequest, RunRequest

    request: RunRequest
    if model is not None:
        _check_model(model)
        request = ModelSwitchRequest(collection=collection, model=model, dry_run=dry_run)
    else:
        prof = _profile(profile, strategy, param) if (profile or strategy) else None
        request = ReindexRequest(collection=collection, profile=prof)
    params = request.flow_params()
    _run(_flow("reindex", params, workers=workers, dask_address=dask_address), as_json=as_json)


@app.command("prune")
def prune_cmd(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Only documents under these paths (default: all).")
    ] = None,
    collection: CollectionOpt = "default",
    soft: Annotated[bool, typer.Option(help="Mark deleted instead of deleting.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete the rows of documents whose source files are gone."""
    from pipeline.requests import PruneRequest

    request = PruneRequest(collection=collection, paths=[str(p) for p in paths or []], soft=soft)
    _run(_flow("prune", request.flow_params()), as_json=as_json)
