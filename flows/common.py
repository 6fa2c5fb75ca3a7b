"""What every flow shares: the batch tasks, their retry rule, the run around them, and the Failed summary."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import psycopg
from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.states import Failed, State
from pydantic import Field

from pipeline import ingest as stages
from pipeline.config import Profile, Settings
from pipeline.errors import ChunkyardError, TransientError
from pipeline.sources import source_uri

#: A collection name as a flow parameter.
CollectionName = Annotated[str, Field(min_length=1, max_length=200)]

#: Bytes of changed files per task. Measured (bench/prefect_overhead.py): a task costs Prefect 0.01-0.15 s
#: and a flow run about 1.2 s, while embedding 256 KiB of text takes 30-60 s on 2 CPU cores (about a second
#: on a GPU), so overhead stays under 5%, and a corpus still splits into enough tasks to keep workers busy.
BATCH_BYTES = 256 * 1024

#: Retry waits for a transient failure (connection lost, timeout, serialization conflict).
RETRY_DELAYS = [1, 5, 15]


class RunFailed(ChunkyardError):
    """Some files failed: the flow ends Failed with this summary; everything else was stored."""

    def __init__(self, message: str, result: dict) -> None:
        super().__init__(message, result)
        self.result = result

    def __str__(self) -> str:
        return str(self.args[0])


def is_transient(exc: BaseException) -> bool:
    """Worth retrying: a lost connection, a timeout, a serialization conflict; never a bad file or a bug."""
    return isinstance(exc, TransientError | psycopg.OperationalError | TimeoutError | ConnectionError)


def retry_transient(task: Any, task_run: Any, state: State) -> bool:
    """Prefect's retry condition: retry only transient failures."""
    try:
        state.result()
    except Exception as exc:
        return is_transient(exc)
    return False


#: Every task: no result caching (each call does real work), retries only for transient failures.
TASK_OPTIONS: dict = dict(
    cache_policy=NO_CACHE,
    retries=len(RETRY_DELAYS),
    retry_delay_seconds=RETRY_DELAYS,
    retry_condition_fn=retry_transient,
)


@task(name="ingest-batch", **TASK_OPTIONS)
def ingest_batch_task(ctx: stages.RunContext, paths: list[str]) -> dict:
    """One batch of files through load..store (one transaction per document); stats as JSON."""
    return stages.ingest_batch(ctx, paths).to_json()


@task(name="prune", **TASK_OPTIONS)
def prune_task(ctx: stages.RunContext, roots: list[str], seen: list[str], soft: bool) -> dict:
    """Delete rows of files under `roots` that this run did not see."""
    return stages.prune_missing(ctx, roots, set(seen), soft=soft).to_json()


@task(name="prune-vanished", **TASK_OPTIONS)
def prune_vanished_task(ctx: stages.RunContext, roots: list[str], soft: bool) -> dict:
    """Delete rows of documents whose source file is gone."""
    return stages.prune_vanished(ctx, roots=roots, soft=soft).to_json()


# ------------------------------------------------------------------------------------------ progress

#: Files done so far, and the run's total when known: set by the CLI for its progress bar.
FilesProgress = Callable[[int, int | None], None]
_progress: FilesProgress | None = None


def set_progress(fn: FilesProgress | None) -> None:
    """Where per-batch progress goes in this process (works with any task runner, Dask included)."""
    global _progress
    _progress = fn


def _advance(n: int, total: int | None = None) -> None:
    if _progress is not None:
        _progress(n, total)


# ------------------------------------------------------------------------------------------- the run


def run_batches(ctx: stages.RunContext, batches: Sequence[list[str]]) -> stages.Stats:
    """One task per batch; a batch whose task failed for good is recorded against each of its files."""
    stats = stages.Stats()
    futures = {}
    for b in batches:
        f = ingest_batch_task.submit(ctx, b)
        futures[f.task_run_id] = (f, b)
    for f in as_completed([f for f, _ in futures.values()]):
        _, batch = futures[f.task_run_id]
        result = f.result(raise_on_failure=False)
        if f.state.is_completed():
            stats.merge(stages.Stats.from_json(result))
        else:
            why = f"batch failed: {type(result).__name__}: {result}".strip()
            for p in batch:
                uri = source_uri(Path(p))
                stats.seen.add(uri)  # seen, so a prune never deletes what merely failed to load
                stats.errors.append((uri, "task", why))
                stats.counts["documents_seen"] += 1
                stats.counts["documents_failed"] += 1
        _advance(len(batch))
    return stats


def ingest_files(
    files: Sequence[str],
    *,
    kind: str,
    collection: str,
    profile: Profile,
    pre: stages.Stats,
    params: dict,
    prune_roots: list[str] | None = None,
    soft_delete: bool = False,
    dry_run: bool = False,
    files_per_batch: int | None = None,
    batch_bytes: int | None = BATCH_BYTES,
) -> dict | State:
    """The body of ingest, backfill and reindex: lock, skip what is done, batches, prune, ledger, summary."""
    settings = Settings()
    ctx, conn = stages.begin_run(
        settings=settings, collection=collection, profile=profile, kind=kind, params=params, dry_run=dry_run
    )
    stats = pre
    try:
        # Resume: files stored unchanged (by a finished or an interrupted earlier run) are not redone.
        todo, done = stages.split_done(ctx, files)
        stats.merge(done)
        stages._report("load", len(files) - len(todo), None)
        _advance(len(files) - len(todo), len(files))
        batches = stages.cut_batches(
            todo, max_files=files_per_batch or settings.files_per_batch, max_bytes=batch_bytes
        )
        stats.merge(run_batches(ctx, batches))
        if prune_roots is not None:
            stats.merge(stages.Stats.from_json(prune_task(ctx, prune_roots, sorted(stats.seen), soft_delete)))
    except BaseException:
        stages.abort_run(conn, ctx, stats)
        raise
    return finish(ctx, stats, stages.end_run(conn, ctx, stats))


def finish(ctx: stages.RunContext, stats: stages.Stats, status: str) -> dict | State:
    """The run's summary; a Failed state carrying it when any file failed."""
    out = stats.to_json()
    out.pop("seen")  # can be huge; the ledger and the documents table have it
    out.update(run_id=ctx.run_id, status=status, collection=ctx.collection)
    if not stats.errors:
        return out
    msg = summary_line(out)
    return Failed(message=msg, data=RunFailed(msg, out))


def summary_line(out: dict) -> str:
    """One line for the Prefect UI and logs: how many files failed, the first reasons, where to look."""
    errs = out["errors"]
    shown = "; ".join(f"{uri.rsplit('/', 1)[-1]}: {msg}" for uri, _, msg in errs[:3])
    more = f" (and {len(errs) - 3} more)" if len(errs) > 3 else ""
    return (
        f"{len(errs)} file(s) failed in run {out['run_id']} of collection {out['collection']!r}, the rest "
        f"was stored: {shown}{more}; all of them: SELECT * FROM ingest_errors WHERE run_id = {out['run_id']}"
    )


def outcome(state: State) -> dict:
    """A flow run's summary from its final state (Failed with failed files included); re-raise a crash."""
    result = state.result(raise_on_failure=False)
    if isinstance(result, RunFailed):
        return result.result
    if isinstance(result, BaseException):
        raise result
    return result
