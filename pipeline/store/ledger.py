"""Collections, their locks, and the run ledger (runs, ingest_errors): what happened, when, with what."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple

import psycopg

from pipeline.model import (
    Collection,
    EmbeddingSet,
    RunKind,
    RunStatus,
)
from pipeline.store.bulk import ensure_search_indexes

# ------------------------------------------------------------------------------------- collections


def ensure_collection(
    conn: psycopg.Connection,
    name: str,
    *,
    profile: dict,
    model: str,
    dim: int,
    languages: Sequence[str] | None = None,
) -> Collection:
    """Create the collection with an active embedding set of `model` (its chunks sized with `model` too), or
    record the profile an existing one is now ingested with (its models change only by a model switch).
    `languages`: those the model was trained on (`embed.model_languages`), recorded with its set when known."""
    with conn.transaction():
        row = conn.execute(
            """INSERT INTO collections (name, profile, model, dim) VALUES (%s, %s, %s, %s)
               ON CONFLICT (name) DO UPDATE
                 SET profile = EXCLUDED.profile,
                     updated_at = CASE WHEN collections.profile IS DISTINCT FROM EXCLUDED.profile
                                       THEN now() ELSE collections.updated_at END
               RETURNING id""",
            (name, json.dumps(profile), model, dim),
        ).fetchone()
        conn.execute(
            """SELECT chunkyard_create_embedding_set(%s, %s, %s, 'active')
               WHERE NOT EXISTS (SELECT 1 FROM embedding_sets WHERE collection_id = %s AND status = 'active')""",
            (row[0], model, dim, row[0]),
        )
        if languages:  # the model's languages, where its set has none recorded yet (hybrid search reads them)
            conn.execute(
                """UPDATE embedding_sets SET languages = %s
                   WHERE collection_id = %s AND model = %s AND languages IS NULL""",
                (list(languages), row[0], model),
            )
    coll = get_collection(conn, name)
    assert coll is not None
    return coll


def get_collection(conn: psycopg.Connection, name: str) -> Collection | None:
    """The collection with its active embedding set."""
    row = conn.execute(
        """SELECT c.id, c.name, c.profile, c.model, s.id, s.model, s.dim
           FROM collections c LEFT JOIN embedding_sets s ON s.collection_id = c.id AND s.status = 'active'
           WHERE c.name = %s""",
        (name,),
    ).fetchone()
    conn.commit()
    if row is None:
        return None
    vectors = EmbeddingSet(row[4], row[5], row[6], "active") if row[4] is not None else None
    return Collection(*row[:4], vectors=vectors)


def drop_collection(conn: psycopg.Connection, name: str) -> bool:
    """Delete a collection and everything in it (cascades); evaluation throws its collections away."""
    with conn.transaction():
        row = conn.execute("DELETE FROM collections WHERE name = %s RETURNING id", (name,)).fetchone()
    return row is not None


#: The first key of every collection lock (the second is the collection's id). Anyone who can connect can
#: compute it and take the lock (pg_advisory_lock is granted to every role), so a secret key would only make
#: it a little harder: what protects a run is a bounded wait that names the holder (`lock_collection`'s
#: timeout, `lock_holders`). Kept as it has always been, so runs of an older and a newer release of the same
#: database still exclude each other.
LOCK_CLASS = "chunkyard:collection"


class LockHolder(NamedTuple):
    """A session holding a collection's lock, as pg_stat_activity shows it (None where this role may not see)."""

    pid: int
    role: str | None
    application: str | None
    since: datetime | None  # when the session connected: it has held the lock at most that long
    writer: bool = False  # its role may write runs (a chunkyard writer or the owner), so it may be a run

    def describe(self) -> str:
        app = f", application {self.application!r}" if self.application else ""
        since = f", connected since {self.since:%Y-%m-%d %H:%M:%S %Z}".rstrip() if self.since else ""
        return f"pid {self.pid} (role {self.role or '?'}{app}{since})"


