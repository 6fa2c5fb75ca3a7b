"""All SQL access: collections, the per-document swap (one transaction), COPY, cache, ledger, search."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import psycopg
from psycopg import sql

from pipeline.errors import ConcurrentUpdate, ConfigError, DatabaseError
from pipeline.model import (
    Chunk,
    Collection,
    Document,
    RunKind,
    RunStatus,
    SectionPlan,
    StoredDocument,
    StoredSection,
    embed_hash,
    section_hash,
    sha256,
)

#: The dimension of chunks.embedding in the schema.
SCHEMA_DIM = 384


def as_array(v) -> np.ndarray:
    """A stored vector as float32 numpy (pgvector returns Vector objects in recent versions)."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)


# ------------------------------------------------------------------------------------- collections


def ensure_collection(
    conn: psycopg.Connection, name: str, *, profile: dict, model: str, dim: int
) -> Collection:
    """Create the collection, or record the profile and model it is now ingested with."""
    if dim != SCHEMA_DIM:
        raise ConfigError(
            f"model {model} makes {dim}-dimensional embeddings but the schema stores vector({SCHEMA_DIM}); "
            f"use a {SCHEMA_DIM}-dimensional model"
        )
    with conn.transaction():
        row = conn.execute(
            """INSERT INTO collections (name, profile, model, dim) VALUES (%s, %s, %s, %s)
               ON CONFLICT (name) DO UPDATE
                 SET profile = EXCLUDED.profile, model = EXCLUDED.model, dim = EXCLUDED.dim,
                     updated_at = CASE WHEN collections.profile IS DISTINCT FROM EXCLUDED.profile
                                         OR collections.model <> EXCLUDED.model
                                       THEN now() ELSE collections.updated_at END
               RETURNING id, name, profile, model""",
            (name, json.dumps(profile), model, dim),
        ).fetchone()
    return Collection(*row)


def get_collection(conn: psycopg.Connection, name: str) -> Collection | None:
    row = conn.execute("SELECT id, name, profile, model FROM collections WHERE name = %s", (name,)).fetchone()
    conn.commit()
    return Collection(*row) if row else None


def drop_collection(conn: psycopg.Connection, name: str) -> bool:
    """Delete a collection and everything in it (cascades); evaluation throws its collections away."""
    with conn.transaction():
        row = conn.execute("DELETE FROM collections WHERE name = %s RETURNING id", (name,)).fetchone()
    return row is not None


def collection_chunks(
    conn: psycopg.Connection, name: str, *, embeddings: bool = False
) -> list[tuple[int, str, int, int, str, str, np.ndarray | None]]:
    """Every live chunk of a collection as (id, source uri, start, end, text, context, embedding or None)."""
    rows = conn.execute(
        sql.SQL(
            """SELECT c.id, d.source_uri, c.char_start, c.char_end, c.text, c.context, {}
               FROM chunks c JOIN documents d ON d.id = c.document_id AND d.deleted_at IS NULL
               JOIN collections col ON col.id = c.collection_id AND col.name = %s
               ORDER BY d.source_uri, c.char_start, c.id"""
        ).format(sql.SQL("c.embedding") if embeddings else sql.SQL("NULL")),
        (name,),
    ).fetchall()
    conn.commit()
    return [(i, u, s, e, t, c, as_array(v) if v is not None else None) for i, u, s, e, t, c, v in rows]


def collection_texts(conn: psycopg.Connection, name: str) -> dict[str, str]:
    """source uri -> normalized text of every live document of a collection (what offsets point into)."""
    rows = conn.execute(
        """SELECT d.source_uri, d.normalized_text FROM documents d
           JOIN collections col ON col.id = d.collection_id AND col.name = %s
           WHERE d.deleted_at IS NULL""",
        (name,),
    ).fetchall()
    conn.commit()
    return dict(rows)


def lock_collection(conn: psycopg.Connection, collection_id: int, *, wait: bool = True) -> bool:
    """Session-level advisory lock: one writing run per collection at a time."""
    fn = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
    row = conn.execute(
        sql.SQL("SELECT {}(hashtext('chunkyard:collection'), %s::int)").format(sql.Identifier(fn)),
        (collection_id,),
    ).fetchone()
    conn.commit()
    return True if wait else bool(row[0])


def unlock_collection(conn: psycopg.Connection, collection_id: int) -> None:
    conn.execute("SELECT pg_advisory_unlock(hashtext('chunkyard:collection'), %s::int)", (collection_id,))
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


