"""The collection lock: a run queued behind a model switch writes with the set the switch made active, and a
lock held by anyone else is waited for a bounded time, with one line that says who holds it."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable

import psycopg
import pytest

from pipeline import store
from pipeline.config import Settings
from pipeline.errors import TransientError
from pipeline.ingest import run_ingest, run_model_switch
from pipeline.run import RunResult
from pipeline.search import search
from pipeline.store.ledger import LOCK_CLASS
from tests.test_models import wide_model  # noqa: F401  (the fixture)
from tests.test_roles import as_role, login  # noqa: F401  (the fixture)

PELICANS = "# Pelican feeding\n\nBrown pelicans plunge-dive from the air to scoop anchovies into their throat pouch.\n"


def _waiters(conn: psycopg.Connection, collection_id: int) -> int:
    """Sessions queued on the collection's lock (not granted yet)."""
    n = conn.execute(
        """SELECT count(*) FROM pg_locks l
           WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 2
             AND l.classid = hashtext('chunkyard:collection')::oid AND l.objid = %s::oid""",
        (collection_id,),
    ).fetchone()[0]
    conn.commit()
    return n


def _until(cond: Callable[[], bool], what: str, seconds: float = 240) -> None:
    deadline = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.05)


def _in_thread(fn: Callable[[], RunResult]) -> tuple[threading.Thread, list]:
    out: list = []

    def body() -> None:
        try:
            out.append(fn())
        except BaseException as exc:  # reported in the test's thread
            out.append(exc)

    t = threading.Thread(target=body)
    t.start()
    return t, out


@pytest.mark.slow
@pytest.mark.parametrize("old_set", ["dropped", "kept by a search"])
def test_an_ingest_queued_behind_a_model_switch_writes_into_the_new_active_set(
    docs,
    tmp_path,
    settings,
    conn,
    wide_model,  # noqa: F811
    old_set,
):
    """Lock held; a model switch queues on it, then an ingest of a new file (it reads the collection before
    it waits); the lock is released: the switch runs first and retires the old set (dropped, or kept because
    a search still reads it), then the ingest runs. Its chunks must be embedded by the new model into the new
    active set (vector search finds them) and none may land in the retired set."""
    run_ingest([docs], settings=settings)
    coll = store.get_collection(conn, "default")
    assert coll is not None and coll.vectors is not None
    old = coll.vectors.id
    new = tmp_path / "new"
    new.mkdir()
    (new / "pelicans.md").write_text(PELICANS, encoding="utf-8")

    holder = psycopg.connect(settings.database_url, autocommit=True)
    reader = psycopg.connect(settings.database_url)
    try:
        assert store.lock_collection(holder, coll.id, wait=False)
        switch, switched = _in_thread(lambda: run_model_switch("default", wide_model, settings=settings))
        _until(lambda: _waiters(conn, coll.id) == 1, "the switch waits for the lock")
        ingest, ingested = _in_thread(lambda: run_ingest([new], settings=settings))
        _until(lambda: _waiters(conn, coll.id) == 2, "the ingest waits behind it")
        if old_set == "kept by a search":  # a search still reading the old set: the switch cannot drop it
            reader.execute(f"SELECT count(*) FROM chunk_vectors_{old}").fetchone()
        store.unlock_collection(holder, coll.id)
        switch.join(300)
        ingest.join(300)
    finally:
        reader.close()
        holder.close()
    assert not switch.is_alive() and not ingest.is_alive()
    assert isinstance(switched[0], RunResult) and switched[0].stats.counts["switched"] == 1, switched
    assert isinstance(ingested[0], RunResult), ingested
    assert ingested[0].status == "completed", ingested[0].stats.errors
    assert ingested[0].stats.counts["documents_new"] == 1

    sets = conn.execute(
        "SELECT id, model, dim, status FROM embedding_sets WHERE collection_id = %s ORDER BY id", (coll.id,)
    ).fetchall()
    conn.commit()
    active = [s for s in sets if s[3] == "active"]
    assert len(active) == 1 and active[0][2] == 768 and active[0][1] != coll.vectors.model, sets
    # every chunk, the new document's too, has a vector in the active set, and none is in another set
    missing = conn.execute(
        """SELECT count(*) FROM chunks c WHERE c.collection_id = %s
           AND NOT EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = c.id)""",
        (coll.id,),
    ).fetchone()[0]
    elsewhere = conn.execute(
        """SELECT count(*) FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id
                                                JOIN documents d ON d.id = c.document_id
           WHERE d.source_uri LIKE '%%pelicans.md' AND v.set_id <> %s""",
        (active[0][0],),
    ).fetchone()[0]
    conn.commit()
    assert missing == 0 and elsewhere == 0
    hits = search("how do pelicans catch fish?", settings=settings, k=1, mode="vector")
    assert hits and hits[0].source_uri.endswith("pelicans.md"), hits


