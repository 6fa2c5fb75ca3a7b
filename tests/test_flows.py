"""The Prefect flows under Prefect's test harness against the real embedded Postgres."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import numpy as np
import psycopg
import pytest

import flows  # noqa: F401  (quiet Prefect defaults before Prefect is imported)
from flows import serve as scheduling
from flows.backfill import backfill_flow
from flows.common import RunFailed, outcome
from flows.ingest import ingest_flow
from flows.prune import prune_flow
from flows.reindex import reindex_flow
from flows.runners import task_runner
from pipeline import stages, store
from pipeline.config import Profile, Settings, strategy_profile
from pipeline.errors import ConfigError, TransientError
from pipeline.parse import parser_key
from pipeline.requests import RunRequest
from pipeline.run import Run

pytestmark = pytest.mark.slow

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"
TOPICS = ["pelicans", "walruses", "glaciers", "volcanoes", "lighthouses", "orchards"]


@pytest.fixture
def corpus(tmp_path) -> Path:
    """Six small markdown files, two sections each: cheap to embed, enough to make several batches."""
    d = tmp_path / "corpus"
    d.mkdir()
    for i, topic in enumerate(TOPICS):
        (d / f"{i}-{topic}.md").write_text(
            f"# {topic.title()}\n\nThis note is about {topic}. They are remarkable in {i + 2} ways.\n\n"
            f"## Care\n\nLooking after {topic} takes patience, a notebook and {i + 3} volunteers.\n"
        )
    return d


def _state(flow, **params):
    return flow(**params, return_state=True)


def snapshot(conn: psycopg.Connection, collection: str) -> tuple[list[tuple], np.ndarray]:
    """A collection's rows by content (no ids), and its embeddings in the same order."""
    rows = conn.execute(
        """SELECT d.source_uri, d.content_hash, d.chunk_key, s.ordinal, s.fingerprint, s.heading_path,
                  c.ordinal, c.char_start, c.char_end, c.text, c.embed_hash, e.embedding
           FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id JOIN sections s ON s.id = c.section_id JOIN documents d ON d.id = c.document_id
           JOIN collections k ON k.id = c.collection_id
           WHERE k.name = %s ORDER BY d.source_uri, s.ordinal, c.ordinal""",
        (collection,),
    ).fetchall()
    return [r[:-1] for r in rows], np.array([store.as_array(r[-1]) for r in rows])


def assert_same_tables(conn: psycopg.Connection, a: str, b: str) -> None:
    rows_a, emb_a = snapshot(conn, a)
    rows_b, emb_b = snapshot(conn, b)
    assert rows_a and rows_a == rows_b
    # Different batch mixes pad differently: the same text embeds the same up to float noise.
    assert np.allclose(emb_a, emb_b, atol=1e-5)
    counts = conn.execute(
        """SELECT k.name, count(DISTINCT d.id), count(DISTINCT s.id) FROM collections k
           JOIN documents d ON d.collection_id = k.id JOIN sections s ON s.document_id = d.id
           WHERE k.name = ANY(%s) GROUP BY k.name""",
        ([a, b],),
    ).fetchall()
    assert len({c[1:] for c in counts}) == 1, counts


# -------------------------------------------------------------------------------------- scheduling


def test_parse_every_and_sources_file(tmp_path):
    assert scheduling.parse_every("15m") == timedelta(minutes=15)
    assert scheduling.parse_every("1h30m") == timedelta(minutes=90)
    assert scheduling.parse_every("45") == timedelta(seconds=45)
    for bad in ("", "15 minutes", "0s", "m15"):
        with pytest.raises(ConfigError):
            scheduling.parse_every(bad)
    f = tmp_path / "sources.toml"
    f.write_text('[[source]]\npaths = ["docs"]\ncollection = "docs"\nevery = "15m"\n')
    [s] = scheduling.load_schedules(f)
    assert (s.collection, s.every, s.deployment_name) == ("docs", "15m", "ingest-docs")
    f.write_text('[[source]]\npaths = ["docs"]\nevery = "15m"\ncron = "* * * * *"\n')
    with pytest.raises(ConfigError, match="exactly one"):
        scheduling.load_schedules(f)
    f.write_text('[[source]]\npaths = ["docs"]\ncron = "every monday"\n')
    with pytest.raises(ConfigError, match="source 1"):
        scheduling.load_schedules(f)


def test_scheduled_deployment_is_created_with_the_schedule(prefect_api, corpus):
    from prefect import get_client

    every = scheduling.Schedule(paths=[str(corpus)], collection="docs", every="15m")
    nightly = scheduling.Schedule(paths=[str(corpus)], collection="nightly", cron="0 3 * * *")
    ids = [scheduling.deployment(s).apply() for s in (every, nightly)]
    with get_client(sync_client=True) as client:
        dep, night = (client.read_deployment(i) for i in ids)
    assert dep.name == "ingest-docs"
    assert [s.schedule.interval for s in dep.schedules] == [timedelta(minutes=15)]
    assert all(s.active for s in dep.schedules)
    assert dep.parameters["paths"] == [str(corpus.resolve())]
    assert dep.parameters["collection"] == "docs"
    assert [s.schedule.cron for s in night.schedules] == ["0 3 * * *"]
    assert dep.global_concurrency_limit is not None and dep.global_concurrency_limit.limit == 1


