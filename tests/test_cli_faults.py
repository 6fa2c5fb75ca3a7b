"""The real CLI under faults (issue 29): a search of a missing collection, signals, a missing extra.

Each case runs `python -m pipeline.cli` in a subprocess, as a user would, and checks for one line, the
documented exit code and nothing left behind (a ledger row `running`, a server process, an empty set).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from test_embed_backends import models_cache, tiny_model  # noqa: F401  (session fixtures, reused)

pytestmark = pytest.mark.subprocess

DEAD_URL = "postgresql://nobody@127.0.0.1:1/nothing"  # nothing listens on port 1


def cli(*args: str, env: dict, prelude: str = "", timeout: float = 300) -> subprocess.CompletedProcess:
    """The CLI in a fresh interpreter; `prelude` runs first (a missing package simulated, a probe set up)."""
    code = f"import sys\n{prelude}\nfrom pipeline.cli import main\nsys.argv = ['chunkyard', *sys.argv[1:]]\nmain()\n"
    cmd = [sys.executable, "-c", code, *args] if prelude else [sys.executable, "-m", "pipeline.cli", *args]
    full = {**os.environ, "COLUMNS": "200", **env}
    return subprocess.run(cmd, capture_output=True, text=True, env=full, timeout=timeout)


def assert_one_line(res: subprocess.CompletedProcess, code: int, needle: str) -> None:
    """Exit `code`, one line on stderr containing `needle`, no traceback, no C++ runtime abort."""
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert res.returncode == code, (res.returncode, res.stderr)
    assert len(lines) == 1, res.stderr
    assert needle in lines[0], res.stderr
    for bad in ("Traceback", "terminate called", "Segmentation fault"):
        assert bad not in res.stderr and bad not in res.stdout


# --------------------------------------------------------------------------- search, defect 10

#: After main() has failed, print the threads still alive: a model loading in one races the exit.
_THREADS = """
import atexit, threading
def _report():
    left = [t.name for t in threading.enumerate() if t is not threading.main_thread() and t.is_alive()]
    print("THREADS:", ",".join(left) or "none")
atexit.register(_report)
"""


@pytest.mark.parametrize("database", ["running", "unreachable"])
def test_search_of_a_missing_collection_exits_2_with_one_line_and_no_thread_left(
    database, database_url, tiny_model, models_cache  # noqa: F811
):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    # an exported model on disk is what made search load it in a background thread (issue 29, defect 10)
    from pipeline.embed import embedding_key, get_embedder

    get_embedder(embedding_key(tiny_model, "openvino"), cache_dir=models_cache)
    env = {
        "CHUNKYARD_DATA_DIR": str(models_cache.parent),
        "CHUNKYARD_EXPORT_CACHE": str(models_cache),
        "CHUNKYARD_MODEL": tiny_model,
        "CHUNKYARD_EMBED_BACKEND": "openvino",
        "CHUNKYARD_DATABASE_URL": database_url if database == "running" else DEAD_URL,
    }
    needle = "no collection 'nosuch'" if database == "running" else "cannot connect to Postgres"
    for _ in range(5):
        assert_one_line(cli("search", "x", "-c", "nosuch", env=env), 2, needle)
    probe = cli("search", "x", "-c", "nosuch", env=env, prelude=_THREADS)
    assert_one_line(probe, 2, needle)
    assert probe.stdout.strip() == "THREADS: none"  # nothing loading when the interpreter exits


# ------------------------------------------------------------------------------------------- signals


def notes(folder: Path, n: int) -> Path:
    """n small markdown files of their own text (nothing in the embedding cache)."""
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        body = " ".join(f"Pelican {i} crosses bay number {j} at dawn." for j in range(60))
        (folder / f"note-{i:03}.md").write_text(f"# Note {i}\n\n{body}\n")
    return folder


def start(args: list[str], env: dict[str, str | None]) -> subprocess.Popen:
    """The CLI running in the background; an env value of None removes that variable."""
    full = {k: v for k, v in {**os.environ, "COLUMNS": "200", **env}.items() if v is not None}
    cmd = [sys.executable, "-m", "pipeline.cli", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)


def wait_for(query: str, url: str, *, timeout: float = 240) -> None:
    """Poll until `query` returns a true first column (the run got somewhere)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with psycopg.connect(url, autocommit=True) as c:
            row = c.execute(query).fetchone()
        if row and row[0]:
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for: {query}")


