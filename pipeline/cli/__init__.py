"""The `chunkyard` command: a thin layer over pipeline/ and flows/ (parse options, call, print).

`app` holds the Typer app, the shared options and the entry point; `runs` the run commands (ingest,
backfill, reindex, prune); `query` search, status, chunk and eval; `admin` the db and server sub-commands;
`schedule` serve; `ui` the web view. Importing this package registers every command on `app`.
"""

# ruff: noqa: I001 - the run commands register first: the order of `--help`
from __future__ import annotations

# Each module registers its commands on `app`, in this order (the order of `--help`).
from pipeline.cli import runs  # noqa: F401
from pipeline.cli import admin, query, schedule, ui  # noqa: F401
from pipeline.cli.app import app, main

__all__ = ["app", "main"]
