"""Prefect flows: thin wrappers over pipeline/ functions."""

from __future__ import annotations

import os


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

    for h in logging.getLogger("prefect").handlers:
        if not type(h).__name__.startswith("APILog"):
            h.setLevel(logging.CRITICAL)
