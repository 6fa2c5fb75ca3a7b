"""Reading chunks back: search through the SQL functions users call, and a collection's chunks and texts."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import psycopg
from psycopg import sql

from pipeline.store.documents import as_array

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
    metadata: dict = field(default_factory=dict)


#: How `search` ranks: cosine similarity, BM25 full text, or both fused ("hybrid": chunkyard_hybrid_search's default
#: 'auto', a convex mix whose vector weight halves for a language the model was not trained on; or reciprocal
#: rank fusion).
SearchMode = Literal["vector", "fulltext", "hybrid", "rrf"]
SEARCH_MODES: tuple[str, ...] = ("vector", "fulltext", "hybrid", "rrf")

#: A section whose retrieved chunks cover at least this share of it is returned whole (the SQL functions'
#: `p_whole_section` default): "most of a section" retrieved. On Chroma's benchmark (hybrid, k = 5) recall
#: 85.5 -> 86.8 with IoU 8.2 -> 7.5, no corpus lower (README "Evaluation").
WHOLE_SECTION_SHARE = 0.5


def search(
    conn: psycopg.Connection,
    collection: str,
    query_vec: np.ndarray | None,
    *,
    k: int = 5,
    query_text: str | None = None,
    mode: SearchMode = "vector",
    with_parent: bool = False,
    whole_sections: float | None = WHOLE_SECTION_SHARE,
) -> list[Hit]:
    """Top-k chunks through the SQL functions users call themselves; a section at least `whole_sections`
    retrieved comes back whole in place of its chunks (None: chunks only)."""
    _check_mode(mode)
    if mode in ("hybrid", "rrf"):
        query = """SELECT * FROM chunkyard_hybrid_search(%s, %s, %s, %s, %s, p_fusion => %s,
                                                         p_whole_section => %s)"""
        args: tuple = (collection, query_vec, query_text or "", k, with_parent, _fusion(mode), whole_sections)
    elif mode == "fulltext":
        query = """SELECT h.*
                   FROM (SELECT array_agg(f.chunk_id ORDER BY f.score DESC, f.chunk_id) AS ids,
                                array_agg(f.score ORDER BY f.score DESC, f.chunk_id) AS scores
                         FROM chunkyard_fulltext_search(%s, %s, %s) f) t
                   CROSS JOIN LATERAL chunkyard_hits(t.ids, t.scores, %s, %s) h"""
        args = (collection, query_text or "", k, with_parent, whole_sections)
    else:
        query = "SELECT * FROM chunkyard_search(%s, %s, %s, %s, %s)"
        args = (collection, query_vec, k, with_parent, whole_sections)
    rows = conn.execute(query, args).fetchall()
    conn.commit()
    return [Hit(*r[:-1], _as_dict(r[-1])) for r in rows]


@dataclass(frozen=True)
class ContextHit(Hit):
    """A chunk read into a context (`context`): its tokens (the collection's unit) and those read before it."""

    tokens: int = 0
    tokens_before: int = 0


def context(
    conn: psycopg.Connection,
    collection: str,
    query_vec: np.ndarray | None,
    *,
    budget: int | None,
    query_text: str | None = None,
    mode: SearchMode = "vector",
    with_parent: bool = False,
    whole_sections: float | None = WHOLE_SECTION_SHARE,
    k: int | None = None,
) -> list[ContextHit]:
    """A context of `budget` tokens (`chunkyard_context`): the search's chunks in rank order, and the rest of a
    section once `whole_sections` of it is read, in document order, until the budget is spent (the last chunk
    may go past it). The search is asked for `k` chunks, or by default for 32 and then more until the
    context is full or the search has no more (1000 at most); `budget` None reads all `k` of them."""
    if budget is None and k is None:
        raise ValueError("context: give a budget of tokens or the number of chunks k to read")
    _check_mode(mode)
    kk = k or 32
    while True:
        ranking, args = _ranking(mode, collection, query_vec, query_text, kk)
        rows = conn.execute(
            f"""SELECT h.*, cardinality(t.ids)
                FROM (SELECT array_agg(r.chunk_id ORDER BY r.score DESC, r.chunk_id) AS ids,
                             array_agg(r.score ORDER BY r.score DESC, r.chunk_id) AS scores
                      FROM {ranking} r) t
                CROSS JOIN LATERAL chunkyard_context(t.ids, t.scores, %s, %s, %s) h""",
            (*args, budget, whole_sections, with_parent),
        ).fetchall()
        conn.commit()
        ranked = rows[0][-1] if rows else 0
        spent = sum(r[10] for r in rows)
        if k is not None or budget is None or spent >= budget or ranked < kk or kk >= 1000:
            return [ContextHit(*r[:9], _as_dict(r[9]), r[10], r[11]) for r in rows]
        kk = min(kk * 4, 1000)


def _ranking(
    mode: SearchMode, collection: str, query_vec: np.ndarray | None, query_text: str | None, k: int
) -> tuple[str, tuple]:
    """A search's top k chunks, no section whole, as a FROM item with chunk_id and score (and its args)."""
    if mode in ("hybrid", "rrf"):
        return (
            "chunkyard_hybrid_search(%s, %s, %s, %s, p_fusion => %s, p_whole_section => NULL)",
            (collection, query_vec, query_text or "", k, _fusion(mode)),
        )
    if mode == "fulltext":
        return "chunkyard_fulltext_search(%s, %s, %s)", (collection, query_text or "", k)
    return "chunkyard_search(%s, %s, %s, p_whole_section => NULL)", (collection, query_vec, k)


def _fusion(mode: SearchMode) -> str:
    return "rrf" if mode == "rrf" else "auto"


def _check_mode(mode: str) -> None:
    if mode not in SEARCH_MODES:
        raise ValueError(f"search mode {mode!r}: expected one of {', '.join(SEARCH_MODES)}")


def _as_dict(metadata: object) -> dict:
    """Chunk metadata as a dict; rows written before schema version 4 hold it as a JSON string."""
    if isinstance(metadata, str):
        metadata = json.loads(metadata)
    return metadata if isinstance(metadata, dict) else {}


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
        ).format(
            sql.SQL("(SELECT e.embedding FROM chunk_embeddings e WHERE e.chunk_id = c.id)")
            if embeddings
            else sql.SQL("NULL")
        ),
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
