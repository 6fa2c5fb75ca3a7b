"""Reading chunks back: search through the SQL functions users call, and a collection's chunks and texts."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any, Literal, TypeVar

import numpy as np
import psycopg
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from pipeline.store.documents import as_array

H = TypeVar("H", bound="Hit")

# ------------------------------------------------------------------------------------------ reading


@dataclass(frozen=True)
class Hit:
    """A row of the SQL type chunkyard_hit, as a search returns it (read by column name)."""

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


@dataclass(frozen=True)
class ContextHit(Hit):
    """A chunk read into a context (`context`): its tokens (the collection's unit) and those read before it."""

    tokens: int = 0
    tokens_before: int = 0


#: How `search` ranks: cosine similarity, BM25 full text, or both fused ("hybrid": chunkyard_hybrid_search's default
#: 'auto', a convex mix whose vector weight halves for a language the model was not trained on; or reciprocal
#: rank fusion).
SearchMode = Literal["vector", "fulltext", "hybrid", "rrf"]
SEARCH_MODES: tuple[str, ...] = ("vector", "fulltext", "hybrid", "rrf")

#: A section whose retrieved chunks cover at least this share of it is returned whole (the SQL functions'
#: `p_whole_section` default): "most of a section" retrieved. On Chroma's benchmark (hybrid, k = 5) recall
#: 85.5 -> 86.8 with IoU 8.2 -> 7.5, no corpus lower (README "Evaluation").
WHOLE_SECTION_SHARE = 0.5

#: Scores a search's candidates for its query, one float per (context, text) of a chunk, higher first: how
#: `search` and `context` rerank (`pipeline.rerank`); the store never loads a model itself.
Scorer = Callable[[Sequence[tuple[str, str]]], Sequence[float]]


def search_filter(
    *,
    source: Sequence[str] = (),
    documents: Sequence[int] = (),
    doc_type: Sequence[str] = (),
    language: Sequence[str] = (),
    metadata: Mapping[str, Any] | None = None,
    updated_since: datetime | str | None = None,
) -> dict[str, Any] | None:
    """The `p_filter` of the SQL search functions (docs/search-filters.md) from its parts; None filters nothing."""
    found: dict[str, Any] = {
        "source": list(source), "documents": [int(d) for d in documents], "doc_type": list(doc_type),
        "language": list(language), "metadata": dict(metadata or {}),
        "updated_since": updated_since.isoformat() if isinstance(updated_since, datetime) else updated_since,
    }  # fmt: skip
    return {k: v for k, v in found.items() if v not in ((), [], {}, None)} or None


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
    filters: Mapping[str, Any] | None = None,
    rerank: Scorer | None = None,
    candidates: int = 0,
) -> list[Hit]:
    """Top-k chunks through the SQL functions users call themselves; a section at least `whole_sections`
    retrieved comes back whole in place of its chunks (None: chunks only); `filters`: the chunks searched
    (`search_filter`). With `rerank`, the search's top max(k, `candidates`) chunks are scored by it and its
    top k are returned (scores: the reranker's), sections made whole from those k as the SQL search does."""
    if rerank is not None:
        ids, scores = _reranked(conn, _ranking(conn, mode, collection, query_vec, query_text, max(k, candidates),
                                               filters), rerank)  # fmt: skip
        rows = conn.cursor(row_factory=dict_row).execute(
            "SELECT * FROM chunkyard_hits(%s, %s, %s, %s)", (ids[:k], scores[:k], with_parent, whole_sections)
        ).fetchall()
        conn.commit()
        return [_hit(Hit, r) for r in rows]
    call, args = _search_call(mode, collection, query_vec, query_text, k, p_with_parent=with_parent,
                              p_whole_section=whole_sections, p_filter=_jsonb(filters))  # fmt: skip
    rows = conn.cursor(row_factory=dict_row).execute(f"SELECT * FROM {call}", args).fetchall()
    conn.commit()
    return [_hit(Hit, r) for r in rows]


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
    filters: Mapping[str, Any] | None = None,
    rerank: Scorer | None = None,
    candidates: int = 0,
) -> list[ContextHit]:
    """A context of `budget` tokens (`chunkyard_context`): the search's chunks in rank order, and the rest of a
    section once `whole_sections` of it is read, in document order, until the budget is spent (the last chunk
    may go past it). The search is asked for `k` chunks, or by default for 32 and then more until the
    context is full or the search has no more (1000 at most); `budget` None reads all `k` of them; `filters`:
    the chunks searched (`search_filter`). With `rerank`, the ranking's first max(k, `candidates`) chunks are
    read in the reranker's order (scores: its), then the rest in the search's (score None); the same
    chunkyard_context assembles it, so sections and offsets read as without."""
    if budget is None and k is None:
        raise ValueError("context: give a budget of tokens or the number of chunks k to read")
    candidates = max(k or 0, candidates)
    head: tuple[list[int], list[float]] | None = None  # the reranked head of the ranking: scored once

    def read(kk: int) -> tuple[list[dict[str, Any]], int]:
        """The context of the search's top kk chunks, and how many the search ranked."""
        nonlocal head
        if rerank is None:  # one statement: the ranking goes from the search function straight in
            call, args = _search_call(mode, collection, query_vec, query_text, kk, p_whole_section=None,
                                      p_filter=_jsonb(filters))  # fmt: skip
            rows = conn.cursor(row_factory=dict_row).execute(
                f"""SELECT h.*, cardinality(t.ids) AS ranked
                    FROM (SELECT array_agg(r.chunk_id ORDER BY r.score DESC, r.chunk_id) AS ids,
                                 array_agg(r.score ORDER BY r.score DESC, r.chunk_id) AS scores
                          FROM {call} r) t
                    CROSS JOIN LATERAL chunkyard_context(t.ids, t.scores, %s, %s, %s) h""",
                (*args, budget, whole_sections, with_parent),
            ).fetchall()
            conn.commit()
            return rows, rows[0]["ranked"] if rows else 0
        # reranked: the head in the reranker's order (its scores), a longer ranking only adds to the tail,
        # which keeps the search's order and no score
        ids = _ranking(conn, mode, collection, query_vec, query_text, kk, filters)
        if head is None:
            head = _reranked(conn, ids[:candidates], rerank)
        in_head = set(head[0])
        tail = [i for i in ids if i not in in_head]
        rows = conn.cursor(row_factory=dict_row).execute(
            "SELECT * FROM chunkyard_context(%s, %s::float8[], %s, %s, %s)",
            (head[0] + tail, head[1] + [None] * len(tail), budget, whole_sections, with_parent),
        ).fetchall()
        conn.commit()
        return rows, len(ids)

    kk = k or (32 if rerank is None else max(32, candidates))
    while True:
        rows, ranked = read(kk)
        spent = sum(r["tokens"] for r in rows)
        if k is not None or budget is None or spent >= budget or ranked < kk or kk >= 1000:
            return [_hit(ContextHit, r) for r in rows]
        kk = min(kk * 4, 1000)


