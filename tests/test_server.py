"""The local Prefect server: start, reuse, a flow run on it, stop; a stale pid/port file is harmless."""

from __future__ import annotations

import json
import os
import urllib.request

import pytest

from flows import server

pytestmark = pytest.mark.prefect


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_stale_file_is_not_a_server(tmp_path):
    home = server.state_dir(tmp_path)
    home.mkdir(parents=True)
    dead = os.fork()
    if dead == 0:
        os._exit(0)
    os.waitpid(dead, 0)
    (home / "server.json").write_text(json.dumps({"pid": dead, "url": "http://127.0.0.1:9/api"}))
    assert server.live_url(tmp_path) is None
    assert server.stop(tmp_path) is False
    assert not (home / "server.json").exists()


@pytest.mark.slow
def test_start_use_and_stop_a_local_server(tmp_path, docs, database_url, monkeypatch):
    monkeypatch.setenv("CHUNKYARD_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    url = server.start(tmp_path)
    pid = json.loads((server.state_dir(tmp_path) / "server.json").read_text())["pid"]
    try:
        assert server.live_url(tmp_path) == url
        assert server.start(tmp_path) == url  # running: found, not started twice
        from flows.run import run_flow

        result = run_flow("ingest", {"paths": [str(docs)], "collection": "default"})
        assert result["counts"]["documents_new"] == 4
        with urllib.request.urlopen(f"{url}/flow_runs/{result['flow_run_id']}", timeout=10) as resp:
            assert json.load(resp)["state"]["type"] == "COMPLETED"  # the run is on this server
        assert not os.environ.get("PREFECT_API_URL")  # set for the flow call only
    finally:
        assert server.stop(tmp_path)
    assert not _alive(pid)
    assert server.live_url(tmp_path) is None and server.stop(tmp_path) is False
