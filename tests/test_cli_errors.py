"""The CLI under bad usage and hostile input: one line, exit 2, no traceback, nothing created or lost."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pipeline.ingest import run_ingest

pytestmark = pytest.mark.subprocess


def cli(*args: str, url: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    full = dict(os.environ, CHUNKYARD_DATABASE_URL=url, COLUMNS="80", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, env=full, cwd=cwd,
        timeout=300,
    )  # fmt: skip


def one_line_error(res: subprocess.CompletedProcess, needle: str) -> None:
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "Traceback" not in res.stdout
    assert needle in res.stderr


def test_usage_errors_are_one_line_and_exit_2(tmp_path, database_url, conn):
    one_line_error(
        cli("search", "keys", "-k", "-1", url=database_url, cwd=tmp_path), "greater than or equal to 1"
    )
    one_line_error(cli("search", "keys", "-k", "10000000000", url=database_url, cwd=tmp_path), "less than or")
    one_line_error(cli("ingest", str(tmp_path), "-c", "", url=database_url, cwd=tmp_path), "name is empty")
    res = cli("ingest", str(tmp_path), "-c", "x" * 201, "--no-prefect", url=database_url, cwd=tmp_path)
    one_line_error(res, "at most 200")
    res = cli("ingest", str(tmp_path / "nope"), "-c", "ghost", "--no-prefect", url=database_url, cwd=tmp_path)
    one_line_error(res, "nothing to ingest")
    # a usage error creates nothing: no collection, no ledger row
    assert conn.execute("SELECT count(*) FROM collections").fetchone()[0] == 0
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    # unknown collection through the Prefect path: found before Prefect starts, so no flow noise
    one_line_error(cli("reindex", "-c", "ghost", url=database_url, cwd=tmp_path), "no collection 'ghost'")
    one_line_error(cli("db", "stop", url=database_url, cwd=tmp_path), "not chunkyard's to stop")


def test_an_unreachable_database_is_one_line(tmp_path):
    dead = "postgresql://nobody@127.0.0.1:1/nothing"
    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    for args in (["ingest", str(tmp_path), "--no-prefect"], ["ingest", str(tmp_path)], ["status"]):
        one_line_error(cli(*args, url=dead, cwd=tmp_path), "cannot connect to Postgres")


def test_dry_run_counts_deletions_and_an_emptied_file_loses_its_rows(tmp_path, settings, conn):
    for name in ("keep", "gone", "empty"):
        (tmp_path / f"{name}.md").write_text(f"# {name}\n\nA note called {name}, about pelicans.\n")
    run_ingest([tmp_path], settings=settings)
    (tmp_path / "gone.md").unlink()
    (tmp_path / "empty.md").write_bytes(b"")
    os.utime(tmp_path / "empty.md", (time.time() - 3600,) * 2)  # emptied for real, not caught mid-rewrite
    dry, run_id, _ = run_ingest([tmp_path], settings=settings, dry_run=True)
    assert run_id is None and dry.counts["documents_deleted"] == 2  # the vanished one and the emptied one
    assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 3  # a dry run deletes nothing
    real, _, _ = run_ingest([tmp_path], settings=settings)
    assert real.counts["documents_deleted"] == dry.counts["documents_deleted"]
    assert real.counts["chunks_deleted"] == dry.counts["chunks_deleted"] > 0
    uris = [r[0].rsplit("/", 1)[-1] for r in conn.execute("SELECT source_uri FROM documents")]
    assert uris == ["keep.md"]
    found = conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%empty%'").fetchone()[0]
    assert found == 0  # the emptied file's old text is no longer searchable


@pytest.mark.parametrize("name", ["", " ", "a\x00b", "x" * 201])
def test_bad_collection_names_are_refused_everywhere(name, settings, tmp_path):
    from pipeline.errors import ConfigError

    (tmp_path / "a.md").write_text("# A\n\nText.\n")
    with pytest.raises(ConfigError, match="--collection"):
        run_ingest([tmp_path], settings=settings, collection=name)


def test_links_that_leave_the_folder_are_reported_not_followed(tmp_path, settings, conn):
    docs, outside = tmp_path / "docs", tmp_path / "outside"
    docs.mkdir()
    (outside / "vault").mkdir(parents=True)
    (outside / "secret.md").write_text("# Secret\n\nThe launch code is swordfish.\n")
    (outside / "vault" / "more.md").write_text("# More\n\nThe safe combination is 4-8-15.\n")
    (docs / "own.md").write_text("# Own\n\nPelicans.\n")
    (docs / "secret.md").symlink_to(outside / "secret.md")
    (docs / "vault").symlink_to(outside / "vault", target_is_directory=True)
    (docs / "alias.md").symlink_to(docs / "own.md")  # a link inside the folder stays its own file
    stats, _, status = run_ingest([docs], settings=settings)
    assert status == "completed"
    reasons = {uri.rsplit("/", 1)[-1]: why for uri, why in stats.skipped}
    assert set(reasons) == {"secret.md", "vault"} and all("outside the folder" in w for w in reasons.values())
    stored = {r[0].rsplit("/", 1)[-1] for r in conn.execute("SELECT source_uri FROM documents")}
    assert stored == {"own.md", "alias.md"}
    assert conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%swordfish%'").fetchone()[0] == 0
    stats, _, _ = run_ingest([docs], settings=settings, follow_external_links=True)
    stored = {r[0].rsplit("/", 1)[-1] for r in conn.execute("SELECT source_uri FROM documents")}
    assert stored == {"own.md", "alias.md", "secret.md", "more.md"}


def test_a_temporary_prefect_server_left_by_a_killed_command_is_stopped_by_the_next(tmp_path):
    import signal
    import time

    import psutil

    from flows import OWNER_VAR, reap_orphaned_servers

    # a "command" that marks itself the owner and starts a long-lived child that looks like Prefect's server
    script = (
        "import os, subprocess, sys, time\n"
        f"os.environ[{OWNER_VAR!r}] = str(os.getpid())\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)',"
        " 'prefect.server.api.server:create_app'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    server_pid = int(owner.stdout.readline())
    reap_orphaned_servers()  # (another command's orphan on this machine may go too: counts are machine-wide)
    assert psutil.Process(server_pid).status() != psutil.STATUS_ZOMBIE  # its command is alive: not an orphan
    owner.send_signal(signal.SIGKILL)  # the command dies; its server stays behind
    owner.wait()
    assert psutil.pid_exists(server_pid)
    assert reap_orphaned_servers() >= 1
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            if psutil.Process(server_pid).status() == psutil.STATUS_ZOMBIE:
                break
        except psutil.NoSuchProcess:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the orphaned server is still running")


def test_first_hour_messages(tmp_path, database_url, docs):
    """Issue 26's small ones: `db url` exists as --help says; a missing model folder is an error for a dry
    run too; a bad strategy's message has no empty field; a dry run is not titled "run None"."""
    res = cli("db", "url", url=database_url, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == database_url
    assert "url" in cli("db", "--help", url=database_url, cwd=tmp_path).stdout
    one_line_error(
        cli("reindex", "-c", "default", "--model", str(tmp_path / "nope"), "--dry-run", url=database_url, cwd=tmp_path),
        "no such folder",
    )  # fmt: skip
    res = cli("chunk", str(docs / "getting-started.md"), "--strategy", "bogus", url=database_url, cwd=tmp_path)
    one_line_error(res, "--strategy bogus: Input tag 'bogus'")
    assert ": :" not in res.stderr
    res = cli("ingest", str(docs), "--dry-run", "--no-prefect", url=database_url, cwd=tmp_path)
    assert res.returncode == 0 and "run None" not in res.stdout and "dry run" in res.stdout, res.stdout
