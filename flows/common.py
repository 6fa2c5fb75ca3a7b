"""What every flow shares: the Prefect executor (one task per batch), its retry rule, and the Failed summary."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.futures import as_completed
from prefect.states import Failed, State

from pipeline import stages
from pipeline.errors import ChunkyardError
from pipeline.executor import ATTEMPTS, RETRY_DELAYS, BatchFiles, BatchResult, attempt, carried, is_transient
from pipeline.model import Progress, RunContext, Stats
from pipeline.requests import BATCH_BYTES, CollectionName
from pipeline.run import RunResult
from pipeline.sources import SourceFile
from pipeline.stages import Read

__all__ = [
    "BATCH_BYTES",
    "CollectionName",
    "PrefectExecutor",
    "RunFailed",
    "TASK_OPTIONS",
    "finish",
    "outcome",
]


class RunFailed(ChunkyardError):
    """Some files failed: the flow ends Failed with this summary; everything else was stored."""

    def __init__(self, message: str, result: dict) -> None:
        super().__init__(message, result)
        self.result = result

    def __str__(self) -> str:
        return str(self.args[0])


def retry_transient(task: Any, task_run: Any, state: State) -> bool:
    """Prefect's retry condition: the retry policy's (`pipeline.executor.is_transient`)."""
    try:
        state.result()
    except Exception as exc:
        return is_transient(exc)
    return False


#: Every task: no result caching (each call does real work); the retry policy of `pipeline.executor`
#: (its attempts, delays and exceptions; the task body waits for the database before a retry).
TASK_OPTIONS: dict = dict(
    cache_policy=NO_CACHE,
    retries=ATTEMPTS - 1,
    retry_delay_seconds=list(RETRY_DELAYS),
    retry_condition_fn=retry_transient,
)


@task(name="ingest-batch", **TASK_OPTIONS)
def ingest_batch_task(ctx: RunContext, files: list[SourceFile], read: dict[str, Read] | None = None) -> dict:
    """One batch of files through load..store (one transaction per document); stats as JSON. `read`: what
    resume read of its files already."""
    return attempt(ctx, lambda: stages.ingest_batch(ctx, files, read=read)).to_json()


@task(name="step", **TASK_OPTIONS)
def step_task(fn: Callable[..., Stats], ctx: RunContext, args: list) -> dict:
    """A step of a run that is not a batch (prune), with the same retry policy."""
    return attempt(ctx, lambda: fn(ctx, *args)).to_json()


class PrefectExecutor:
    """A run's batches as Prefect tasks on the flow's task runner (threads, or Dask workers)."""

    live_progress = False  # tasks may run in other processes: progress is reported as results arrive

    def batches(
        self, ctx: RunContext, batches: Sequence[BatchFiles], progress: Progress, read: Mapping[str, Read]
    ) -> Iterator[BatchResult]:
        futures = {}
        for b in batches:
            f = ingest_batch_task.submit(ctx, b, carried(b, read))
            futures[f.task_run_id] = (f, b)
        for f in as_completed([f for f, _ in futures.values()]):
            _, batch = futures[f.task_run_id]
            result = f.result(raise_on_failure=False)
            yield batch, (Stats.from_json(result) if f.state.is_completed() else result)

    def step(self, fn: Callable[..., Stats], ctx: RunContext, *args: Any) -> Stats:
        named = step_task.with_options(name=fn.__name__.replace("_", "-"))
        return Stats.from_json(named(fn, ctx, list(args)))


def finish(result: RunResult, collection: str) -> dict | State:
    """The run's summary; a Failed state carrying it when any file failed."""
    out = result.summary(collection)
    if not result.stats.errors:
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
