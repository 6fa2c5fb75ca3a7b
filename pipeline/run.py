"""A run's life cycle, in one place: begin, resume, batches, prune, finish or abort.

Every way of running goes through `Run`: `pipeline.ingest` (the CLI without Prefect, tests, benchmarks,
evaluation), and the Prefect flows, which pass an executor that turns each batch into a task. The batch
work itself is `stages.ingest_batch`, the same function in both cases. Progress goes to a reporter
passed in (or set for a block of code with `reporting`), never to a module-global hook.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import psycopg

from pipeline import db, stages, store
from pipeline.config import Profile, Settings, check_collection_name
from pipeline.embed import EmbeddingKey, key_for, model_dim, model_languages
from pipeline.errors import ConfigError, DatabaseUnavailable, TransientError
from pipeline.model import (
    Collection,
    ErrorRecord,
    NoProgress,
    Progress,
    RunContext,
    RunKind,
    RunStatus,
    Stage,
    Stats,
)
from pipeline.sources import (
    cut_batches,
    read_bytes,
    source_uri,
    typed,
    uri_path,
)
from pipeline.stages import is_unchanged, router_for

#: Bytes of changed files per batch. Measured (bench/prefect_overhead.py): a task costs Prefect 0.01-0.15 s
#: and a flow run about 1.2 s, while embedding 256 KiB of text takes 30-60 s on 2 CPU cores (about a second
#: on a GPU), so overhead stays under 5%, and a corpus still splits into enough tasks to keep workers busy.
BATCH_BYTES = 256 * 1024

log = logging.getLogger(__name__)

_progress: ContextVar[Progress | None] = ContextVar("chunkyard_progress", default=None)


@contextmanager
def reporting(progress: Progress) -> Iterator[None]:
    """Runs begun inside this block report to `progress` (a context variable: threads do not share it)."""
    token = _progress.set(progress)
    try:
        yield
    finally:
        _progress.reset(token)


# ------------------------------------------------------------------------------------- executors

BatchResult = tuple[list[str], "Stats | BaseException"]


class Executor(Protocol):
    """Runs a run's batches and steps: here, in order (serial), or as Prefect tasks on any task runner."""

    #: True when batches report their stage progress themselves (they run in this process).
    live_progress: bool

    def batches(
        self, ctx: RunContext, batches: Sequence[list[str]], progress: Progress
    ) -> Iterator[BatchResult]: ...

    def step(self, fn: Callable[..., Stats], ctx: RunContext, *args: Any) -> Stats: ...


class Serial:
    """Batches one after another in this process; an exception ends the run (the ledger says crashed)."""

    live_progress = True

    def batches(
        self, ctx: RunContext, batches: Sequence[list[str]], progress: Progress
    ) -> Iterator[BatchResult]:
        for b in batches:
            yield b, retrying(ctx, lambda b=b: stages.ingest_batch(ctx, b, progress))

    def step(self, fn: Callable[..., Stats], ctx: RunContext, *args: Any) -> Stats:
        return retrying(ctx, lambda: fn(ctx, *args))


#: Attempts of one batch or step when the failure is transient (a lost connection, a conflict).
ATTEMPTS = 5


def retrying(ctx: RunContext, call: Callable[[], Stats]) -> Stats:
    """Run `call`; after a transient failure wait for the database (growing pauses) and run it again.

    Redoing a batch is safe: documents it already committed are found unchanged and skipped.
    """
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return call()
        except (TransientError, psycopg.OperationalError) as exc:
            if attempt == ATTEMPTS:
                raise
            log.warning("transient failure (%s); waiting for the database, then retrying", _first_line(exc))
            wait_for_database(ctx.url, seconds=ctx.db_retry_seconds, cause=exc)
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
                f"lost the database ({_first_line(cause)}) and it did not come back within {seconds:.0f} s "
                "(CHUNKYARD_DB_RETRY_SECONDS); nothing already stored was lost: documents are committed one "
                "by one, so running the same command again resumes where this run stopped"
            ) from cause
        time.sleep(pause)
        pause = min(pause * 2, 10.0)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class RunResult(NamedTuple):
    """What a finished run did, its ledger id (None for a dry run) and its status."""

    stats: Stats
    run_id: int | None
    status: RunStatus

    def summary(self, collection: str) -> dict:
        """The run as JSON for the CLI and the flows (without `seen`, which can be huge)."""
        out = self.stats.to_json()
        out.pop("seen")
        out.update(run_id=self.run_id, status=str(self.status), collection=collection)
        return out


