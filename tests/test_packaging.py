"""`chunkyard db migrate` on fresh databases, and a built wheel that works without the checkout (sql/ inside)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pipeline import db
from pipeline.errors import DatabaseError
from tests.conftest import _with_db

pytestmark = pytest.mark.packaging

ROOT = Path(__file__).resolve().parent.parent


def _sql_files(kind: str) -> list[str]:
    pattern = "[0-9][0-9][0-9]_*.sql" if kind == "migrations" else "*.sql"
    return sorted(p.name for p in (ROOT / "sql" / kind).glob(pattern))


def _env(**extra: str) -> dict[str, str]:
    """The environment for a chunkyard subprocess: none of this session's CHUNKYARD_* settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CHUNKYARD_") and k not in ("PYTHONPATH", "VIRTUAL_ENV")
    }
    env.update(HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", COLUMNS="200", **extra)
    return env


#: Only a hang trips it: a build, an install or an ingest on a loaded machine may take minutes (issue 26).
HANG_S = 1800


def _run(cmd: list, *, env: dict, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(c) for c in cmd], env=env, cwd=cwd, capture_output=True, text=True, timeout=HANG_S
    )
    assert proc.returncode == 0, f"{cmd} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def _checkout_cli(*args: str, env: dict) -> str:
    """`chunkyard ARGS` from the checkout (the interpreter running the tests)."""
    return " ".join(_run([sys.executable, "-m", "pipeline.cli", *args], env=env, cwd=ROOT).stdout.split())


def _assert_migrates(cli, env: dict) -> None:
    first = cli("db", "migrate", env=env)
    assert first.startswith("applied:"), first
    for name in _sql_files("migrations"):
        assert name in first
    assert cli("db", "migrate", env=env) == "schema is up to date"


