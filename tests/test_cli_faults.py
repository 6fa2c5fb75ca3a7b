"""The real CLI under faults (issue 29): a search of a missing collection, signals, a missing extra.

Each case runs `python -m pipeline.cli` in a subprocess, as a user would, and checks for one line, the
documented exit code and nothing left behind (a ledger row `running`, a server process, an empty set).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_embed_backends import models_cache, tiny_model  # noqa: F401  (session fixtures, reused)

from pipeline.config import Settings
from pipeline.ingest import run_ingest

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
