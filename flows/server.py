"""Which Prefect server a command uses (`where`, the one place that decides), and the local server that
outlives a command (`chunkyard server start`), as `db start` does for Postgres.

The local server's state (Prefect's SQLite database, the log) lives in CHUNKYARD_DATA_DIR/prefect, and
`server.json` there says which process serves which URL. This module imports nothing of Prefect: a command
checks for a server in milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal, NamedTuple

from flows import OWNER_VAR, drain_workers
from pipeline.errors import ChunkyardError

#: How long `start` waits for the new server to answer its health check.
START_TIMEOUT_S = 180


def state_dir(data_dir: Path) -> Path:
    """PREFECT_HOME of the local server: its database, its log and the pid/port file."""
    return data_dir / "prefect"


def _info_file(data_dir: Path) -> Path:
    return state_dir(data_dir) / "server.json"


def _healthy(url: str, timeout: float = 1.0) -> bool:
    """Whether a Prefect API answers its health check at url."""
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout) as resp:  # noqa: S310 - loopback only
            return resp.status == 200
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _is_prefect(pid: int) -> bool:
    """Whether pid still runs a Prefect server (a stale file's pid may belong to another process now)."""
    try:
        return b"prefect" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return not Path("/proc").is_dir()  # no /proc to ask: trust the file


def live_url(data_dir: Path) -> str | None:
    """The API URL of the local server when its file names a live process that answers; else None."""
    try:
        info = json.loads(_info_file(data_dir).read_text())
    except (OSError, ValueError):
        return None
    if not _alive(int(info.get("pid", 0))) or not _healthy(info["url"]):
        return None
    return str(info["url"])


class Where(NamedTuple):
    """Where a flow-backed command runs, and which Prefect server (if any) records its flow run."""

    #: configured: PREFECT_API_URL; local: `chunkyard server start`'s; temporary: Prefect's own server for
    #: this command alone (10-30 s to start); here: plain functions in this process, no Prefect at all.
    kind: Literal["configured", "local", "temporary", "here"]
    url: str | None = None

    @property
    def prefect(self) -> bool:
        return self.kind != "here"


def where(data_dir: Path, *, prefect: bool | None = None, dask: bool = False) -> Where:
    """The one decision of which Prefect server a command uses (flow-backed commands, `serve`, run_flow).

    `prefect` False (--no-prefect): plain functions here. Else the server PREFECT_API_URL names, else the
    local one while it answers. With neither, a run needs Prefect only when asked (--prefect) or to reach
    Dask workers: a temporary server then; otherwise it runs here, as --no-prefect does, in a second or two
    instead of the ~20 s a temporary server costs each command (the run's row in Postgres records it either
    way). `chunkyard server start` once makes every later run a Prefect flow run on it.
    """
    if prefect is False:
        return Where("here")
    if url := os.environ.get("PREFECT_API_URL") or _profile_api_url():
        return Where("configured", url)
    if url := live_url(data_dir):
        return Where("local", url)
    return Where("temporary") if prefect or dask else Where("here")


def _profile_api_url() -> str | None:
    """PREFECT_API_URL of the active Prefect profile (`prefect config set PREFECT_API_URL=...`), read without
    importing Prefect."""
    import tomllib

    home = Path(os.environ.get("PREFECT_HOME") or Path.home() / ".prefect").expanduser()
    path = Path(os.environ.get("PREFECT_PROFILES_PATH") or home / "profiles.toml").expanduser()
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    active = os.environ.get("PREFECT_PROFILE") or doc.get("active") or "ephemeral"
    url = (doc.get("profiles") or {}).get(active, {}).get("PREFECT_API_URL")
    return str(url) if url else None


def preset_api_url(w: Where) -> None:
    """Point PREFECT_API_URL at the local server `w` names: called before Prefect is imported, since Prefect
    reads its settings once; subprocesses (Dask workers) inherit it."""
    if w.kind == "local" and w.url:
        os.environ["PREFECT_API_URL"] = w.url


@contextmanager
def using(url: str | None) -> Iterator[None]:
    """Prefect's API URL for the calls inside this block (None: leave Prefect's own setting)."""
    if url is None:
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: url}):
        yield


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(data_dir: Path, *, port: int | None = None) -> str:
    """Start the local server (or find it running); its API URL. It keeps running after this process."""
    url = live_url(data_dir)
    if url:
        return url
    home = state_dir(data_dir)
    home.mkdir(parents=True, exist_ok=True)
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}/api"
    env = {k: v for k, v in os.environ.items() if k not in ("PREFECT_API_URL", OWNER_VAR)}  # outlives us
    env |= {"PREFECT_HOME": str(home), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    env.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")
    cmd = [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)]
    with open(home / "server.log", "ab") as log:
        proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _healthy(url):
        if proc.poll() is not None or time.monotonic() > deadline:
            _kill(proc.pid)
            raise ChunkyardError(
                f"the Prefect server did not start (see {home / 'server.log'}); flows fall back to a "
                "temporary server per command"
            )
        time.sleep(0.25)
    info = {"pid": proc.pid, "port": port, "url": url, "home": str(home), "started": time.time()}
    _info_file(data_dir).write_text(json.dumps(info))
    return url


def _kill(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM the server's process group (uvicorn and its children), SIGKILL what is left after timeout."""
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while _alive(pid) and time.monotonic() < deadline:
        with suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)  # reap it when it is our child (a test), else just poll
        time.sleep(0.1)
    if _alive(pid):
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


def stop(data_dir: Path) -> bool:
    """Stop the local server if its file names a live process; True if one was stopped."""
    f = _info_file(data_dir)
    try:
        info = json.loads(f.read_text())
    except (OSError, ValueError):
        return False
    pid = int(info.get("pid", 0))
    was_running = pid > 0 and _alive(pid) and _is_prefect(pid)
    if was_running:
        drain_workers(timeout=30)  # this process may have sent runs' logs and events to it
        _kill(pid)
    f.unlink(missing_ok=True)
    return was_running