@pytest.fixture
def fresh_database_url(pg_server):
    """An empty database (no extension, no schema) on the test server."""
    name = f"fresh_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield _with_db(pg_server, name)
    with psycopg.connect(pg_server, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


# ------------------------------------------------------------------------------- migrate, fresh databases


def test_db_migrate_on_a_fresh_database(fresh_database_url):
    _assert_migrates(_checkout_cli, _env(CHUNKYARD_DATABASE_URL=fresh_database_url))
    with psycopg.connect(fresh_database_url) as c:
        assert c.execute("SELECT 1 FROM pg_extension WHERE extname = 'vector'").fetchone()
        versions = [
            r[0]
            for r in c.execute(
                "SELECT name FROM schema_migrations WHERE version <> 'functions' ORDER BY version"
            )
        ]
    assert versions == _sql_files("migrations")


def test_db_migrate_on_a_new_embedded_data_dir():
    data_dir = Path(tempfile.mkdtemp(prefix="cy-"))  # short: the server's socket lives in it
    env = _env(CHUNKYARD_DATA_DIR=str(data_dir))
    try:
        _assert_migrates(_checkout_cli, env)
    finally:
        _run([sys.executable, "-m", "pipeline.cli", "db", "stop"], env=env, cwd=ROOT)
        running = db.embedded_running(data_dir / "pgdata")
        shutil.rmtree(data_dir, ignore_errors=True)
    assert not running


def test_unmigrated_connection_gets_the_vector_type_from_migrate(fresh_database_url):
    with db.connection(fresh_database_url, migrate_schema=False) as conn:
        db.migrate(conn)
        assert conn.execute("SELECT %s::vector", (np.array([1.0, 2.0]),)).fetchone()[0].to_list() == [1, 2]


def test_missing_extension_is_still_a_clear_error(fresh_database_url, monkeypatch):
    monkeypatch.setattr(db, "_migrated", {fresh_database_url})  # "already migrated": no migration runs
    with pytest.raises(DatabaseError, match="has no 'vector' extension"):
        db.connect(fresh_database_url)


def test_sql_dir_override(tmp_path):
    env = _env(CHUNKYARD_SQL_DIR=str(tmp_path))
    code = "from pipeline import db; print(db.SQL_DIR)"
    out = _run([sys.executable, "-c", code], env=env, cwd=ROOT).stdout.strip()
    assert Path(out) == tmp_path


# -------------------------------------------------------------------------------------------- the wheel


def _packaging() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel, built from a copy of what the build reads (no build/ or egg-info left in the checkout)."""
    src = tmp_path_factory.mktemp("src")
    cfg = _packaging()
    tops = {p.split(".")[0] for p in cfg["packages"]} | {d.split("/")[0] for d in cfg["package-dir"].values()}
    for top in sorted(tops):
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md", "setup.py", "setup.cfg", "MANIFEST.in"):
        if (ROOT / name).exists():
            shutil.copy2(ROOT / name, src / name)
    out = tmp_path_factory.mktemp("wheel")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    _run([*pip, "-w", out, src], env=_env(), cwd=src)
    (whl,) = out.glob("chunkyard-*.whl")
    return whl


def test_wheel_ships_sql_and_every_package(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for m in _sql_files("migrations"):
        assert f"pipeline/sql/migrations/{m}" in names
    for f in _sql_files("functions"):
        assert f"pipeline/sql/functions/{f}" in names
    # pyproject lists the packages (discovery cannot map sql/): a package missing there is missing here
    for top in ("pipeline", "flows"):
        for init in (ROOT / top).rglob("__init__.py"):
            rel = init.relative_to(ROOT).as_posix()
            assert rel in names, f"{rel} is not in the wheel: add its package to pyproject's packages"


@pytest.mark.slow
def test_installed_wheel_migrates_and_ingests_outside_the_checkout(wheel, fresh_database_url, tmp_path):
    # A new venv that sees this environment's dependencies (a .pth line; the .pth files in that folder,
    # such as the editable install's finder, are not processed) but not the checkout.
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], env=_env(), cwd=tmp_path)
    py = venv / "bin" / "python"
    site = Path(
        _run(
            [py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], env=_env(), cwd=tmp_path
        ).stdout.strip()
    )
    deps = {sysconfig.get_path("purelib"), sysconfig.get_path("platlib")}
    (site / "_chunkyard_test_deps.pth").write_text("".join(f"{d}\n" for d in sorted(deps)))
    install = ["-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index"]
    _run([py, *install, "--ignore-installed", "--no-warn-script-location", wheel], env=_env(), cwd=tmp_path)

    work = tmp_path / "work"  # the working directory: outside the checkout
    docs = work / "docs"
    docs.mkdir(parents=True)
    (docs / "alpha.md").write_text(
        "# Alpha\n\nPostgres stores the chunks.\n\n## Vectors\n\npgvector indexes them.\n"
    )
    (docs / "beta.md").write_text("# Beta\n\nThe wheel ships its own migrations.\n")
    env = _env(
        CHUNKYARD_DATABASE_URL=fresh_database_url,
        CHUNKYARD_DATA_DIR=str(tmp_path / "data"),
        PREFECT_HOME=str(tmp_path / "prefect"),
        CHUNKYARD_EMBED_BACKEND="torch",  # no one-time OpenVINO export into the new data directory here
    )

    where = "import pipeline, pipeline.db as d; print(pipeline.__file__); print(d.SQL_DIR)"
    module, sql_dir = _run([py, "-c", where], env=env, cwd=work).stdout.split()
    assert Path(module).is_relative_to(site), f"pipeline imported from {module}, not the new venv"
    assert Path(sql_dir).is_relative_to(site), f"sql read from {sql_dir}, not the installed wheel"

    cli = venv / "bin" / "chunkyard"

    def installed_cli(*args: str, env: dict) -> str:
        return " ".join(_run([cli, *args], env=env, cwd=work).stdout.split())

    _assert_migrates(installed_cli, env)
    _run([cli, "ingest", docs, "--no-prefect"], env=env, cwd=work)
    with psycopg.connect(fresh_database_url) as c:
        uris = [r[0] for r in c.execute("SELECT source_uri FROM documents ORDER BY source_uri")]
        chunks = c.execute("SELECT count(*) FROM chunks").fetchone()[0]
        keys = [r[0] for r in c.execute("SELECT model FROM embedding_sets")]
    assert [Path(u).name for u in uris] == ["alpha.md", "beta.md"]
    assert keys and all("@" not in k for k in keys), keys  # torch: no export timed inside this test
    assert chunks >= 2
