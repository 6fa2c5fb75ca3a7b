"""How a run's batches and steps are run, and the one retry policy every way of running shares.

`Serial` runs them here, one after another; the Prefect executor (`flows.common`) runs them as tasks.
Both classify failures with `is_transient`, make `ATTEMPTS` attempts with `RETRY_DELAYS` between them,
and after a transient failure wait for the database to answer again (`wait_for_database`) first.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
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
    """Batches one after another in this process; an exception ends the run (the ledger says crashed)."""

    live_progress = True

    def batches(
        self, ctx: RunContext, batches: Sequence[BatchFiles], progress: Progress, read: Mapping[str, Read]
    ) -> Iterator[BatchResult]:
        for b in batches:
            data = carried(b, read)
            yield b, retrying(ctx, lambda b=b, data=data: stages.ingest_batch(ctx, b, progress, read=data))

    def step(self, fn: Callable[..., Stats], ctx: RunContext, *args: Any) -> Stats:
        return retrying(ctx, lambda: fn(ctx, *args))