# ------------------------------------------------------------------------------------------- Run

#: Ledger ids of the runs begun in this process: a command ended by a signal counts what they stored.
BEGUN: list[int] = []


class Run:
    """One run: its ledger row, its collection lock (held by `conn`), its tally and its progress."""

    def __init__(
        self, ctx: RunContext, conn: psycopg.Connection, *, executor: Executor, progress: Progress
    ) -> None:
        self.ctx, self.conn, self.executor, self.progress = ctx, conn, executor, progress
        self.stats = Stats()
        self.status = RunStatus.RUNNING
        if ctx.run_id is not None:
            BEGUN.append(ctx.run_id)

    @classmethod
    def begin(
        cls,
        *,
        settings: Settings,
        collection: str,
        profile: Profile,
        kind: RunKind,
        params: dict | None = None,
        dry_run: bool = False,
        lock_wait: bool = True,
        executor: Executor | None = None,
        progress: Progress | None = None,
        model_limit: int | None = None,
        switching_model: bool = False,
    ) -> Run:
        """Open the ledger row and take the collection's lock (a dry run does neither). A run that switches
        the collection's model may be asked for another model than the active set's."""
        check_collection_name(collection)
        url = db.database_url(settings)
        conn = db.connect(url)
        try:
            coll = store.get_collection(conn, collection)
            key = _run_key(settings, coll, switching_model)  # an asked-for model is checked before any write
            if dry_run:
                coll_id, run_id = (coll.id if coll else None), None
            else:
                if coll is None:
                    dim = model_dim(settings.model)
                    coll = store.ensure_collection(
                        conn, collection, profile=profile.as_json(), model=key, dim=dim
                    )  # its set's languages are recorded under the lock, below
                coll_id = coll.id
                _take_lock(
                    conn, collection, coll_id, wait=lock_wait, timeout_s=settings.lock_timeout_s,
                    explicit="lock_timeout_s" in settings.model_fields_set,
                )  # fmt: skip
                # Read again under the lock: a run that held it (a model switch) may have replaced the active
                # set and its model since, and the set read before may be retired or dropped by now.
                held = store.get_collection(conn, collection)
                if held is None or held.id != coll_id:
                    raise TransientError(
                        f"collection {collection!r} was dropped while this run waited for its lock; run again"
                    )
                key = _run_key(settings, held, switching_model)
                coll = store.ensure_collection(
                    conn, collection, profile=profile.as_json(), model=key, dim=0, languages=model_languages(key)
                )
                run_id = store.start_run(conn, coll_id, kind=kind, params=params or {})
                store.drop_retired_sets(conn, coll_id)  # those a model switch could not drop at once
        except BaseException:
            conn.close()  # and with it the lock, if it was taken
            raise
        ctx = RunContext(
            url=url,
            run_id=run_id,
            collection_id=coll_id,
            collection=collection,
            profile=profile.as_json(),
            model=key,
            dry_run=dry_run,
            device=settings.device,
            embed_batch_size=settings.embed_batch_size,
            model_limit=model_limit,
            db_retry_seconds=settings.db_retry_seconds,
            vectors=coll.vectors.id if coll is not None and coll.vectors else None,
            chunk_model=coll.model if coll is not None and coll.model != key else None,
        )
        return cls(
            ctx, conn, executor=executor or Serial(), progress=progress or _progress.get() or NoProgress()
        )

    def __enter__(self) -> Run:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is not None and self.status is RunStatus.RUNNING:
            self.abort()

    # ----------------------------------------------------------------------------------- the tally

    def fail(self, uri: str, stage: Stage, message: str) -> None:
        """A file failed outside a batch (discovery, a batch lost for good): counted and written now."""
        rec = self.stats.fail(uri, stage, message)
        self._record([rec])

    def add(self, stats: Stats, *, recorded: bool = True) -> None:
        """Merge a part's tally; `recorded=False` when its errors are not in ingest_errors yet."""
        self.stats.merge(stats)
        if not recorded:
            self._record(stats.errors)

    def _record(self, errors: Sequence[ErrorRecord]) -> None:
        if self.ctx.run_id is not None and errors:
            run_id = self.ctx.run_id
            self._with_conn(lambda conn: [store.record_error(conn, run_id, *rec) for rec in errors])

    def _with_conn(self, write: Callable[[psycopg.Connection], object]) -> None:
        """Write through the run's own connection; if the database went away, wait for it, reconnect and
        take the collection's lock again (it went with the old connection), then write once more."""
        try:
            write(self.conn)
            return
        except psycopg.OperationalError as exc:
            wait_for_database(self.ctx.url, seconds=self.ctx.db_retry_seconds, cause=exc)
        self.conn.close()
        self.conn = db.connect(self.ctx.url)
        if self.ctx.collection_id is not None and self.ctx.run_id is not None:
            store.lock_collection(self.conn, self.ctx.collection_id)
        write(self.conn)

    # ------------------------------------------------------------------------------------ the work

    def ingest(
        self,
        files: Sequence[str],
        *,
        files_per_batch: int,
        batch_bytes: int | None,
        roots: Sequence[str] = (),
    ) -> None:
        """Skip what is stored unchanged (resume), cut the rest into batches, run them, merge the tallies.
        `roots`: the folders the files were found under, which every read of them stays in."""
        self.ctx = dataclasses.replace(self.ctx, roots=tuple(roots), started=time.time())
        self.progress.add_total("files", len(files))
        todo = self.resume(files)
        if not self.ctx.dry_run and store.bulk_load_pays(self.conn, _expected_chunks(todo)):
            assert self.ctx.vectors is not None
            store.drop_search_indexes(
                self.conn, self.ctx.vectors
            )  # a large first load: built once in finish()
        done = len(files) - len(todo)
        self.progress.advance("files", done)
        for stage in ("load", "normalize", "chunk", "store"):
            self.progress.add_total(stage, len(files))
        self.progress.advance("load", done)
        batches = cut_batches(todo, max_files=files_per_batch, max_bytes=batch_bytes)
        for batch, result in self.executor.batches(self.ctx, batches, self.progress):
            if isinstance(result, BaseException):
                why = f"batch failed: {type(result).__name__}: {result}".strip()
                for p in batch:
                    uri = source_uri(Path(p))
                    self.stats.seen.add(uri)  # seen, so a prune never deletes what merely failed to load
                    self.stats.counts["documents_seen"] += 1
                    self.fail(uri, Stage.TASK, why)
            else:
                self.add(result)
                if not self.executor.live_progress:
                    self._advance_stages(len(batch), result)
            self.progress.advance("files", len(batch))

    def _advance_stages(self, files: int, stats: Stats) -> None:
        """Stage progress of a batch that ran elsewhere, reported when its result arrives."""
        for stage in ("load", "normalize", "chunk", "store"):
            self.progress.advance(stage, files)
        n = stats.counts.get("chunks_embedded", 0) + stats.counts.get("chunks_cached", 0)
        self.progress.add_total("embed", n)
        self.progress.advance("embed", n)

    def resume(self, files: Sequence[str]) -> list[str]:
        """Files still to do; those stored unchanged (by a finished or interrupted run) are counted done."""
        if self.ctx.collection_id is None:
            return list(files)
        router = router_for(self.ctx)
        by_uri = {source_uri(Path(p)): p for p in files}
        stored = store.stored_documents(self.conn, self.ctx.collection_id, list(by_uri))
        todo = []
        for uri, p in by_uri.items():
            old = stored.get(uri)
            if old is not None:
                found, _ = typed([p], roots=self.ctx.roots)
                try:  # the one checked open: no pipe blocks the run, no link leaves the folder
                    data = read_bytes(found[0]) if found else None
                except Exception:
                    data = None  # the batch reports why
                if data is not None and is_unchanged(old, data, router):
                    self.stats.seen.add(uri)
                    self.stats.counts["documents_seen"] += 1
                    self.stats.counts["documents_unchanged"] += 1
                    continue
            todo.append(p)
        return todo

    def switch_model(self, key: str, *, batch: int) -> None:
        """Embed every chunk into a new set of embedding key `key` and make it the one search reads."""
        from pipeline.reembed import switch_model

        progress = self.progress if self.executor.live_progress else None
        self.add(self.executor.step(switch_model, self.ctx, key, batch, progress))

    def prune_missing(self, roots: Sequence[str], *, soft: bool) -> None:
        """Delete rows of documents under `roots` that this run did not see."""
        self.add(self.executor.step(prune_missing, self.ctx, list(roots), sorted(self.stats.seen), soft))

    def prune_vanished(self, roots: Sequence[str], *, soft: bool) -> None:
        """Delete rows of documents whose source file is gone (only under `roots` when given)."""
        self.add(self.executor.step(prune_vanished, self.ctx, list(roots), soft))

    # ------------------------------------------------------------------------------------ the end

    def finish(self) -> RunResult:
        """Write the ledger row (status, counts, timings), refresh BM25 statistics, release the lock."""
        self.status = RunStatus.FAILED if self.stats.errors else RunStatus.COMPLETED
        try:
            if self.ctx.run_id is not None:
                self._with_conn(self._close_ledger)
        finally:
            self.conn.close()
        return RunResult(self.stats, self.ctx.run_id, self.status)

    def abort(self) -> None:
        """Mark the ledger row crashed, with what was done so far, and release the connection (and lock)."""
        self.status = RunStatus.CRASHED
        try:
            if self.ctx.run_id is not None and not self.conn.closed:
                self._write_ledger()
        except psycopg.Error:
            pass  # the database is what failed: the next run marks this one crashed
        finally:
            self.conn.close()

    def _write_ledger(self, conn: psycopg.Connection | None = None) -> None:
        assert self.ctx.run_id is not None
        counts, timings = dict(self.stats.counts), self.stats.timings
        store.finish_run(
            conn or self.conn, self.ctx.run_id, status=self.status, counts=counts, timings=timings
        )

    def _close_ledger(self, conn: psycopg.Connection) -> None:
        """The end of a run in the database: BM25 statistics, chunk quality, the ledger row, the lock released."""
        store.refresh_fts_stats(conn, self.ctx.collection_id, [self.ctx.vectors] if self.ctx.vectors else [])
        self._note_languages(conn)
        self._measure_quality(conn)
        self._write_ledger(conn)
        store.unlock_collection(conn, self.ctx.collection_id)

    def _note_languages(self, conn: psycopg.Connection) -> None:
        """Say once per run, for each language without a Postgres stemmer, that its full text is `simple`."""
        assert self.ctx.run_id is not None and self.ctx.collection_id is not None
        for lang, uri in store.unstemmed_languages(conn, self.ctx.collection_id, self.ctx.run_id):
            self.stats.warnings.append((uri, (
                f"language {lang!r} (this and other documents) has no Postgres text-search configuration: its "
                "full text is matched word for word ('simple': no stemming, no stop words)"
            )))  # fmt: skip

    def _measure_quality(self, conn: psycopg.Connection) -> None:
        """Chunk quality of the collection as this run leaves it, on its ledger row (runs.quality), measured
        under the run's lock; a figure that cannot be computed is logged, never fails the run."""
        assert self.ctx.run_id is not None and self.ctx.collection_id is not None
        try:
            with self.stats.timed("quality"):
                store.record_quality(
                    conn,
                    self.ctx.run_id,
                    self.ctx.collection_id,
                    carry_over=not store.quality_changed(self.stats.counts),
                )
        except psycopg.OperationalError:
            raise  # the database went away: _with_conn waits for it and closes the ledger again
        except psycopg.Error as exc:
            log.warning("run %s: chunk quality not recorded (%s)", self.ctx.run_id, _first_line(exc))