def _ranking(
    conn: psycopg.Connection,
    mode: SearchMode,
    collection: str,
    query_vec: np.ndarray | None,
    query_text: str | None,
    k: int,
    filters: Mapping[str, Any] | None,
) -> list[int]:
    """A search's top k chunk ids in rank order, chunks only (no section made whole)."""
    call, args = _search_call(mode, collection, query_vec, query_text, k, p_whole_section=None,
                              p_filter=_jsonb(filters))  # fmt: skip
    rows = conn.execute(f"SELECT chunk_id FROM {call} ORDER BY score DESC, chunk_id", args).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def _reranked(conn: psycopg.Connection, ids: list[int], rerank: Scorer) -> tuple[list[int], list[float]]:
    """Chunk ids ordered by `rerank`'s scores of their (context, text), best first (ties: the search's order)."""
    if not ids:
        return [], []
    rows = dict(
        (r[0], (r[1], r[2]))
        for r in conn.execute(
            "SELECT id, coalesce(context, ''), text FROM chunks WHERE id = ANY(%s)", (ids,)
        ).fetchall()
    )
    conn.commit()
    ids = [i for i in ids if i in rows]
    scores = [float(x) for x in rerank([rows[i] for i in ids])]
    if len(scores) != len(ids):
        raise ValueError(f"rerank: {len(scores)} scores for {len(ids)} candidates")
    order = sorted(range(len(ids)), key=lambda j: -scores[j])  # stable: ties keep the search's order
    return [ids[j] for j in order], [scores[j] for j in order]


def _search_call(
    mode: SearchMode, collection: str, query_vec: np.ndarray | None, query_text: str | None, k: int, **named: Any
) -> tuple[str, tuple]:
    """The call of a mode's search function (`named`: its p_ parameters by name), and its arguments."""
    if mode not in SEARCH_MODES:
        raise ValueError(f"search mode {mode!r}: expected one of {', '.join(SEARCH_MODES)}")
    if mode in ("hybrid", "rrf"):
        name, args = "chunkyard_hybrid_search", [collection, query_vec, query_text or "", k]
        named = {"p_fusion": "rrf" if mode == "rrf" else "auto", **named}
    elif mode == "fulltext":
        name, args = "chunkyard_fulltext_search", [collection, query_text or "", k]
    else:
        name, args = "chunkyard_search", [collection, query_vec, k]
    params = ["%s"] * len(args) + [f"{p} => %s" for p in named]
    return f"{name}({', '.join(params)})", (*args, *named.values())


def _jsonb(filters: Mapping[str, Any] | None) -> Jsonb | None:
    return Jsonb(dict(filters)) if filters else None


def _hit(cls: type[H], row: dict[str, Any]) -> H:
    """A chunkyard_hit row as `cls`, field by field from the columns of the same name; metadata as a dict (rows
    written before schema version 4 hold it as a JSON string)."""
    values = {f.name: row[f.name] for f in fields(cls)}
    meta = values["metadata"]
    if isinstance(meta, str):
        meta = json.loads(meta)
    values["metadata"] = meta if isinstance(meta, dict) else {}
    return cls(**values)


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
