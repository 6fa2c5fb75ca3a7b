"""Paged reads for looking at a collection (`chunkyard ui`): one document's chunks, sections and text window,
a collection's documents, runs, quality and eval history, a run's changes, and the parts of a hybrid score.

Every read is bounded (a page of rows, a window of text): none reads a whole table or a whole 5 MB text.
Under row-level security a row of another tenant is simply absent, so callers see None or [] for it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import psycopg

#: "Written in the document's last write": the chunk's vector row was inserted in the same transaction as
#: the document row's current version (equal xmin). A chunk only moved by text inserted above it keeps its
#: vector row, so it reads as kept; after a model switch the new vectors come from another transaction.
_WRITTEN_LAST = """EXISTS (SELECT 1 FROM chunk_vectors v
                           JOIN embedding_sets es ON es.id = v.set_id AND es.status = 'active'
                           WHERE v.chunk_id = c.id AND v.xmin = d.xmin)"""


def _dicts(cur: psycopg.Cursor) -> list[dict[str, Any]]:
    names = [c.name for c in cur.description or []]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _one(cur: psycopg.Cursor) -> dict[str, Any] | None:
    rows = _dicts(cur)
    return rows[0] if rows else None


# ------------------------------------------------------------------------------------- collections


def collection_facets(conn: psycopg.Connection, name: str) -> dict[str, Any] | None:
    """A collection's id, dates and profile, with its live documents counted by type and by language."""
    head = _one(
        conn.execute(
            "SELECT id, name, profile, created_at, updated_at FROM collections WHERE name = %s", (name,)
        )
    )
    if head is None:
        conn.commit()
        return None
    rows = conn.execute(
        """SELECT doc_type, coalesce(nullif(language, ''), 'no letters'), count(*)
           FROM documents WHERE collection_id = %s AND deleted_at IS NULL GROUP BY 1, 2 ORDER BY 3 DESC""",
        (head["id"],),
    ).fetchall()
    conn.commit()
    types: dict[str, int] = {}
    langs: dict[str, int] = {}
    for t, lang, n in rows:
        types[t] = types.get(t, 0) + n
        langs[lang] = langs.get(lang, 0) + n
    return head | {"doc_types": types, "languages": langs}


def collection_documents(
    conn: psycopg.Connection, collection_id: int, *, offset: int = 0, limit: int = 50, match: str | None = None
) -> tuple[list[dict[str, Any]], int]:
    """One page of a collection's documents (by source uri; `match` a substring of it) and how many match."""
    where = "d.collection_id = %(c)s AND (%(m)s::text IS NULL OR strpos(d.source_uri, %(m)s) > 0)"
    args = {"c": collection_id, "m": match or None, "o": offset, "l": limit}
    total = conn.execute(f"SELECT count(*) FROM documents d WHERE {where}", args).fetchone()[0]
    rows = _dicts(
        conn.execute(
            f"""SELECT d.id, d.source_uri, d.doc_type, d.title, d.last_run_id, d.updated_at, d.deleted_at,
                       d.language, (d.metadata ->> 'pages')::int AS pages,
                       (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks,
                       (SELECT count(*) FROM sections s WHERE s.document_id = d.id) AS sections
                FROM documents d WHERE {where}
                ORDER BY d.source_uri OFFSET %(o)s LIMIT %(l)s""",
            args,
        )
    )
    conn.commit()
    return rows, total


def collection_runs(
    conn: psycopg.Connection, collection_id: int, *, offset: int = 0, limit: int = 20
) -> tuple[list[dict[str, Any]], int]:
    """One page of a collection's runs, newest first, and how many there are."""
    total = conn.execute("SELECT count(*) FROM runs WHERE collection_id = %s", (collection_id,)).fetchone()[0]
    rows = _dicts(
        conn.execute(
            """SELECT r.id, r.kind, r.status, r.started_at, r.finished_at, r.counts, r.timings,
                      (SELECT count(*) FROM ingest_errors e WHERE e.run_id = r.id) AS errors
               FROM runs r WHERE r.collection_id = %s ORDER BY r.id DESC OFFSET %s LIMIT %s""",
            (collection_id, offset, limit),
        )
    )
    conn.commit()
    return rows, total