@pytest.mark.slow
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_without_prefect_marks_the_run_crashed_and_says_what_was_stored(
    sig, code, tmp_path, database_url
):
    folder = notes(tmp_path / "docs", 12)
    env = {"CHUNKYARD_DATABASE_URL": database_url, "CHUNKYARD_FILES_PER_BATCH": "1"}
    proc = start(["ingest", str(folder), "-c", "sig", "--no-prefect"], env)
    try:
        wait_for("SELECT count(*) >= 1 FROM documents", database_url)  # a batch stored, more to come
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    res = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_line(res, code, f"interrupted by {signal.Signals(sig).name}; ")
    assert "documents stored, run it again to resume" in err
    with psycopg.connect(database_url, autocommit=True) as c:
        run_id, status = c.execute("SELECT id, status FROM runs").fetchone()
        assert status == "crashed"
        stored = c.execute("SELECT count(*) FROM documents WHERE last_run_id = %s", (run_id,)).fetchone()[0]
        assert f"; {stored} documents stored" in err and 1 <= stored < 12
        assert c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0] == 0
    again = cli("ingest", str(folder), "-c", "sig", "--no-prefect", "--json", env=env)  # resumes
    assert again.returncode == 0, again.stderr
    with psycopg.connect(database_url, autocommit=True) as c:
        assert c.execute("SELECT count(*) FROM documents").fetchone()[0] == 12


# --------------------------------------------------------------------------------- a missing extra


@pytest.mark.parametrize("module", ["onnx", "onnxruntime"])
@pytest.mark.parametrize("prefect", [False, True])
def test_the_onnx_backend_without_its_extra_fails_up_front_and_creates_nothing(
    module, prefect, tmp_path, database_url
):
    folder = notes(tmp_path / "docs", 2)
    env = {
        "CHUNKYARD_DATABASE_URL": database_url,
        "CHUNKYARD_EMBED_BACKEND": "onnx",
        "CHUNKYARD_DATA_DIR": str(tmp_path / "data"),
        "CHUNKYARD_EXPORT_CACHE": str(tmp_path / "exports"),  # no export of the model there yet
    }
    args = ["ingest", str(folder), "-c", "onnx"] + ([] if prefect else ["--no-prefect"])
    res = cli(*args, env=env, prelude=f"sys.modules[{module!r}] = None  # not installed")
    assert_one_line(res, 2, "pip install 'chunkyard[onnx]'")  # the brackets survive rich's markup
    assert f"needs {module}" in res.stderr
    with psycopg.connect(database_url, autocommit=True) as c:
        for table in ("collections", "embedding_sets", "runs"):
            assert c.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0, table


@pytest.mark.slow
def test_sigterm_of_a_prefect_run_stops_its_temporary_server(tmp_path, database_url):
    psutil = pytest.importorskip("psutil")
    folder = notes(tmp_path / "docs", 12)
    env = {
        "CHUNKYARD_DATABASE_URL": database_url,
        "CHUNKYARD_FILES_PER_BATCH": "1",
        "CHUNKYARD_DATA_DIR": str(tmp_path / "data"),  # no `chunkyard server start` server to use
        "PREFECT_API_URL": None,  # a temporary server of the command's own
        "PREFECT_HOME": str(tmp_path / "prefect"),
    }
    proc = start(["ingest", str(folder), "-c", "sigp", "--prefect"], env)  # no server: --prefect starts one
    try:
        wait_for("SELECT count(*) >= 1 FROM documents", database_url, timeout=400)
        servers = [
            p for p in psutil.Process(proc.pid).children(recursive=True)
            if "prefect.server.api.server:create_app" in " ".join(p.cmdline())
        ]  # fmt: skip
        assert servers, "the run did not start a temporary Prefect server"
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    res = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert_one_line(res, 143, "interrupted by SIGTERM; ")
    _, alive = psutil.wait_procs(servers, timeout=10)
    assert not alive, "the temporary Prefect server outlived its command"
    with psycopg.connect(database_url, autocommit=True) as c:
        assert c.execute("SELECT status FROM runs").fetchone()[0] == "crashed"
        assert c.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").fetchone()[0] == 0
