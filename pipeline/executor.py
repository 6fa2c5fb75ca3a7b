"""How a run's batches and steps are run, and the one retry policy every way of running shares.

`Serial` runs them here, one after another; the Prefect executor (`flows.common`) runs them as tasks.
Both classify failures with `is_transient`, make `ATTEMPTS` attempts with `RETRY_DELAYS` between them,
and after a transient failure wait for the database to answer again (`wait_for_database`) first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol

import psycopg

from pipeline import stages
from pipeline.errors import DatabaseUnavailable, TransientError
from pipeline.model import Progress, RunContext, Stats
from pipeline.sources import SourceFile
from pipeline.stages import Read

log = logging.getLogger(__name__)

#: The files one batch (one task) ingests.
BatchFiles = list[SourceFile]
#: A batch and what came of it: its tally, or the exception that lost it for good.
BatchResult = tuple[BatchFiles, "Stats | BaseException"]

# ---------------------------------------------------------------------------------- retry policy

#: Failures worth another attempt: a lost connection, a timeout, a serialization conflict, a lock held.
#: A bad file (InputError), a bad setting (ConfigError) or a bug is never retried.
TRANSIENT: tuple[type[BaseException], ...] = (
    TransientError,
    psycopg.OperationalError,
    TimeoutError,
    ConnectionError,
)

#: Seconds between attempts of a batch or step after a transient failure (after the database answers).
RETRY_DELAYS: tuple[int, ...] = (1, 5, 15)

#: Attempts of one batch or step in all.
ATTEMPTS = len(RETRY_DELAYS) + 1


def is_transient(exc: BaseException) -> bool:
    """Worth retrying; a database that stayed away its whole wait (DatabaseUnavailable) is not: the run stops."""
    return isinstance(exc, TRANSIENT) and not isinstance(exc, DatabaseUnavailable)


def attempt(ctx: RunContext, call: Callable[[], Stats]) -> Stats:
    """One attempt of `call`; after a transient failure, wait for the database before raising it again."""
    try:
        return call()
    except Exception as exc:
        if is_transient(exc):
            log.warning("transient failure (%s); waiting for the database, then retrying", first_line(exc))
            wait_for_database(ctx.url, seconds=ctx.db_retry_seconds, cause=exc)
        raise


def retrying(ctx: RunContext, call: Callable[[], Stats]) -> Stats:
    """`call` under the retry policy, in this process (Prefect applies the same policy to its tasks).

    Redoing a batch is safe: documents it already committed are found unchanged and skipped.
    """
    for n in range(ATTEMPTS):
        try:
            return attempt(ctx, call)
        except Exception as exc:
            if n + 1 == ATTEMPTS or not is_transient(exc):
                raise
            time.sleep(RETRY_DELAYS[n])
    raise AssertionError("unreachable")


def wait_for_database(url: str, *, seconds: float, cause: BaseException) -> None:
    """Return once the database answers; DatabaseUnavailable when it has not within `seconds`."""
    deadline = time.monotonic() + seconds
    pause = 0.5
    while True:
        try:
            psycopg.connect(url, connect_timeout=5).close()
            return
        except psycopg.OperationalError:
            pass
        if time.monotonic() + pause > deadline:
            raise DatabaseUnavailable(
                f"lost the database ({first_line(cause)}) and it did not come back within {seconds:.0f} s "
                "(CHUNKYARD_DB_RETRY_SECONDS); nothing already stored was lost: documents are committed one "
                "by one, so running the same command again resumes where this run stopped"
            ) from cause
        time.sleep(pause)
        pause = min(pause * 2, 10.0)


def first_line(exc: BaseException) -> str:
    """An exception's first line (libpq adds hints on further ones), or its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


# ------------------------------------------------------------------------------------- executors