def _run_key(settings: Settings, coll: Collection | None, switching_model: bool) -> str:
    """The embedding key a run writes with; a model switch runs under its active set's (it is asked for
    another model, which `switch_model` is given)."""
    if switching_model and coll is not None and coll.vectors is not None:
        return coll.vectors.model
    return embedding_model(settings, coll)


def _take_lock(
    conn: psycopg.Connection,
    collection: str,
    collection_id: int,
    *,
    wait: bool,
    timeout_s: float,
    explicit: bool = False,
) -> None:
    """Take the collection's lock; while it waits, say once who holds it, and give up after `timeout_s`
    (0: never) with a line that says what to do: any role that can connect can hold this lock. A holder
    whose role may write runs is taken for another run and waited for without a limit, unless the limit
    was set (`explicit`)."""
    if store.lock_collection(conn, collection_id, wait=False):
        return
    if not wait:
        raise TransientError(f"another run is writing collection {collection!r}; try again when it ends")
    holders = store.lock_holders(conn, collection_id)
    who = ", ".join(h.describe() for h in holders) or "a session that has just released it"
    if holders and all(h.writer for h in holders) and not explicit:
        timeout_s = 0  # another run (a long backfill, a model switch): queue behind it, as runs always have
    limit = f"up to {timeout_s:g} s" if timeout_s > 0 else "with no time limit"
    log.warning(
        "collection %r is locked by %s; waiting %s (CHUNKYARD_LOCK_TIMEOUT_S)", collection, who, limit
    )
    if store.lock_collection(conn, collection_id, timeout_s=timeout_s):
        return
    holders = store.lock_holders(conn, collection_id) or holders
    who = ", ".join(h.describe() for h in holders) or who
    end = "; ".join(f"SELECT pg_terminate_backend({h.pid})" for h in holders)
    raise TransientError(
        f"collection {collection!r} is still locked after {timeout_s:g} s by {who}: if that is a chunkyard run, "
        "run again when it ends (or wait longer: CHUNKYARD_LOCK_TIMEOUT_S, 0 = no limit); if it is not, end "
        f"that session{f' ({end})' if end else ''}"
    )