def refresh_fts_stats(conn: psycopg.Connection, collection_id: int) -> None:
    """Store the collection's BM25 statistics (chunk count, mean length), so searches need not scan it."""
    conn.execute("SELECT chunkyard_refresh_fts_stats(%s)", (collection_id,))


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


# --------------------------------------------------------------------------------------- documents


def stored_documents(
    conn: psycopg.Connection, collection_id: int, uris: Sequence[str]
) -> dict[str, StoredDocument]:
    rows = conn.execute(
        """SELECT source_uri, id, content_hash, chunk_key, deleted_at IS NOT NULL, doc_type
           FROM documents WHERE collection_id = %s AND source_uri = ANY(%s)""",
        (collection_id, list(uris)),
    ).fetchall()
    conn.commit()
    return {r[0]: StoredDocument(*r[1:]) for r in rows}


def source_uris(conn: psycopg.Connection, collection_id: int) -> list[str]:
    """Source URIs of a collection's live documents: what a reindex re-reads and a prune checks."""
    rows = conn.execute(
        "SELECT source_uri FROM documents WHERE collection_id = %s AND deleted_at IS NULL ORDER BY source_uri",
        (collection_id,),
    ).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def stored_sections(conn: psycopg.Connection, document_ids: Sequence[int]) -> dict[int, list[StoredSection]]:
    rows = conn.execute(
        """SELECT s.document_id, s.id, s.fingerprint, s.char_start,
                  (SELECT count(*) FROM chunks c WHERE c.section_id = s.id)
           FROM sections s WHERE s.document_id = ANY(%s) ORDER BY s.document_id, s.ordinal""",
        (list(document_ids),),
    ).fetchall()
    conn.commit()
    out: dict[int, list[StoredSection]] = {}
    for doc_id, sid, fp, start, n in rows:
        out.setdefault(doc_id, []).append(StoredSection(sid, fp, start, n))
    return out


