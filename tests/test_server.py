"""The local Prefect server: start, reuse, a flow run on it, stop; a stale pid/port file is harmless."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


# ------------------------------------------------------------- which server a command uses (issue 26)


@pytest.fixture
def answering(tmp_path):
    """A stand-in local server: server.json names this process and a port whose /api/health answers 200."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200 if self.path == "/api/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/api"
    home = server.state_dir(tmp_path)
    home.mkdir(parents=True)
    (home / "server.json").write_text(json.dumps({"pid": os.getpid(), "url": url}))
    yield url
    httpd.shutdown()


def test_one_place_decides_which_server_a_command_uses(tmp_path, answering, monkeypatch):
    monkeypatch.delenv("PREFECT_API_URL", raising=False)
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(tmp_path / "no-profiles.toml"))
    empty = tmp_path / "none"
    assert server.where(empty) == server.Where("here")  # no server: no temporary one either
    assert server.where(empty, prefect=True) == server.Where("temporary")  # --prefect asks for one
    assert server.where(empty, dask=True) == server.Where("temporary")  # Dask workers report to Prefect
    assert server.where(tmp_path) == server.Where("local", answering)  # `chunkyard server start`'s
    assert server.where(tmp_path, prefect=False) == server.Where("here")  # --no-prefect wins
    profiles = tmp_path / "profiles.toml"  # `prefect config set PREFECT_API_URL=...` writes it
    profiles.write_text('active = "team"\n[profiles.team]\nPREFECT_API_URL = "http://team.example/api"\n')
    monkeypatch.setenv("PREFECT_PROFILES_PATH", str(profiles))
    assert server.where(empty) == server.Where("configured", "http://team.example/api")
    monkeypatch.setenv("PREFECT_API_URL", "http://prefect.example:4200/api")
    assert server.where(tmp_path) == server.Where("configured", "http://prefect.example:4200/api")
    assert not server.where(tmp_path, prefect=False).prefect


_PROBE = """
import atexit, sys
atexit.register(lambda: sys.stderr.write("PREFECT: %s\\n" % ("prefect" in sys.modules)))
from pipeline.cli import main
sys.argv = ["chunkyard", *sys.argv[1:]]
main()
"""


def test_a_flow_backed_command_without_a_server_runs_here_without_prefect(tmp_path, docs, database_url):
    """No PREFECT_API_URL and no local server: no temporary server (about 20 s a command), no Prefect."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env |= {"CHUNKYARD_DATABASE_URL": database_url, "CHUNKYARD_DATA_DIR": str(tmp_path / "data")}
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, "ingest", str(docs), "--json"],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert "PREFECT: False" in res.stderr, res.stderr
    summary = json.loads(res.stdout)
    assert summary["counts"]["documents_new"] == 4 and "flow_run_id" not in summary


@pytest.mark.slow
def test_serve_runs_on_the_local_server_and_stops_on_ctrl_c_with_one_line(tmp_path, docs, database_url):
    """Defect 3: without PREFECT_API_URL, `serve` ran nothing (a temporary server has no scheduler) and
    Ctrl-C printed a traceback. Now it starts the local server, runs the schedule, and a SIGINT ends it
    with one line and exit 130, leaving no flow run `Running` to hold the deployment's slot."""
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    data = tmp_path / "data"
    env |= {"CHUNKYARD_DATABASE_URL": database_url, "CHUNKYARD_DATA_DIR": str(data), "COLUMNS": "80"}
    cmd = [sys.executable, "-m", "pipeline.cli", "serve", str(docs), "-c", "served", "--every", "2s"]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and proc.poll() is None and not _completed_runs(database_url):
            time.sleep(1)
        assert _completed_runs(database_url), "no scheduled run completed"
        url = server.live_url(data)
        assert url, "serve did not start the local server"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
        body = json.dumps({"flow_runs": {"state": {"type": {"any_": ["RUNNING", "PENDING"]}}}}).encode()
        ask = urllib.request.Request(f"{url}/flow_runs/filter", data=body, method="POST")
        ask.add_header("content-type", "application/json")
        with urllib.request.urlopen(ask, timeout=30) as resp:
            assert json.load(resp) == [], "a run left Running holds the deployment's concurrency slot"
    finally:
        proc.kill()
        server.stop(data)
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert proc.returncode == 130, err
    assert "Traceback" not in err + out, err
    assert lines[0] == "starting the local Prefect server for the schedules ...", err
    assert lines[1].startswith("serving ingest-served on http://127.0.0.1:"), err
    assert lines[2].startswith("interrupted by SIGINT; stopped serving"), err
    assert len(lines) == 3, err


def _completed_runs(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as c:
        return int(c.execute("SELECT count(*) FROM runs WHERE status = 'completed'").fetchone()[0])
