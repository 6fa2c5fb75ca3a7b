"""Embedding sets: a collection's vectors of one model, each in a partition of chunk_vectors of its own.

The active set is what search reads and ingest writes; a building set is filled by a model switch
(`chunkyard reindex --model`) while the active one serves, and replaces it in one transaction.
The DDL (a set's partition, its HNSW index, dropping it) is in sql/functions/10_embedding_sets.sql.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import psycopg
from psycopg import sql

from pipeline.model import EmbeddingSet
from pipeline.store.bulk import copy_vectors

__all__ = [
    "activate_set", "copy_vectors", "create_set", "drop_retired_sets", "drop_set",
    "embedding_sets", "missing_vectors", "set_progress", "write_vectors",
]  # fmt: skip


def embedding_sets(conn: psycopg.Connection, collection_id: int) -> dict[str, EmbeddingSet]:
    """The collection's sets by status (building, active, retired; the newest of each)."""
    rows = conn.execute(
        """SELECT DISTINCT ON (status) status, id, model, dim FROM embedding_sets
           WHERE collection_id = %s ORDER BY status, id DESC""",
        (collection_id,),
    ).fetchall()
    conn.commit()
    return {st: EmbeddingSet(i, m, d, st) for st, i, m, d in rows}


def create_set(
    conn: psycopg.Connection,
    collection_id: int,
    *,
    model: str,
    dim: int,
    status: str = "building",
    run_id: int | None = None,
    index: bool = True,
    languages: Sequence[str] | None = None,
) -> EmbeddingSet:
    """A new set with its partition (and HNSW index unless `index=False`: built once it is filled), and the
    languages its model was trained on when known (`embed.model_languages`: hybrid search reads them)."""
    with conn.transaction():
        set_id = conn.execute(
            "SELECT chunkyard_create_embedding_set(%s, %s, %s, %s, %s, %s)",
            (collection_id, model, dim, status, run_id, index),
        ).fetchone()[0]
        if languages:
            conn.execute("UPDATE embedding_sets SET languages = %s WHERE id = %s", (list(languages), set_id))
    return EmbeddingSet(set_id, model, dim, status)


def missing_vectors(
    conn: psycopg.Connection, collection_id: int, set_id: int, *, after: int = 0, limit: int = 512
) -> list[tuple[int, str, str, str]]:
    """The next chunks (by id, above `after`) of the collection with no vector in the set:
    (id, embed hash, context, text)."""
    rows = conn.execute(
        sql.SQL(
            """SELECT c.id, c.embed_hash, c.context, c.text FROM chunks c
               WHERE c.collection_id = %s AND c.id > %s
                 AND NOT EXISTS (SELECT 1 FROM {} v WHERE v.chunk_id = c.id)
               ORDER BY c.id LIMIT %s"""
        ).format(sql.Identifier(f"chunk_vectors_{set_id}")),
        (collection_id, after, limit),
    ).fetchall()
    conn.commit()
    return rows


def write_vectors(conn: psycopg.Connection, set_id: int, rows: Iterable[tuple[int, np.ndarray]]) -> None:
    """Add vectors to a set in one transaction (a chunk deleted meanwhile is skipped, not an error)."""
    rows = list(rows)
    if not rows:
        return
    with conn.transaction():
        ids = [i for i, _ in rows]
        live = {
            r[0]
            for r in conn.execute("SELECT id FROM chunks WHERE id = ANY(%s) FOR KEY SHARE", (ids,)).fetchall()
        }
        copy_vectors(conn, set_id, ((i, v) for i, v in rows if i in live))


def set_progress(
    conn: psycopg.Connection, collection_id: int, set_id: int | None, model: str
) -> dict[str, int]:
    """How far a set is: the collection's chunks, those with a vector in the set (none without a set), and of
    the rest, how many the embedding cache holds for `model` (a model switch's dry run prints these)."""
    has_vector = (
        sql.SQL("EXISTS (SELECT 1 FROM {} v WHERE v.chunk_id = c.id)").format(
            sql.Identifier(f"chunk_vectors_{set_id}")
        )
        if set_id is not None
        else sql.SQL("false")
    )
    row = conn.execute(
        sql.SQL(
            """SELECT count(*), count(*) FILTER (WHERE {has}),
                      count(*) FILTER (WHERE NOT {has} AND EXISTS (SELECT 1 FROM embedding_cache e
                                                     WHERE e.model = %s AND e.text_hash = c.embed_hash))
               FROM chunks c WHERE c.collection_id = %s"""
        ).format(has=has_vector),
        (model, collection_id),
    ).fetchone()
    conn.commit()
    return {"chunks": row[0], "have_vector": row[1], "in_cache": row[2]}


def activate_set(conn: psycopg.Connection, set_id: int) -> None:
    """Make the set the one search reads, in one transaction; the old active set is retired."""
    with conn.transaction():
        conn.execute("SELECT chunkyard_activate_embedding_set(%s)", (set_id,))


def drop_set(conn: psycopg.Connection, set_id: int, *, lock_timeout: str = "2s") -> bool:
    """Drop a set no search reads; False when searches still held it after `lock_timeout` (tried again later)."""
    with conn.transaction():
        done = conn.execute("SELECT chunkyard_drop_embedding_set(%s, %s)", (set_id, lock_timeout)).fetchone()[
            0
        ]
    return bool(done)


def drop_retired_sets(
    conn: psycopg.Connection, collection_id: int, *, building_not_of: str | None = None
) -> int:
    """Drop the collection's retired sets (and, with `building_not_of`, a building set of another model: a
    switch to a new model gives up one to an older choice); returns how many went."""
    rows = conn.execute(
        """SELECT id FROM embedding_sets WHERE collection_id = %s
           AND (status = 'retired' OR (status = 'building' AND %s::text IS NOT NULL AND model <> %s))""",
        (collection_id, building_not_of, building_not_of),
    ).fetchall()
    conn.commit()
    return sum(drop_set(conn, r[0]) for r in rows)