# -------------------------------------------------------------------------------------- backfill


def test_backfill_resumes_without_redoing_finished_documents(
    prefect_api, database_url, corpus, conn, monkeypatch
):
    real = stages.ingest_batch
    calls: list[list[str]] = []
    lock = threading.Lock()

    def dies_after_first_batch(ctx, files, read=None):
        with lock:
            calls.append(list(files))
            first = len(calls) == 1
        if not first:
            raise RuntimeError("worker lost")  # the machine went away mid-backfill
        return real(ctx, files, read=read)

    monkeypatch.setattr(stages, "ingest_batch", dies_after_first_batch)
    params = {
        "sources": [str(corpus / "*.md")],
        "collection": "bf",
        "files_per_batch": 2,
        "batch_bytes": None,
    }
    state = _state(backfill_flow, **params)
    assert state.is_failed()
    first = outcome(state)
    assert first["counts"]["documents_new"] == 2 and first["counts"]["documents_failed"] == 4
    assert {e[1] for e in first["errors"]} == {"task"}
    done = conn.execute(
        "SELECT source_uri, id, updated_at, content_hash FROM documents ORDER BY source_uri"
    ).fetchall()
    chunk_ids = conn.execute("SELECT array_agg(id ORDER BY id) FROM chunks").fetchone()[0]
    assert len(done) == 2

    calls.clear()
    monkeypatch.setattr(
        stages, "ingest_batch", lambda ctx, files, read=None: calls.append(list(files)) or real(ctx, files, read=read)
    )
    state = _state(backfill_flow, **params)
    assert state.is_completed()
    again = outcome(state)
    c = again["counts"]
    assert (c["documents_unchanged"], c["documents_new"], c.get("documents_failed", 0)) == (2, 4, 0)
    redone = {f.uri for b in calls for f in b} & {u for u, *_ in done}
    assert not redone, "a finished document was handed to a task again"
    still = conn.execute(
        "SELECT source_uri, id, updated_at, content_hash FROM documents WHERE source_uri = ANY(%s) ORDER BY 1",
        ([u for u, *_ in done],),
    ).fetchall()
    assert still == done
    assert set(chunk_ids) <= set(conn.execute("SELECT array_agg(id) FROM chunks").fetchone()[0])
    statuses = [r[0] for r in conn.execute("SELECT status FROM runs ORDER BY id")]
    assert statuses == ["failed", "completed"]


# ----------------------------------------------------------------------------------- concurrency


def test_two_concurrent_ingests_of_one_collection_equal_one(prefect_api, database_url, corpus, conn):
    params = {"paths": [str(corpus)], "files_per_batch": 2, "batch_bytes": None}
    with ThreadPoolExecutor(2) as pool:
        states = list(pool.map(lambda _: _state(ingest_flow, collection="twice", **params), range(2)))
    assert all(s.is_completed() for s in states)
    counts = sorted((outcome(s)["counts"] for s in states), key=lambda c: c.get("documents_new", 0))
    # The collection lock serializes them: one did all the work, the other found it done.
    assert counts[0].get("documents_unchanged") == 6 and counts[0].get("documents_new", 0) == 0
    assert counts[1]["documents_new"] == 6
    assert _state(ingest_flow, collection="once", **params).is_completed()
    assert_same_tables(conn, "twice", "once")
    dupes = conn.execute(
        "SELECT count(*) FROM (SELECT section_id, ordinal FROM chunks GROUP BY 1, 2 HAVING count(*) > 1) x"
    ).fetchone()[0]
    assert dupes == 0


def test_collection_lock_blocks_the_same_collection_only(database_url, settings):
    def begin(name: str, **kw) -> Run:
        return Run.begin(RunRequest(collection=name, profile=Profile()), settings=settings, **kw)

    holder = begin("a")
    try:
        with pytest.raises(TransientError, match="another run is writing collection 'a'"):
            begin("a", lock_wait=False)
        begin("b", lock_wait=False).finish()
    finally:
        holder.finish()


# ------------------------------------------------------------------------------- retries, failures


