"""Prefect flows: thin wrappers over pipeline/ functions."""

from __future__ import annotations

import os
from contextlib import suppress


def quiet_prefect() -> None:
    """Keep Prefect's own log noise and telemetry out of the user's way (their env vars win)."""
    defaults = {
        "PREFECT_LOGGING_LEVEL": "WARNING",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "PREFECT_SERVER_LOGGING_LEVEL": "WARNING",
        "PREFECT_CLI_COLORS": "false",
    }
    for k, v in defaults.items():
        os.environ.setdefault(k, v)


quiet_prefect()


def quiet_console() -> None:
    """No Prefect log lines or tracebacks on the terminal (the CLI prints one line per problem);
    the API handler still sends every log to the Prefect server's UI. `--debug` keeps them."""
    import logging

    prefect_log = logging.getLogger("prefect")
    for h in prefect_log.handlers:
        if not type(h).__name__.startswith("APILog"):
            h.setLevel(logging.CRITICAL)
    prefect_log.propagate = False  # nor through the CLI's root handler ("Crash detected!" on a SIGTERM)


#: Set in a process about to start Prefect's temporary server: the server inherits it, so a later
#: command can tell a server whose owner died (SIGKILL) from any other and stop it.
OWNER_VAR = "CHUNKYARD_TEMP_SERVER_OWNER"
_SERVER_APP = "prefect.server.api.server:create_app"


def own_temporary_server() -> None:
    """Mark Prefect servers this process starts as ours, and stop those left by dead chunkyard commands."""
    os.environ[OWNER_VAR] = str(os.getpid())
    reap_orphaned_servers()


def reap_orphaned_servers() -> int:
    """SIGTERM temporary Prefect servers whose chunkyard command is gone; how many were stopped."""
    import psutil

    stopped = 0
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if _SERVER_APP not in " ".join(proc.info["cmdline"] or []):
                continue
            owner = proc.environ().get(OWNER_VAR)
            if owner and owner.isdigit() and not psutil.pid_exists(int(owner)):
                proc.terminate()
                stopped += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return stopped


def drain_workers(timeout: float) -> None:
    """Send what Prefect's log and event workers of this process still hold and stop them, before a server
    they send to stops: left running, they try the stopped server for ever (and a later drain, Prefect's
    own at exit or its test harness's, waits on them). Nothing to do where Prefect was never loaded."""
    import sys

    if "prefect.logging.handlers" in sys.modules:
        from prefect.logging.handlers import APILogWorker

        with suppress(Exception):
            APILogWorker.drain_all(timeout=timeout)
    if "prefect.events.worker" in sys.modules:
        from prefect.events.worker import EventsWorker

        with suppress(Exception):
            EventsWorker.drain_all(timeout=timeout)


def stop_own_servers(timeout: float = 10.0) -> int:
    """Stop the temporary Prefect servers this process started (a command ended by a signal: Prefect's own
    atexit hook never runs on SIGTERM's default action, nor after an immediate exit); how many."""
    import psutil

    drain_workers(timeout=5)
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    servers = []
    for proc in children:
        try:
            if _SERVER_APP in " ".join(proc.cmdline()):
                servers.append(proc)
        except psutil.Error:
            continue
    for proc in servers:
        try:
            proc.terminate()
        except psutil.Error:
            continue
    _, alive = psutil.wait_procs(servers, timeout=timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    return len(servers)
