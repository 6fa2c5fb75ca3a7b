"""A run's life cycle, in one place: begin (from a request), resume, batches, prune, finish or abort.

Every way of running goes through `Run`: `pipeline.ingest` (the CLI without Prefect, tests, benchmarks,
evaluation), and the Prefect flows, which pass an executor that turns each batch into a task (executors
and the retry policy: `pipeline.executor`). The batch work itself is `stages.ingest_batch`, the same
function in both cases. Progress goes to a reporter passed in (or set for a block of code with
`reporting`), never to a module-global hook.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import NamedTuple

import psycopg

from pipeline import db, store
from pipeline.config import Profile, Settings, check_collection_name
from pipeline.embed import EmbeddingKey, key_for, model_dim, model_languages
from pipeline.errors import ConfigError, TransientError
from pipeline.executor import Executor, Serial, first_line, wait_for_database
from pipeline.lock import take_lock
from pipeline.model import (
    Collection,
    ErrorRecord,
    NoProgress,
    Progress,
    RunContext,
    RunStatus,
    Stage,
    Stats,
    sha256,
)
from pipeline.prune import prune_missing, prune_vanished
from pipeline.reading import read_bytes
from pipeline.requests import RunRequest
from pipeline.sources import SourceFile, cut_batches
from pipeline.stages import Read, is_unchanged, router_for

#: Most bytes of changed files a run holds after resume read them, to hand to their batches (each file is
#: then read once); the files past it are read again by their batch.
CARRY_BYTES = 64 * 1024 * 1024

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
        request: RunRequest,
        *,
        settings: Settings,
        lock_wait: bool = True,
        executor: Executor | None = None,
        progress: Progress | None = None,
        profile: Profile | None = None,
    ) -> Run:
        """Open the ledger row and take the collection's lock (a dry run does neither). A run that switches
        the collection's model may be asked for another model than the active set's. `profile`: the one to
        run with when the request gives none (a reindex's stored one; else the default)."""
        collection = settings.collection if request.collection is None else request.collection
        profile = request.profile or profile or Profile()
        dry_run, switching_model = request.dry_run, request.SWITCHES_MODEL
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
                take_lock(
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
                run_id = store.start_run(conn, coll_id, kind=request.kind, params=request.ledger())
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
            model_limit=request.model_limit,
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

    def ingest(self, files: Sequence[SourceFile], *, files_per_batch: int, batch_bytes: int | None) -> None:
        """Skip what is stored unchanged (resume), cut the rest into batches, run them, merge the tallies.
        Each file is read once: what resume read travels with the file's batch."""
        self.ctx = dataclasses.replace(self.ctx, started=time.time())
        self.progress.add_total("files", len(files))
        todo, read = self.resume(files)
        if not self.ctx.dry_run and todo and self.ctx.vectors is not None:  # indexes built once in finish()
            if store.bulk_load_pays(self.conn, _expected_chunks(todo)):
                store.drop_search_indexes(self.conn, self.ctx.vectors)  # a load that doubles the table
            else:
                store.defer_vector_index(self.conn, self.ctx.vectors)  # the first load of an empty set
        done = len(files) - len(todo)
        self.progress.advance("files", done)
        for stage in ("load", "normalize", "chunk", "store"):
            self.progress.add_total(stage, len(files))
        self.progress.advance("load", done)
        by_path = {str(f.path): f for f in todo}
        cut = cut_batches(list(by_path), max_files=files_per_batch, max_bytes=batch_bytes)
        batches = [[by_path[p] for p in b] for b in cut]
        for batch, result in self.executor.batches(self.ctx, batches, self.progress, read):
            if isinstance(result, BaseException):
                why = f"batch failed: {type(result).__name__}: {result}".strip()
                for f in batch:
                    self.stats.seen.add(f.uri)  # seen, so a prune never deletes what merely failed to load
                    self.stats.counts["documents_seen"] += 1
                    self.fail(f.uri, Stage.TASK, why)
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

    def resume(self, files: Sequence[SourceFile]) -> tuple[list[SourceFile], dict[str, Read]]:
        """Files still to do, and what was read of those among them that are stored (changed since): the
        ones stored unchanged (by a finished or interrupted run) are counted done. Up to CARRY_BYTES of what
        was read is kept for the batches, which then neither read nor hash those files again."""
        if self.ctx.collection_id is None:
            return list(files), {}
        router = router_for(self.ctx)
        stored = store.stored_documents(self.conn, self.ctx.collection_id, [f.uri for f in files])
        todo: list[SourceFile] = []
        read: dict[str, Read] = {}
        held = 0
        for f in files:
            old = stored.get(f.uri)
            if old is not None:
                try:  # the one checked open: no pipe blocks the run, no link leaves the folder
                    data = read_bytes(f)
                except Exception:
                    data = None  # the batch reads it again and reports why
                if data is not None:
                    digest = sha256(data)
                    if is_unchanged(old, data, router, digest=digest):
                        self.stats.seen.add(f.uri)
                        self.stats.counts["documents_seen"] += 1
                        self.stats.counts["documents_unchanged"] += 1
                        continue
                    if held + len(data) <= CARRY_BYTES:
                        read[f.uri] = (data, digest)
                        held += len(data)
            todo.append(f)
        return todo, read

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
        with self.stats.timed("index"):  # what a bulk or first load left to build
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
            log.warning("run %s: chunk quality not recorded (%s)", self.ctx.run_id, first_line(exc))


def _run_key(settings: Settings, coll: Collection | None, switching_model: bool) -> str:
    """The embedding key a run writes with; a model switch runs under its active set's (it is asked for
    another model, which `switch_model` is given)."""
    if switching_model and coll is not None and coll.vectors is not None:
        return coll.vectors.model
    return embedding_model(settings, coll)


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


def _expected_chunks(files: Sequence[SourceFile]) -> int:
    """A rough count of the chunks files will make (about 600 bytes each at the default profile)."""
    return sum(os.path.getsize(f.path) for f in files if os.path.isfile(f.path)) // 600