def embedding_model(settings: Settings, coll: Collection | None) -> str:
    """The embedding key a run writes with: a new collection's from the settings (model + backend: another
    backend's vectors are another model's), an existing one's its active set's. Asking for another model
    for an existing collection is an error that says how to switch (a reindex with --model)."""
    key = key_for(settings)
    if coll is None or coll.vectors is None:
        return str(key)
    asked, stored = settings.model_fields_set, EmbeddingKey.parse(coll.vectors.model)
    other_model = "model" in asked and key.model != stored.model
    other_backend = (
        "embed_backend" in asked and settings.embed_backend != "auto" and key.backend != stored.backend
    )
    if other_model or other_backend:
        raise ConfigError(
            f"collection {coll.name!r} is embedded with {coll.vectors.model}, and this run asks for {key}; "
            f"to move it to the new model while search keeps serving the old one, run "
            f"`chunkyard reindex --collection {coll.name} --model {key.model}`; to keep it, unset "
            "CHUNKYARD_MODEL / CHUNKYARD_EMBED_BACKEND for this collection"
        )
    return coll.vectors.model


def _expected_chunks(paths: Sequence[str]) -> int:
    """A rough count of the chunks files will make (about 600 bytes each at the default profile)."""
    return sum(os.path.getsize(p) for p in paths if os.path.isfile(p)) // 600