def lock_collection(
    conn: psycopg.Connection, collection_id: int, *, wait: bool = True, timeout_s: float = 0
) -> bool:
    """Session-level advisory lock: one writing run per collection at a time. With `wait`, queue for it, for
    at most `timeout_s` seconds when it is over 0 (False then, as without `wait` when it is taken)."""
    if not wait:
        row = conn.execute(
            "SELECT pg_try_advisory_lock(hashtext(%s), %s::int)", (LOCK_CLASS, collection_id)
        ).fetchone()
        conn.commit()
        return bool(row[0])
    try:
        with conn.transaction():  # the lock is the session's; the timeout is this transaction's only
            if timeout_s > 0:
                conn.execute(
                    "SELECT set_config('lock_timeout', %s, true)", (f"{max(1, round(timeout_s * 1000))}ms",)
                )
            conn.execute("SELECT pg_advisory_lock(hashtext(%s), %s::int)", (LOCK_CLASS, collection_id))
    except psycopg.errors.LockNotAvailable:
        return False
    return True


def lock_holders(conn: psycopg.Connection, collection_id: int) -> list[LockHolder]:
    """Who holds the collection's lock now (pg_locks with pg_stat_activity); empty once it is free."""
    rows = conn.execute(
        """SELECT l.pid, a.usename, nullif(a.application_name, ''), a.backend_start,
                  coalesce(has_table_privilege(a.usesysid, 'runs', 'INSERT'), false)
           FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
             AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
             AND l.classid = hashtext(%s)::oid AND l.objid = %s::oid
           ORDER BY l.pid""",
        (LOCK_CLASS, collection_id),
    ).fetchall()
    conn.commit()
    return [LockHolder(*r) for r in rows]


def unlock_collection(conn: psycopg.Connection, collection_id: int) -> None:
    conn.execute("SELECT pg_advisory_unlock(hashtext(%s), %s::int)", (LOCK_CLASS, collection_id))
    conn.commit()


# ------------------------------------------------------------------------------------------ ledger


def start_run(conn: psycopg.Connection, collection_id: int | None, *, kind: RunKind, params: dict) -> int:
    """A ledger row; runs left 'running' by a dead process are marked 'crashed' first."""
    with conn.transaction():
        if collection_id is not None:
            conn.execute(
                "UPDATE runs SET status = %s, finished_at = now() WHERE collection_id = %s AND status = %s",
                (RunStatus.CRASHED, collection_id, RunStatus.RUNNING),
            )
        row = conn.execute(
            "INSERT INTO runs (collection_id, kind, params) VALUES (%s, %s, %s) RETURNING id",
            (collection_id, kind, json.dumps(params, default=str)),
        ).fetchone()
    return row[0]


def finish_run(
    conn: psycopg.Connection, run_id: int, *, status: RunStatus, counts: dict, timings: dict
) -> None:
    with conn.transaction():
        conn.execute(
            "UPDATE runs SET status = %s, finished_at = now(), counts = %s, timings = %s WHERE id = %s",
            (status, json.dumps(counts), json.dumps(timings), run_id),
        )


def record_progress(conn: psycopg.Connection, run_id: int, counts: dict) -> None:
    """What a running run has done so far, on its ledger row (a long step shows its progress there)."""
    with conn.transaction():
        conn.execute(
            "UPDATE runs SET counts = %s WHERE id = %s AND status = 'running'", (json.dumps(counts), run_id)
        )


def refresh_fts_stats(conn: psycopg.Connection, collection_id: int, set_ids: Sequence[int] = ()) -> None:
    """End of a run's writes: search indexes a bulk load dropped are built again (the full-text one, and the
    HNSW index of the given embedding sets), and BM25 statistics counted if a collection has none (triggers
    on chunks keep them current; `recount_fts_stats` repairs)."""
    ensure_search_indexes(conn, set_ids)
    recount_fts_stats(conn, collection_id, stale_only=True)


