"""Evaluation runs of a live collection: the texts answer spans point into, chunk spans, and eval_results."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

import psycopg
from psycopg import sql

from pipeline.model import Span

#: eval_results columns a run writes (besides the baseline verdict, which record_eval decides).
EVAL_FIELDS = (
    "run_id", "collection_id", "question_set", "questions_hash", "k", "search_mode", "n_questions",
    "recall", "precision", "precision_omega", "iou", "hit_rate", "mrr", "max_drop", "rerank",
)  # fmt: skip


def document_texts(conn: psycopg.Connection, collection_id: int, uris: Sequence[str]) -> dict[str, str]:
    """source uri -> normalized text of the named live documents (only those a question set points to)."""
    rows = conn.execute(
        """SELECT source_uri, normalized_text FROM documents
           WHERE collection_id = %s AND deleted_at IS NULL AND source_uri = ANY(%s)""",
        (collection_id, list(uris)),
    ).fetchall()
    conn.commit()
    return dict(rows)


def chunk_spans(conn: psycopg.Connection, collection_id: int, uris: Sequence[str]) -> dict[str, list[Span]]:
    """source uri -> (char_start, char_end) of every chunk of the named live documents."""
    rows = conn.execute(
        """SELECT d.source_uri, c.char_start, c.char_end
           FROM chunks c JOIN documents d ON d.id = c.document_id AND d.deleted_at IS NULL
           WHERE d.collection_id = %s AND d.source_uri = ANY(%s)
           ORDER BY d.source_uri, c.char_start""",
        (collection_id, list(uris)),
    ).fetchall()
    conn.commit()
    out: dict[str, list[Span]] = defaultdict(list)
    for uri, s, e in rows:
        out[uri].append((s, e))
    return dict(out)


def record_eval(
    conn: psycopg.Connection, result: dict[str, Any], *, per_question: list[dict], set_baseline: bool
) -> dict[str, Any]:
    """Store one evaluation run and judge it against its baseline, in one transaction.

    The baseline of (collection, question set, k, mode, reranker) is the first run stored for it, or the last one
    stored with `set_baseline`; any other run passes when its recall is at most `max_drop` points below.
    Returns is_baseline, baseline_run_id, baseline_recall, recall_drop and passed.
    """
    r = {f: result.get(f) for f in EVAL_FIELDS}  # rerank: None (off) unless given
    key = (r["collection_id"], r["questions_hash"], r["k"], r["search_mode"], r["rerank"])
    with conn.transaction():
        base = conn.execute(
            """SELECT run_id, recall FROM eval_results
               WHERE collection_id = %s AND questions_hash = %s AND k = %s AND search_mode = %s
                 AND rerank IS NOT DISTINCT FROM %s AND is_baseline
               FOR UPDATE""",
            key,
        ).fetchone()
        verdict: dict[str, Any] = {
            "baseline_run_id": base[0] if base else None,
            "baseline_recall": base[1] if base else None,
            "recall_drop": round(base[1] - r["recall"], 3) if base else None,
        }
        verdict["is_baseline"] = base is None or set_baseline
        verdict["passed"] = verdict["is_baseline"] or verdict["recall_drop"] <= r["max_drop"]
        if base is not None and set_baseline:
            conn.execute("UPDATE eval_results SET is_baseline = false WHERE run_id = %s", (base[0],))
        row = r | verdict | {"per_question": json.dumps(per_question)}
        cols = list(row)
        conn.execute(
            sql.SQL("INSERT INTO eval_results ({}) VALUES ({})").format(
                sql.SQL(", ").join(map(sql.Identifier, cols)),
                sql.SQL(", ").join(sql.Placeholder() * len(cols)),
            ),
            [row[c] for c in cols],
        )
    return verdict