def quality_history(conn: psycopg.Connection, collection_id: int, *, limit: int = 200) -> list[dict[str, Any]]:
    """The last `limit` runs with quality figures (runs.quality), oldest first: what the plots draw."""
    rows = _dicts(
        conn.execute(
            """SELECT * FROM (SELECT id AS run_id, kind, status, coalesce(finished_at, started_at) AS at, quality
                              FROM runs WHERE collection_id = %s AND quality IS NOT NULL
                              ORDER BY id DESC LIMIT %s) t ORDER BY run_id""",
            (collection_id, limit),
        )
    )
    conn.commit()
    return rows


def eval_history(conn: psycopg.Connection, collection_id: int, *, limit: int = 200) -> list[dict[str, Any]]:
    """The last `limit` evaluation runs of a collection (eval_results), oldest first."""
    rows = _dicts(
        conn.execute(
            """SELECT * FROM (SELECT run_id, created_at AS at, question_set, k, search_mode, n_questions, recall,
                                     precision, iou, hit_rate, mrr, is_baseline, baseline_recall, recall_drop,
                                     max_drop, passed
                              FROM eval_results WHERE collection_id = %s
                              ORDER BY run_id DESC LIMIT %s) t ORDER BY run_id""",
            (collection_id, limit),
        )
    )
    conn.commit()
    return rows


# --------------------------------------------------------------------------------------- documents


def document_header(conn: psycopg.Connection, doc_id: int) -> dict[str, Any] | None:
    """A document without its text: collection, type, hashes, length, counts and its last run."""
    row = _one(
        conn.execute(
            """SELECT d.id, d.collection_id, col.name AS collection, d.source_uri, d.doc_type, d.mime, d.title,
                      d.metadata, d.language, d.content_hash, d.text_hash, d.chunk_key, length(d.normalized_text) AS chars,
                      d.last_run_id, d.created_at, d.updated_at, d.deleted_at,
                      r.kind AS run_kind, r.status AS run_status, r.started_at AS run_started,
                      (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks,
                      (SELECT count(*) FROM sections s WHERE s.document_id = d.id) AS sections
               FROM documents d JOIN collections col ON col.id = d.collection_id
               LEFT JOIN runs r ON r.id = d.last_run_id
               WHERE d.id = %s""",
            (doc_id,),
        )
    )
    conn.commit()
    return row


def document_chunks(
    conn: psycopg.Connection, doc_id: int, *, offset: int = 0, limit: int = 300
) -> list[dict[str, Any]]:
    """One page of a document's chunks in text order, each with its section's heading path and whether it
    was written in the document's last write (see _WRITTEN_LAST)."""
    rows = _dicts(
        conn.execute(
            f"""SELECT c.id, c.section_id, c.ordinal, c.char_start, c.char_end, c.token_count, c.context,
                       c.search_context, c.language, c.content_hash, c.embed_hash, c.metadata, s.heading_path,
                       {_WRITTEN_LAST} AS written_last
                FROM chunks c JOIN documents d ON d.id = c.document_id
                JOIN sections s ON s.id = c.section_id
                WHERE c.document_id = %s
                ORDER BY c.char_start, c.id OFFSET %s LIMIT %s""",
            (doc_id, offset, limit),
        )
    )
    conn.commit()
    return rows


def chunks_before(conn: psycopg.Connection, doc_id: int, at: int) -> int:
    """How many of a document's chunks start before character `at` (to find the page that shows it)."""
    n = conn.execute(
        "SELECT count(*) FROM chunks WHERE document_id = %s AND char_start < %s", (doc_id, at)
    ).fetchone()[0]
    conn.commit()
    return n


def document_text(conn: psycopg.Connection, doc_id: int, start: int, end: int) -> str:
    """The normalized text's characters [start, end): a window, not the whole text."""
    row = conn.execute(
        "SELECT substr(normalized_text, %s + 1, greatest(%s - %s, 0)) FROM documents WHERE id = %s",
        (start, end, start, doc_id),
    ).fetchone()
    conn.commit()
    return row[0] if row else ""


def document_sections(conn: psycopg.Connection, doc_id: int, *, limit: int = 2000) -> list[dict[str, Any]]:
    """A document's section tree in text order (the first `limit`), with each section's chunk count."""
    rows = _dicts(
        conn.execute(
            """SELECT s.id, s.parent_id, s.ordinal, s.level, s.kind, s.heading_path, s.char_start, s.char_end,
                      s.content_hash, (SELECT count(*) FROM chunks c WHERE c.section_id = s.id) AS chunks
               FROM sections s WHERE s.document_id = %s ORDER BY s.char_start, s.ordinal LIMIT %s""",
            (doc_id, limit),
        )
    )
    conn.commit()
    return rows