def recount_fts_stats(
    conn: psycopg.Connection, collection_id: int | None = None, *, stale_only: bool = False
) -> int:
    """Recount BM25 statistics from the rows (a full pass over a collection's chunks) with the one SQL recount,
    chunkyard_refresh_fts_stats: of one collection or of all; `stale_only`, of those that have none
    (collections.fts_chunks NULL: marked stale by a migration). Returns how many were recounted."""
    with conn.transaction():
        return len(conn.execute(
            """SELECT chunkyard_refresh_fts_stats(id) FROM collections
               WHERE (%(id)s::bigint IS NULL OR id = %(id)s) AND (NOT %(stale)s OR fts_chunks IS NULL)""",
            {"id": collection_id, "stale": stale_only},
        ).fetchall())  # fmt: skip


def record_error(conn: psycopg.Connection, run_id: int, source_uri: str, stage: str, error: str) -> None:
    """Write one failed file now; a retried batch that fails the same way adds no second row."""
    with conn.transaction():
        conn.execute(
            """INSERT INTO ingest_errors (run_id, source_uri, stage, error)
               SELECT %(run)s, %(uri)s, %(stage)s, %(error)s
               WHERE NOT EXISTS (SELECT 1 FROM ingest_errors
                                 WHERE run_id = %(run)s AND source_uri = %(uri)s AND stage = %(stage)s
                                   AND error = %(error)s)""",
            {"run": run_id, "uri": source_uri, "stage": stage, "error": error},
        )


def status(conn: psycopg.Connection, *, runs: int = 5) -> dict:
    """Collections with their counts and profiles, and the last runs."""
    cols = conn.execute(
        """SELECT c.name,
                  coalesce((SELECT s.model || ' (' || s.dim || 'd'
                                   || coalesce(', ' || array_to_string(s.languages, ' '), '') || ')'
                            FROM embedding_sets s
                            WHERE s.collection_id = c.id AND s.status = 'active'), c.model)
                  || coalesce((SELECT ', switching to ' || s.model FROM embedding_sets s
                               WHERE s.collection_id = c.id AND s.status = 'building'), ''),
                  c.profile, c.updated_at,
                  (SELECT count(*) FROM documents d WHERE d.collection_id = c.id AND d.deleted_at IS NULL),
                  (SELECT count(*) FROM sections s JOIN documents d ON d.id = s.document_id
                    WHERE d.collection_id = c.id AND d.deleted_at IS NULL),
                  (SELECT count(*) FROM chunks k WHERE k.collection_id = c.id),
                  (SELECT coalesce(jsonb_object_agg(x.language, x.n ORDER BY x.n DESC, x.language), '{}')
                   FROM (SELECT d.language, count(*) AS n FROM documents d
                         WHERE d.collection_id = c.id AND d.deleted_at IS NULL GROUP BY 1) x)
           FROM collections c ORDER BY c.name"""
    ).fetchall()
    last = conn.execute(
        # A 'running' row whose collection lock nobody holds belongs to a process that died (SIGKILL,
        # power loss): shown as crashed now, written so by the next run on that collection.
        """SELECT r.id, c.name, r.kind,
                  CASE WHEN r.status = 'running' AND NOT EXISTS (
                           SELECT 1 FROM pg_locks l
                           WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2
                             AND l.classid = hashtext(%s)::oid
                             AND l.objid = r.collection_id::oid)
                       THEN 'crashed' ELSE r.status END,
                  r.started_at, r.finished_at, r.counts, r.timings
           FROM runs r LEFT JOIN collections c ON c.id = r.collection_id ORDER BY r.id DESC LIMIT %s""",
        (LOCK_CLASS, runs),
    ).fetchall()
    conn.commit()
    return {
        "collections": [
            dict(
                zip(
                    ("name", "model", "profile", "updated_at", "documents", "sections", "chunks", "languages"),
                    r,
                    strict=True,
                )
            )
            for r in cols
        ],
        "runs": [
            dict(
                zip(
                    ("id", "collection", "kind", "status", "started_at", "finished_at", "counts", "timings"),
                    r,
                    strict=True,
                )
            )
            for r in last
        ],
    }


def run_errors(conn: psycopg.Connection, run_id: int) -> list[tuple[str, str, str]]:
    rows = conn.execute(
        "SELECT source_uri, stage, error FROM ingest_errors WHERE run_id = %s ORDER BY id", (run_id,)
    ).fetchall()
    conn.commit()
    return rows