def test_transient_failure_is_retried_and_bad_input_is_not(
    prefect_api, database_url, corpus, conn, monkeypatch
):
    (corpus / "9-broken.md").write_bytes(PNG)
    (corpus / "8-boom.md").write_text("# Boom\n\nA file that trips a bug in a stage.\n")
    real_batch, real_write = stages.ingest_batch, store.write_document
    calls: list[str] = []
    failed_once: list[str] = []

    def batch(ctx, files, read=None):
        calls.extend(f.path.name for f in files)
        if any(f.path.name.endswith("boom.md") for f in files):
            raise ValueError("a bug, not a transient failure")
        return real_batch(ctx, files, read=read)

    def flaky_write(conn, **kw):
        if kw["doc"].uri.endswith("0-pelicans.md") and not failed_once:
            failed_once.append(kw["doc"].uri)
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real_write(conn, **kw)

    monkeypatch.setattr(stages, "ingest_batch", batch)
    monkeypatch.setattr(store, "write_document", flaky_write)
    state = _state(ingest_flow, paths=[str(corpus)], collection="flaky", files_per_batch=1, batch_bytes=None)
    assert state.is_failed()
    assert "2 file(s) failed" in state.message and "9-broken.md" in state.message
    with pytest.raises(RunFailed):
        state.result()
    assert calls.count("0-pelicans.md") == 2  # retried once after the lost connection
    assert calls.count("9-broken.md") == 1  # bad input: recorded, never retried
    assert calls.count("8-boom.md") == 1  # a bug: not retried either
    run_id, status, counts = conn.execute("SELECT id, status, counts FROM runs").fetchone()
    assert status == "failed" and counts["documents_failed"] == 2
    errors = dict(
        (uri.rsplit("/", 1)[-1], (stage, msg)) for uri, stage, msg in store.run_errors(conn, run_id)
    )
    assert errors["9-broken.md"][0] == "normalize" and "binary" in errors["9-broken.md"][1]
    assert errors["8-boom.md"] == ("task", "batch failed: ValueError: a bug, not a transient failure")
    stored = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    assert stored == len(TOPICS)  # everything else, including the retried file, is in


# ---------------------------------------------------------------------------------- reindex, prune


def test_reindex_and_prune(prefect_api, database_url, corpus, conn):
    assert _state(ingest_flow, paths=[str(corpus)], collection="rx").is_completed()
    before = conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]
    # same profile: nothing to do
    same = outcome(_state(reindex_flow, collection="rx"))
    assert same["counts"]["documents_unchanged"] == len(TOPICS) and "documents_changed" not in same["counts"]
    # a new profile: every document re-chunked from its source file
    small = strategy_profile("fixed", size=16)
    res = outcome(_state(reindex_flow, collection="rx", profile=small.as_json()))
    assert res["status"] == "completed" and res["counts"]["documents_changed"] == len(TOPICS)
    keys = {r[0] for r in conn.execute("SELECT DISTINCT chunk_key FROM documents")}
    assert keys == {f"{small.fingerprint_for('markdown')}:{Settings().model}{parser_key('markdown')}{small.language_key()}"}
    assert conn.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] > before
    # a vanished source: reindex names it, prune removes it
    (corpus / "0-pelicans.md").unlink()
    gone = outcome(_state(reindex_flow, collection="rx", profile=small.as_json()))
    assert [e[2] for e in gone["errors"]] == [
        "source file is gone (`chunkyard prune -c rx` removes its rows)"
    ]
    pruned = outcome(_state(prune_flow, collection="rx"))
    assert pruned["counts"]["documents_deleted"] == 1
    left = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
    assert left == len(TOPICS) - 1


# ------------------------------------------------------------------------------------------ Dask


def test_local_dask_cluster_gives_the_same_tables(prefect_api, database_url, corpus, conn):
    pytest.importorskip("prefect_dask")
    params = {"paths": [str(corpus)], "files_per_batch": 1, "batch_bytes": None}
    on_dask = ingest_flow.with_options(task_runner=task_runner(workers=2))
    # Dask first, so its workers embed (the cache is empty) rather than read the threads' vectors.
    assert _state(on_dask, collection="dask", **params).is_completed()
    assert _state(ingest_flow, collection="threads", **params).is_completed()
    assert_same_tables(conn, "dask", "threads")


def test_an_existing_dask_cluster_named_by_its_address(prefect_api, database_url, corpus, conn, monkeypatch):
    """CHUNKYARD_DASK_ADDRESS: the tasks of `chunkyard ingest` run on a separate multi-process Dask cluster
    (its scheduler and two worker processes, as a deployment has them), and store what threads store."""
    pytest.importorskip("prefect_dask")
    from flows.run import run_flow
    from flows.runners import local_cluster

    params = {"paths": [str(corpus)], "files_per_batch": 1, "batch_bytes": None}
    monkeypatch.setenv("CHUNKYARD_DATABASE_URL", database_url)
    with local_cluster(2) as cluster:
        monkeypatch.setenv("CHUNKYARD_DASK_ADDRESS", cluster.scheduler_address)
        result = run_flow("ingest", dict(params, collection="remote"))
        on_cluster = set(cluster.scheduler.task_prefixes)  # what the scheduler was given to run
        workers = len(cluster.workers)
    assert result["status"] == "completed" and result["counts"]["documents_new"] == len(list(corpus.iterdir()))
    assert workers == 2 and "ingest_batch_task" in on_cluster
    monkeypatch.delenv("CHUNKYARD_DASK_ADDRESS")
    assert _state(ingest_flow, collection="threads", **params).is_completed()
    assert_same_tables(conn, "remote", "threads")