def cache_lookup(conn: psycopg.Connection, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """Embeddings already computed for these texts with this model."""
    if not hashes:
        return {}
    rows = conn.execute(
        "SELECT text_hash, embedding FROM embedding_cache WHERE model = %s AND text_hash = ANY(%s)",
        (model, list(hashes)),
    ).fetchall()
    conn.commit()
    return {h: as_array(v) for h, v in rows}


def cache_store(conn: psycopg.Connection, model: str, vectors: dict[str, np.ndarray]) -> None:
    """Add new embeddings to the cache (binary COPY into a temp table, then insert the new ones)."""
    if not vectors:
        return
    with conn.transaction():
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS _cache_in (text_hash text, embedding vector(384)) ON COMMIT DELETE ROWS"
        )
        with conn.cursor().copy(
            "COPY _cache_in (text_hash, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as cp:
            cp.set_types(["text", "vector"])
            for h, v in vectors.items():
                cp.write_row([h, v])
        conn.execute(
            """INSERT INTO embedding_cache (model, text_hash, embedding)
               SELECT %s, text_hash, embedding FROM _cache_in ON CONFLICT DO NOTHING""",
            (model,),
        )


def write_document(
    conn: psycopg.Connection,
    *,
    collection_id: int,
    doc: Document,
    chunk_key: str,
    fingerprints: list[str],
    plan: SectionPlan,
    new_chunks: dict[int, list[Chunk]],
    vectors: dict[str, np.ndarray],
    model: str,
    run_id: int | None,
    expected_sections: Iterable[int] = (),
) -> int:
    """Swap in a document's new state in ONE transaction: a crash leaves the old state whole."""
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('chunkyard:document'), hashtext(%s))",
            (f"{collection_id}:{doc.uri}",),
        )
        # Optimistic check: the stored sections the plan was made against must still be there.
        expected = set(expected_sections)
        if expected:
            present = conn.execute(
                "SELECT count(*) FROM sections WHERE id = ANY(%s)", (list(expected),)
            ).fetchone()[0]
            if present != len(expected):
                raise ConcurrentUpdate("document changed while it was being processed; retry")
        doc_id = conn.execute(
            """INSERT INTO documents (collection_id, source_uri, content_hash, text_hash, doc_type, chunk_key, mime,
                                      title, metadata, normalized_text, last_run_id)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (collection_id, source_uri) DO UPDATE SET
                 content_hash = EXCLUDED.content_hash, text_hash = EXCLUDED.text_hash,
                 doc_type = EXCLUDED.doc_type, chunk_key = EXCLUDED.chunk_key, mime = EXCLUDED.mime,
                 title = EXCLUDED.title, metadata = EXCLUDED.metadata,
                 normalized_text = EXCLUDED.normalized_text, last_run_id = EXCLUDED.last_run_id,
                 deleted_at = NULL, updated_at = now()
               RETURNING id""",
            (
                collection_id,
                doc.uri,
                doc.raw_hash,
                doc.text_hash,
                doc.doc_type,
                chunk_key,
                doc.mime,
                doc.title,
                json.dumps({"warnings": doc.warnings, "language": doc.language}),
                doc.text,
                run_id,
            ),
        ).fetchone()[0]
        if plan.delete:
            conn.execute("DELETE FROM sections WHERE id = ANY(%s)", (plan.delete,))
        ids: dict[int, int] = {}  # section index -> row id
        if plan.keep:
            idx, sids, deltas = zip(*plan.keep, strict=True)
            secs = [doc.sections[i] for i in idx]
            conn.execute(
                """UPDATE sections s SET ordinal = u.ordinal, char_start = u.cs, char_end = u.ce
                   FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::int[]) AS u(id, ordinal, cs, ce)
                   WHERE s.id = u.id AND (s.ordinal, s.char_start, s.char_end) IS DISTINCT FROM (u.ordinal, u.cs, u.ce)""",
                (list(sids), list(idx), [s.start for s in secs], [s.end for s in secs]),
            )
            moved = [(sid, d) for sid, d in zip(sids, deltas, strict=True) if d]
            if moved:
                conn.execute(
                    """UPDATE chunks c SET char_start = c.char_start + u.delta, char_end = c.char_end + u.delta
                       FROM unnest(%s::bigint[], %s::int[]) AS u(id, delta) WHERE c.section_id = u.id""",
                    ([m[0] for m in moved], [m[1] for m in moved]),
                )
            ids.update(dict(zip(idx, sids, strict=True)))
        if plan.new:
            secs = [doc.sections[i] for i in plan.new]
            rows = conn.execute(
                """INSERT INTO sections (document_id, ordinal, level, kind, heading_path, content_hash,
                                         fingerprint, char_start, char_end)
                   SELECT %s, u.ordinal, u.level, u.kind, coalesce(string_to_array(u.path, E'\\x1f'), '{}'), u.hash, u.fp, u.cs, u.ce
                   FROM unnest(%s::int[], %s::int[], %s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::int[])
                        AS u(ordinal, level, kind, path, hash, fp, cs, ce)
                   RETURNING id, ordinal""",
                (
                    doc_id,
                    plan.new,
                    [s.level for s in secs],
                    [s.kind for s in secs],
                    ["\x1f".join(s.heading_path) if s.heading_path else None for s in secs],
                    [section_hash(doc, s) for s in secs],
                    [fingerprints[i] for i in plan.new],
                    [s.start for s in secs],
                    [s.end for s in secs],
                ),
            ).fetchall()
            ids.update({ordinal: sid for sid, ordinal in rows})
        # parent links, by index in the new section list
        pairs = [(ids[i], ids.get(s.parent)) for i, s in enumerate(doc.sections) if i in ids]
        if pairs:
            conn.execute(
                """UPDATE sections s SET parent_id = u.parent FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, parent)
                   WHERE s.id = u.id AND s.parent_id IS DISTINCT FROM u.parent""",
                ([p[0] for p in pairs], [p[1] for p in pairs]),
            )
        if new_chunks:
            with conn.cursor().copy(
                """COPY chunks (section_id, document_id, collection_id, ordinal, text, context, content_hash,
                                embed_hash, char_start, char_end, token_count, metadata, model, embedding)
                   FROM STDIN WITH (FORMAT BINARY)"""
            ) as cp:
                cp.set_types(["int8", "int8", "int8", "int4", "text", "text", "text", "text", "int4", "int4",
                              "int4", "jsonb", "text", "vector"])  # fmt: skip
                for i, chunks in new_chunks.items():
                    for k, ch in enumerate(chunks):
                        h = embed_hash(ch.embed_text)
                        cp.write_row([
                            ids[i], doc_id, collection_id, k, ch.text, ch.context, sha256(ch.text), h,
                            ch.start, ch.end, ch.token_count, json.dumps(ch.metadata), model, vectors[h],
                        ])  # fmt: skip
    return doc_id


