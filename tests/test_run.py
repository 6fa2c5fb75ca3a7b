"""A run's life cycle: one Run for every path, errors written as they happen, typed ledger states."""

from __future__ import annotations

import os
from collections import Counter

import psycopg
import pytest

from pipeline import reading, stages, store
from pipeline import run as run_module
from pipeline.config import Profile
from pipeline.ingest import run_ingest
from pipeline.model import RunKind, RunStatus
from pipeline.requests import RunRequest
from pipeline.run import Run, reporting
from pipeline.sources import typed

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"


class Recorder:
    """A progress reporter that remembers what it was told."""

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.done: dict[str, int] = {}

    def add_total(self, stage: str, n: int) -> None:
        self.totals[stage] = self.totals.get(stage, 0) + n

    def advance(self, stage: str, n: int = 1) -> None:
        self.done[stage] = self.done.get(stage, 0) + n


@pytest.fixture
def folder(tmp_path):
    d = tmp_path / "src"
    d.mkdir()
    for i, animal in enumerate(("pelicans", "walruses", "otters")):
        (d / f"{i}-{animal}.md").write_text(f"# {animal.title()}\n\nA short note about {animal}.\n")
    return d


def test_errors_are_written_when_the_file_fails_not_when_the_run_ends(folder, settings, conn, monkeypatch):
    (folder / "3-broken.md").write_bytes(PNG)
    real_write = store.write_document
    errors_seen_at_store: list[int] = []

    def crash_on_otters(c, **kw):
        if kw["doc"].uri.endswith("otters.md"):
            errors_seen_at_store.append(conn.execute("SELECT count(*) FROM ingest_errors").fetchone()[0])
            raise KeyboardInterrupt  # the process is stopped mid-store
        return real_write(c, **kw)

    monkeypatch.setattr(store, "write_document", crash_on_otters)
    # the first load into an empty collection writes a batch in one transaction: the crash comes there
    real_bulk = store.write_documents
    monkeypatch.setattr(store, "write_documents", lambda c, **kw: crash_on_otters(
        c, doc=next(d.doc for d in kw["docs"] if d.doc.uri.endswith("otters.md"))))  # fmt: skip
    with pytest.raises(KeyboardInterrupt):
        run_ingest([folder], settings=settings, files_per_batch=10, batch_bytes=None)
    # the broken file's error was in the table before the crash, and it is still there after it
    assert errors_seen_at_store == [1]
    run_id, status = conn.execute("SELECT id, status FROM runs").fetchone()
    assert status == "crashed"
    rows = store.run_errors(conn, run_id)
    assert [(u.rsplit("/", 1)[-1], s) for u, s, _ in rows] == [("3-broken.md", "normalize")]
    # the collection lock went with the crashed run's connection: the next run proceeds and completes
    monkeypatch.setattr(store, "write_document", real_write)
    monkeypatch.setattr(store, "write_documents", real_bulk)
    stats, _, status = run_ingest([folder], settings=settings)
    assert status == RunStatus.FAILED and [e.uri.rsplit("/", 1)[-1] for e in stats.errors] == ["3-broken.md"]
    assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 3


def test_a_retried_batch_records_its_errors_once(folder, settings, conn):
    (folder / "3-broken.md").write_bytes(PNG)
    with Run.begin(RunRequest(collection="default", profile=Profile()), settings=settings) as run:
        for _ in range(2):  # a transient failure after the error was written: the task runs again
            run.add(stages.ingest_batch(run.ctx, typed(sorted(folder.iterdir()))[0]))
        result = run.finish()
    assert result.status is RunStatus.FAILED
    assert len(store.run_errors(conn, result.run_id)) == 1


def test_ledger_states_are_checked_by_the_database(conn):
    conn.execute("INSERT INTO runs (kind) VALUES ('ingest')")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("INSERT INTO runs (kind) VALUES ('reticulate')")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE runs SET status = 'done', finished_at = now()")
    with pytest.raises(psycopg.errors.CheckViolation):
        conn.execute("UPDATE runs SET status = 'completed'")  # finished runs have a finish time
    run_id = conn.execute("SELECT id FROM runs").fetchone()[0]
    with pytest.raises(psycopg.errors.CheckViolation):
        store.record_error(conn, run_id, "file:///x", "unpacking", "no such stage")
    for kind in RunKind:
        conn.execute("INSERT INTO runs (kind, status, finished_at) VALUES (%s, %s, now())", (kind, "crashed"))
    for status in RunStatus:
        finished = None if status is RunStatus.RUNNING else "now"
        conn.execute(
            "INSERT INTO runs (status, finished_at) VALUES (%s, %s::timestamptz)", (status, finished)
        )


def test_progress_goes_to_the_reporter_passed_in_or_set_for_the_block(folder, settings):
    direct = Recorder()
    run_ingest([folder], settings=settings, progress=direct)
    assert direct.totals["files"] == direct.done["files"] == 3
    assert direct.done["store"] == 3 and direct.done["embed"] == direct.totals["embed"] > 0
    (folder / "0-pelicans.md").write_text("# Pelicans\n\nPelicans scoop fish with their pouch.\n")
    scoped = Recorder()
    with reporting(scoped):
        run_ingest([folder], settings=settings)
    assert scoped.done["files"] == 3 and scoped.done["store"] == 1  # two files were resumed unchanged
    assert direct.done["files"] == 3  # the first reporter heard nothing of the second run


def test_dry_run_has_no_run_id_and_writes_nothing(folder, settings, conn):
    stats, run_id, status = run_ingest([folder], settings=settings, dry_run=True)
    assert run_id is None and status is RunStatus.COMPLETED
    assert [r["action"] for r in stats.plan] == ["new"] * 3
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 0