class Executor(Protocol):
    """Runs a run's batches and steps: here, in order (serial), or as Prefect tasks on any task runner."""

    #: True when batches report their stage progress themselves (they run in this process).
    live_progress: bool

    def batches(
        self, ctx: RunContext, batches: Sequence[BatchFiles], progress: Progress, read: Mapping[str, Read]
    ) -> Iterator[BatchResult]:
        """Run each batch; `read`: what resume read (by uri), handed to the batch that holds the file."""
        ...

    def step(self, fn: Callable[..., Stats], ctx: RunContext, *args: Any) -> Stats: ...


def carried(batch: Sequence[SourceFile], read: Mapping[str, Read]) -> dict[str, Read]:
    """What resume read of a batch's files: it travels with the batch, so each file is read once."""
    return {f.uri: read[f.uri] for f in batch if f.uri in read}


class Serial:
    """Batches in this process, in order, the stages of consecutive ones overlapped (`overlapped`); an
    exception ends the run (the ledger says crashed)."""

    live_progress = True

    def batches(
        self, ctx: RunContext, batches: Sequence[BatchFiles], progress: Progress, read: Mapping[str, Read]
    ) -> Iterator[BatchResult]:
        if len(batches) > 1:
            yield from overlapped(ctx, batches, progress, read)
            return
        for b in batches:
            yield b, whole(ctx, b, progress, read)

    def step(self, fn: Callable[..., Stats], ctx: RunContext, *args: Any) -> Stats:
        return retrying(ctx, lambda: fn(ctx, *args))


def whole(ctx: RunContext, batch: BatchFiles, progress: Progress, read: Mapping[str, Read]) -> Stats:
    """One batch, its stages one after another, under the retry policy."""
    data = carried(batch, read)
    return retrying(ctx, lambda: stages.ingest_batch(ctx, batch, progress, read=data))


def overlapped(
    ctx: RunContext, batches: Sequence[BatchFiles], progress: Progress, read: Mapping[str, Read]
) -> Iterator[BatchResult]:
    """Batches in order as a pipeline of three: while this thread embeds batch i (the model, the one thing
    that should be busy all the time), a thread loads, parses and chunks batch i+1 (the parsing and chunking
    in the guard's worker process) and another stores batch i-1. Each batch has its own connections and
    tally; a batch's part that fails transiently is done again the serial way (`whole`: safe, what it
    committed is found unchanged), after the database answers; any other failure ends the run, as in serial."""
    prep, put = ThreadPoolExecutor(1, "chunkyard-prepare"), ThreadPoolExecutor(1, "chunkyard-store")
    if not ctx.dry_run:  # the model loads while the first batch is prepared
        put.submit(stages.load_model, ctx)
    try:

        def prepare(b: BatchFiles) -> Future[stages.Prepared]:
            return prep.submit(stages.prepare_batch, ctx, b, progress, read=carried(b, read))

        def settled(b: BatchFiles, call: Callable[[], Stats]) -> Stats:
            try:
                return call()
            except Exception as exc:
                if not is_transient(exc):
                    raise
                log.warning("transient failure (%s); the batch runs again on its own", first_line(exc))
                wait_for_database(ctx.url, seconds=ctx.db_retry_seconds, cause=exc)
                return whole(ctx, b, progress, read)

        ahead = prepare(batches[0])
        storing: tuple[BatchFiles, Callable[[], Stats]] | None = None
        for i, b in enumerate(batches):
            current, ahead = ahead, prepare(batches[i + 1]) if i + 1 < len(batches) else None
            try:  # embed here, now; a failure is settled when this batch's turn to report comes
                p = current.result()
                done: Callable[[], Stats] = put.submit(stages.store_batch, p, stages.embed_batch(p)).result
            except Exception as exc:  # noqa: BLE001 - settled in order below
                done = _raiser(exc)
            if storing is not None:
                yield storing[0], settled(*storing)
            storing = (b, done)
        if storing is not None:
            yield storing[0], settled(*storing)
    finally:  # after a failure (or an interrupt), what has not started is not started
        for pool in (prep, put):
            pool.shutdown(wait=True, cancel_futures=True)


def _raiser(exc: BaseException) -> Callable[[], Stats]:
    def again() -> Stats:
        raise exc

    return again