# ------------------------------------------------------------------------------- steps (any worker)


def prune_missing(ctx: RunContext, roots: list[str], seen: list[str], soft: bool) -> Stats:
    """Delete rows of documents under `roots` that were not seen in this run."""
    stats = Stats()
    if ctx.collection_id is None:
        return stats
    with stats.timed("prune"), db.connection(ctx.url) as conn:
        n_docs, n_chunks = store.prune(
            conn, ctx.collection_id, roots=roots, seen=set(seen), soft=soft, dry_run=ctx.dry_run
        )
    stats.counts["documents_deleted"] += n_docs
    stats.counts["chunks_deleted"] += n_chunks
    return stats


def prune_vanished(ctx: RunContext, roots: list[str], soft: bool) -> Stats:
    """Delete rows of documents whose local source file is gone (only under `roots` when given)."""
    stats = Stats()
    if ctx.dry_run or ctx.collection_id is None:
        return stats
    prefixes = tuple(r.rstrip("/") + "/" for r in roots)
    with stats.timed("prune"), db.connection(ctx.url) as conn:
        live = store.source_uris(conn, ctx.collection_id)
        under = [u for u in live if not roots or u in roots or u.startswith(prefixes)]
        gone = [u for u in under if (p := uri_path(u)) is not None and not os.path.lexists(p)]
        n_docs, n_chunks = store.prune(
            conn, ctx.collection_id, roots=gone, seen=set(live) - set(gone), soft=soft
        )
    stats.counts["documents_deleted"] += n_docs
    stats.counts["chunks_deleted"] += n_chunks
    return stats
