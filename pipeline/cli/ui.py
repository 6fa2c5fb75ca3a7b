"""The `ui` command: the read-only web view of collections, documents, chunks, search and quality."""

from __future__ import annotations

from typing import Annotated

import typer

from pipeline.cli.app import _settings, app
from pipeline.console import err


@app.command()
def ui(
    host: Annotated[str, typer.Option(help="Address to listen on (default: this machine only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port to listen on.")] = 8765,
) -> None:
    """Look at your chunks in a browser: collections, documents with their chunk boundaries drawn, search,
    runs, and quality over time (read-only; works as chunkyard_reader)."""
    from pipeline import db
    from pipeline.ui import serve

    settings = _settings()
    url = db.database_url(settings)
    err.print(f"chunkyard ui: http://{host}:{port}/ (read-only; Ctrl-C stops it)", highlight=False)
    serve(url, settings=settings, host=host, port=port)