def test_a_stored_file_replaced_by_a_fifo_is_reported_not_waited_on(folder, settings):
    run_ingest([folder], settings=settings)
    target = folder / "1-walruses.md"
    target.unlink()
    os.mkfifo(target)
    stats, _, status = run_ingest([folder], settings=settings)  # would block forever on a read
    assert status is RunStatus.FAILED
    assert [(e.uri.rsplit("/", 1)[-1], e.stage) for e in stats.errors] == [("1-walruses.md", "load")]
    assert "not a regular file" in stats.errors[0].message


@pytest.mark.subprocess
def test_a_fresh_process_starting_batches_in_parallel_threads_loads_the_tokenizers_once(
    tmp_path, settings, database_url
):
    """The first tokenizer load happens inside two batch threads at once, as under Prefect's thread runner
    (transformers' lazy import is not thread-safe: 'cannot import name AutoTokenizer' without the lock)."""
    import subprocess
    import sys

    for i in range(4):
        (tmp_path / f"{i}.md").write_text(f"# Note {i}\n\n" + "Pelicans glide over the bay. " * 200)
    script = f"""
import sys, threading
from pipeline.config import Profile, Settings
from pipeline.requests import RunRequest
from pipeline.run import Run
from pipeline.sources import typed
from pipeline import stages
settings = Settings(database_url={database_url!r})
paths, _ = typed(sorted(__import__("pathlib").Path({str(tmp_path)!r}).glob("*.md")))
with Run.begin(RunRequest(collection="race", profile=Profile()), settings=settings) as run:
    out = [None, None]
    def batch(k):
        out[k] = stages.ingest_batch(run.ctx, paths[k::2])
    threads = [threading.Thread(target=batch, args=(k,)) for k in range(2)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    for s in out:
        run.add(s)
    result = run.finish()
print(result.status, len(result.stats.errors), [e.message for e in result.stats.errors])
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.split()[:2] == ["completed", "0"], res.stdout


def test_status_shows_a_run_whose_process_died_as_crashed(settings, conn):
    with Run.begin(RunRequest(collection="live", profile=Profile()), settings=settings) as run:
        assert [r["status"] for r in store.status(conn)["runs"]] == ["running"]  # its lock is held
        run.conn.close()  # what a SIGKILL does: the connection, and with it the lock, is gone
        assert [r["status"] for r in store.status(conn)["runs"]] == ["crashed"]
        run.status = RunStatus.CRASHED  # nothing left to record


def test_a_file_is_read_and_hashed_once_on_its_way_in(folder, settings, monkeypatch):
    run_ingest([folder], settings=settings)
    (folder / "1-walruses.md").write_text("# Walruses\n\nA longer note about walruses, edited.\n")
    (folder / "3-herons.md").write_text("# Herons\n\nA new note about herons.\n")
    reads: Counter[str] = Counter()
    hashes: Counter[bytes] = Counter()
    real_open, real_hash = reading._open_checked, stages.sha256

    def counting_open(src):
        reads[src.path.name] += 1
        return real_open(src)

    def counting_hash(data):
        hashes[bytes(data)] += 1
        return real_hash(data)

    monkeypatch.setattr(reading, "_open_checked", counting_open)  # every read of a source file opens here
    monkeypatch.setattr(stages, "sha256", counting_hash)  # the skip rule's hash of a file's bytes
    monkeypatch.setattr(run_module, "sha256", counting_hash)  # resume's
    stats, _, status = run_ingest([folder], settings=settings)
    assert status is RunStatus.COMPLETED
    c = stats.counts
    assert (c["documents_unchanged"], c["documents_changed"], c["documents_new"]) == (2, 1, 1)
    # one read per file: unchanged (resume), changed (resume, handed to its batch), new (its batch)
    assert dict(reads) == {"0-pelicans.md": 1, "1-walruses.md": 1, "2-otters.md": 1, "3-herons.md": 1}
    assert hashes[(folder / "1-walruses.md").read_bytes()] == 1  # by resume, not again by its batch


def test_past_the_carry_budget_a_changed_file_is_read_again_by_its_batch(folder, settings, monkeypatch):
    run_ingest([folder], settings=settings)
    (folder / "1-walruses.md").write_text("# Walruses\n\nA longer note about walruses, edited.\n")
    reads: Counter[str] = Counter()
    real_open = reading._open_checked

    def counting_open(src):
        reads[src.path.name] += 1
        return real_open(src)

    monkeypatch.setattr(reading, "_open_checked", counting_open)
    monkeypatch.setattr(run_module, "CARRY_BYTES", 0)  # nothing read is held for the batches
    stats, _, status = run_ingest([folder], settings=settings)
    assert status is RunStatus.COMPLETED and stats.counts["documents_changed"] == 1
    assert dict(reads) == {"0-pelicans.md": 1, "1-walruses.md": 2, "2-otters.md": 1}


def test_a_flows_parameters_make_its_typed_request():
    from pipeline.requests import ModelSwitchRequest, ReindexRequest, flow_request

    reindex = {
        "collection": "c",
        "profile": None,
        "files_per_batch": None,
        "batch_bytes": 4096,
        "dry_run": False,
    }
    assert flow_request("reindex", reindex | {"model": None}) == ReindexRequest(
        collection="c", batch_bytes=4096
    )
    switch = flow_request("reindex", reindex | {"model": "/models/e5", "dry_run": True})
    assert switch == ModelSwitchRequest(collection="c", model="/models/e5", dry_run=True)
    with pytest.raises(ValueError, match="no run request for flow 'evaluate'"):
        flow_request("evaluate", {})
