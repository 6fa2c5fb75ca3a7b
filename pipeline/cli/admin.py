"""The db and server sub-commands: the embedded Postgres and the local Prefect server."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli.app import (
    EXIT_FAILED_FILES,
    _settings,
    app,
    db_app,
    server_app,
)
from pipeline.console import out
from pipeline.errors import ConfigError

# ---------------------------------------------------------------------------------------------- db


@app.command("db-url")
@db_app.command("url")
def db_url() -> None:
    """Print the database URL (starting the embedded server and leaving it running: `chunkyard db stop`)."""
    from pipeline import db

    out.print(db.database_url(keep_running=True), highlight=False, soft_wrap=True)


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending migrations and re-apply the SQL functions."""
    from pipeline import db

    url = db.database_url()
    with db.connection(url, migrate_schema=False) as conn:
        applied = db.migrate(conn)
    out.print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


@db_app.command("start")
def db_start() -> None:
    """Start the embedded server and leave it running."""
    from pipeline import db

    out.print(db.database_url(keep_running=True), highlight=False, soft_wrap=True)


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded server."""
    from pipeline import db

    s = _settings()
    if s.database_url:
        raise ConfigError(
            "CHUNKYARD_DATABASE_URL is set: that server is not chunkyard's to stop; "
            "unset it to stop the embedded server"
        )
    out.print("stopped" if db.stop_embedded(s.pgdata) else "not running")


# ------------------------------------------------------------------------------------------ server


@server_app.command("start")
def server_start(port: Annotated[int | None, typer.Option(help="Port; default: a free one.")] = None) -> None:
    """Start a local Prefect server and leave it running: flow-backed commands use it (no server per call)."""
    from flows.server import start

    out.print(start(_settings().data_dir, port=port), highlight=False, soft_wrap=True)


@server_app.command("stop")
def server_stop() -> None:
    """Stop the local Prefect server; commands go back to a temporary server each."""
    from flows.server import stop

    out.print("stopped" if stop(_settings().data_dir) else "not running")


@server_app.command("url")
def server_url() -> None:
    """Print the local Prefect server's API URL (exit 1 when none runs), e.g. for PREFECT_API_URL."""
    from flows.server import live_url

    url = live_url(_settings().data_dir)
    out.print(url or "not running", highlight=False, soft_wrap=True)
    if url is None:
        raise typer.Exit(EXIT_FAILED_FILES)