def prune(
    conn: psycopg.Connection, collection_id: int, *, roots: Sequence[str], seen: set[str], soft: bool
) -> tuple[int, int]:
    """Delete (or mark deleted) documents under the given roots that the run did not see."""
    if not roots:
        return 0, 0
    rows = conn.execute(
        """SELECT id, source_uri FROM documents
           WHERE collection_id = %s AND deleted_at IS NULL AND (source_uri = ANY(%s) OR source_uri LIKE ANY(%s))""",
        (collection_id, list(roots), [_like_prefix(r) for r in roots]),
    ).fetchall()
    gone = [doc_id for doc_id, uri in rows if uri not in seen]
    if not gone:
        conn.commit()
        return 0, 0
    with conn.transaction():
        n_chunks = conn.execute(
            "SELECT count(*) FROM chunks WHERE document_id = ANY(%s)", (gone,)
        ).fetchone()[0]
        if soft:
            conn.execute("UPDATE documents SET deleted_at = now() WHERE id = ANY(%s)", (gone,))
        else:
            conn.execute("DELETE FROM documents WHERE id = ANY(%s)", (gone,))
    return len(gone), n_chunks


def _like_prefix(root: str) -> str:
    esc = root.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return esc.rstrip("/") + "/%"


# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class Hit:
    chunk_id: int
    score: float
    text: str
    source_uri: str
    heading_path: list[str]
    char_start: int
    char_end: int
    section_id: int
    parent_text: str | None


#: How `search` ranks: cosine similarity, BM25 full text, or both fused (convex mix, or reciprocal rank fusion).
SearchMode = Literal["vector", "fulltext", "hybrid", "rrf"]
SEARCH_MODES: tuple[str, ...] = ("vector", "fulltext", "hybrid", "rrf")


def search(
    conn: psycopg.Connection,
    collection: str,
    query_vec: np.ndarray | None,
    *,
    k: int = 5,
    query_text: str | None = None,
    mode: SearchMode = "vector",
    with_parent: bool = False,
) -> list[Hit]:
    """Top-k chunks through the SQL functions users call themselves."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"search mode {mode!r}: expected one of {', '.join(SEARCH_MODES)}")
    if mode in ("hybrid", "rrf"):
        rows = conn.execute(
            "SELECT * FROM chunkyard_hybrid_search(%s, %s, %s, %s, %s, p_fusion => %s)",
            (collection, query_vec, query_text or "", k, with_parent, "rrf" if mode == "rrf" else "convex"),
        ).fetchall()
    elif mode == "fulltext":
        rows = conn.execute(
            """SELECT c.id, f.score, c.text, d.source_uri, s.heading_path, c.char_start, c.char_end, c.section_id,
                      CASE WHEN %s THEN substr(d.normalized_text, s.char_start + 1, s.char_end - s.char_start) END
               FROM chunkyard_fulltext_search(%s, %s, %s) f
               JOIN chunks c ON c.id = f.chunk_id JOIN documents d ON d.id = c.document_id
               JOIN sections s ON s.id = c.section_id
               ORDER BY f.score DESC, c.id""",
            (with_parent, collection, query_text or "", k),
        ).fetchall()
    else:
        rows = conn.execute(
            "SELECT * FROM chunkyard_search(%s, %s, %s, %s)", (collection, query_vec, k, with_parent)
        ).fetchall()
    conn.commit()
    return [Hit(*r) for r in rows]


def status(conn: psycopg.Connection, *, runs: int = 5) -> dict:
    """Collections with their counts and profiles, and the last runs."""
    cols = conn.execute(
        """SELECT c.name, c.model, c.profile, c.updated_at,
                  (SELECT count(*) FROM documents d WHERE d.collection_id = c.id AND d.deleted_at IS NULL),
                  (SELECT count(*) FROM sections s JOIN documents d ON d.id = s.document_id
                    WHERE d.collection_id = c.id AND d.deleted_at IS NULL),
                  (SELECT count(*) FROM chunks k WHERE k.collection_id = c.id)
           FROM collections c ORDER BY c.name"""
    ).fetchall()
    last = conn.execute(
        """SELECT r.id, c.name, r.kind, r.status, r.started_at, r.finished_at, r.counts, r.timings
           FROM runs r LEFT JOIN collections c ON c.id = r.collection_id ORDER BY r.id DESC LIMIT %s""",
        (runs,),
    ).fetchall()
    conn.commit()
    return {
        "collections": [
            dict(
                zip(
                    ("name", "model", "profile", "updated_at", "documents", "sections", "chunks"),
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


def check_schema(conn: psycopg.Connection) -> None:
    """A clear error when the tables are missing (a database nobody migrated)."""
    row = conn.execute("SELECT to_regclass('chunks')").fetchone()
    conn.commit()
    if row[0] is None:
        raise DatabaseError("the chunkyard tables are missing: run `chunkyard db migrate`")