def hit_windows(
    conn: psycopg.Connection, collection_id: int, spans: list[tuple[str, int, int]], *, margin: int = 240
) -> list[dict[str, Any] | None]:
    """For each (source uri, start, end) of a search hit: its document id, `margin` characters of text
    before and after the span, and the span's text, read in one statement (None: document not readable)."""
    if not spans:
        return []
    rows = conn.execute(
        """SELECT u.i, d.id, substr(d.normalized_text, greatest(u.s - %s, 0) + 1, u.s - greatest(u.s - %s, 0)),
                  substr(d.normalized_text, u.s + 1, u.e - u.s), substr(d.normalized_text, u.e + 1, %s),
                  length(d.normalized_text)
           FROM unnest(%s::text[], %s::int[], %s::int[]) WITH ORDINALITY AS u(uri, s, e, i)
           JOIN documents d ON d.collection_id = %s AND d.source_uri = u.uri""",
        (margin, margin, margin, [s[0] for s in spans], [s[1] for s in spans], [s[2] for s in spans],
         collection_id),
    ).fetchall()  # fmt: skip
    conn.commit()
    found = {
        i: {"doc_id": d, "before": b, "span": s, "after": a, "chars": n} for i, d, b, s, a, n in rows
    }
    return [found.get(i) for i in range(1, len(spans) + 1)]


def score_parts(
    conn: psycopg.Connection, collection: str, query_vec: np.ndarray | None, query_text: str, *, n: int = 50
) -> dict[int, dict[str, Any]]:
    """chunk id -> its rank and cosine similarity among the top `n` by vector, and its rank and BM25 score
    among the top `n` by full text: the two lists hybrid search fuses (its candidates, p_candidates = 50)."""
    parts: dict[int, dict[str, Any]] = {}
    if query_vec is not None:
        for rank, (cid, dist) in enumerate(
            conn.execute("SELECT chunk_id, dist FROM chunkyard_vector_candidates(%s, %s, %s) ORDER BY dist, chunk_id",
                         (collection, query_vec, n)).fetchall(), 1):  # fmt: skip
            parts.setdefault(cid, {})["vector"] = (rank, 1 - dist)
    if query_text.strip():
        for rank, (cid, score) in enumerate(
            conn.execute("SELECT chunk_id, score FROM chunkyard_bm25(%s, %s, %s)",
                         (collection, query_text, n)).fetchall(), 1):  # fmt: skip
            parts.setdefault(cid, {})["fulltext"] = (rank, score)
    conn.commit()
    return parts


# -------------------------------------------------------------------------------------------- runs


def run_detail(conn: psycopg.Connection, run_id: int) -> dict[str, Any] | None:
    """A run's ledger row with its collection's name, and its eval result for an evaluation run."""
    row = _one(
        conn.execute(
            """SELECT r.id, r.collection_id, c.name AS collection, r.kind, r.status, r.started_at, r.finished_at,
                      r.params, r.counts, r.timings, r.quality,
                      (SELECT to_jsonb(e) - 'per_question' FROM eval_results e WHERE e.run_id = r.id) AS eval
               FROM runs r LEFT JOIN collections c ON c.id = r.collection_id WHERE r.id = %s""",
            (run_id,),
        )
    )
    conn.commit()
    return row


def run_documents(
    conn: psycopg.Connection, run_id: int, *, offset: int = 0, limit: int = 50
) -> tuple[list[dict[str, Any]], int]:
    """One page of the documents a run wrote last (documents.last_run_id), new ones marked, and the total."""
    total = conn.execute("SELECT count(*) FROM documents WHERE last_run_id = %s", (run_id,)).fetchone()[0]
    rows = _dicts(
        conn.execute(
            f"""SELECT d.id, d.source_uri, d.doc_type, d.deleted_at, d.created_at >= r.started_at AS is_new,
                       (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) AS chunks,
                       (SELECT count(*) FROM chunks c WHERE c.document_id = d.id AND {_WRITTEN_LAST}) AS written
                FROM documents d JOIN runs r ON r.id = d.last_run_id
                WHERE d.last_run_id = %s ORDER BY d.source_uri OFFSET %s LIMIT %s""",
            (run_id, offset, limit),
        )
    )
    conn.commit()
    return rows, total