def _as(url: str, role: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**{**conninfo_to_dict(url), "user": role})


@pytest.mark.subprocess
def test_a_lock_held_by_another_role_ends_the_wait_in_time_with_a_line_naming_it(
    tmp_path,
    settings,
    conn,
    login,  # noqa: F811
    caplog,
):
    """A role with no chunkyard grants takes the collection's advisory lock (any role may): an ingest, run
    as the pipeline's writer role, says once who holds it, gives up after CHUNKYARD_LOCK_TIMEOUT_S with one
    line naming that role, and leaves no ledger row 'running'; from the CLI, the same line and exit 2."""
    (tmp_path / "a.md").write_text("# Herons\n\nHerons stand still in shallow water.\n")
    writer = _as(settings.database_url, login("chunkyard_writer"))
    run_ingest([tmp_path], settings=Settings(database_url=writer))
    coll = store.get_collection(conn, "default")
    assert coll is not None
    (tmp_path / "b.md").write_text("# Egrets\n\nEgrets wade in shallow water too.\n")
    squatter = login()
    with as_role(settings.database_url, squatter) as other:
        other.execute("SET application_name = 'squatter-app'")
        other.execute("SELECT pg_advisory_lock(hashtext(%s), %s::int)", (LOCK_CLASS, coll.id))
        t0 = time.monotonic()
        with pytest.raises(TransientError) as exc:
            run_ingest([tmp_path], settings=Settings(database_url=writer, lock_timeout_s=1.5))
        waited = time.monotonic() - t0
        message = str(exc.value)
        assert "\n" not in message and squatter in message and "squatter-app" in message, message
        assert "CHUNKYARD_LOCK_TIMEOUT_S" in message and "pg_terminate_backend" in message
        assert 1.5 <= waited < 30
        said = [r.getMessage() for r in caplog.records if "is locked by" in r.getMessage()]
        assert len(said) == 1 and squatter in said[0] and "up to 1.5 s" in said[0], said

        env = {**os.environ, "CHUNKYARD_DATABASE_URL": writer, "CHUNKYARD_LOCK_TIMEOUT_S": "1"}
        cli = subprocess.run(
            [sys.executable, "-m", "pipeline.cli", "ingest", str(tmp_path), "--no-prefect"],
            capture_output=True, text=True, env=env, timeout=300,
        )  # fmt: skip
        assert cli.returncode == 2 and "Traceback" not in cli.stderr, cli.stderr
        assert any(squatter in line and "still locked after 1 s" in line for line in cli.stderr.splitlines())
    runs = conn.execute("SELECT status, count(*) FROM runs GROUP BY 1").fetchall()
    conn.commit()
    assert dict(runs) == {"completed": 1}  # the first ingest; the ones that gave up wrote no row at all
    # with the lock free again, the same run goes through
    result = run_ingest([tmp_path], settings=Settings(database_url=writer, lock_timeout_s=1.5))
    assert result.status == "completed" and result.stats.counts["documents_new"] == 1


def test_a_run_queued_behind_another_run_waits_past_the_default_limit(tmp_path, settings, conn, caplog):
    """A holder whose role may write runs (here the owner, as a long backfill would be) is another run: the
    default limit does not apply, so a scheduled ingest queued behind a backfill is not failed."""
    (tmp_path / "a.md").write_text("# Herons\n\nHerons stand still in shallow water.\n")
    run_ingest([tmp_path], settings=settings)
    coll = store.get_collection(conn, "default")
    assert coll is not None
    (tmp_path / "b.md").write_text("# Egrets\n\nEgrets wade in shallow water too.\n")
    queued = Settings(database_url=settings.database_url)
    object.__setattr__(queued, "lock_timeout_s", 0.5)  # a short default: not a limit the user set
    assert "lock_timeout_s" not in queued.model_fields_set
    out: dict = {}
    with psycopg.connect(settings.database_url, autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(hashtext(%s), %s::int)", (LOCK_CLASS, coll.id))
        worker = threading.Thread(target=lambda: out.update(result=run_ingest([tmp_path], settings=queued)))
        worker.start()
        deadline = time.monotonic() + 120
        while not any("is locked by" in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.1)
        said = [r.getMessage() for r in caplog.records if "is locked by" in r.getMessage()]
        assert said and "with no time limit" in said[0], said
        time.sleep(2)  # four times the default limit
        assert worker.is_alive() and "result" not in out
    worker.join(300)
    assert out["result"].status == "completed" and out["result"].stats.counts["documents_new"] == 1
