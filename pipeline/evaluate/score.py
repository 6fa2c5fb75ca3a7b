"""Scoring against the live collection: retrieve with the SQL search users call, score spans in raw characters.

Each configuration is indexed into a throwaway collection, every question is searched in every mode, and
the retrieved chunks are mapped back to raw-corpus ranges before the span metrics see them. An exact top k
over the stored vectors tells chunking effects from approximate (HNSW) search effects.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from pipeline.config import Settings
from pipeline.evaluate.data import Corpus, EvalError, Question
from pipeline.evaluate.index import Indexed
from pipeline.evaluate.metrics import Retrieved, precision_omega, question_scores, summarize
from pipeline.evaluate.offsets import OffsetMap
from pipeline.model import Span

if TYPE_CHECKING:
    import psycopg

Mode = Literal["vector", "fulltext", "hybrid", "rrf"]


def embed_questions(questions: Sequence[Question], settings: Settings) -> np.ndarray:
    """Question vectors, embedded afresh with the collection's model."""
    from pipeline.embed import embedder_for

    return embedder_for(settings).encode([q.text for q in questions])


def evaluate_index(
    label: str,
    index: Callable[[str], Indexed],
    corpora: dict[str, Corpus],
    questions: Sequence[Question],
    qvecs: np.ndarray,
    *,
    settings: Settings,
    k: int = 5,
    modes: Sequence[Mode] = ("vector",),
    meta: dict | None = None,
    keep: bool = False,
) -> list[dict]:
    """Index into a throwaway collection, score every mode, drop the collection; one result per mode."""
    from pipeline import db, store

    collection = f"_eval_{uuid.uuid4().hex[:12]}"
    url = db.database_url(settings)
    t0 = time.perf_counter()
    try:
        indexed = index(collection)
        t_index = time.perf_counter() - t0
        with db.connection(url) as conn:
            results = _score(
                conn, collection, indexed, corpora, questions, qvecs, k=k, modes=modes, model=settings.model
            )
    finally:
        if not keep:
            with db.connection(url) as conn:
                store.drop_collection(conn, collection)
    for r in results:
        r.update({"label": label, "k": k, **(meta or {})})
        r["index"] = {**indexed.info, "seconds": round(t_index, 2)}
    return results


def _score(
    conn: psycopg.Connection,
    collection: str,
    indexed: Indexed,
    corpora: dict[str, Corpus],
    questions: Sequence[Question],
    qvecs: np.ndarray,
    *,
    k: int,
    modes: Sequence[Mode],
    model: str,
) -> list[dict]:
    """One result per mode; chunk facts and precision_Ω depend on the chunks only, so all modes share them."""
    from pipeline import store
    from pipeline.tokens import counter, model_max_tokens

    u2c = indexed.uri_to_corpus
    maps: dict[str, OffsetMap] = {}
    normalization: dict[str, str] = {}
    for uri, norm in store.collection_texts(conn, collection).items():
        cid = u2c[uri]
        maps[uri] = OffsetMap(corpora[cid].text, norm, cid)
        normalization[cid] = "unchanged" if maps[uri].identity else "mapped"
    missing = sorted(set(corpora) - set(normalization))
    if missing:
        raise EvalError(f"corpora missing from the index: {', '.join(missing)}")
    rows = store.collection_chunks(conn, collection, embeddings=True)
    if not rows:
        raise EvalError("the configuration produced no chunks")
    by_corpus: dict[str, list[Span]] = defaultdict(list)
    ids, vecs, spans = [], [], {}
    embed_texts = []
    for cid_, uri, s, e, text, ctx, vec in rows:
        c = u2c[uri]
        rs, re_ = maps[uri].to_raw(s, e)
        by_corpus[c].append((rs, re_))
        spans[cid_] = Retrieved(c, rs, re_)
        ids.append(cid_)
        vecs.append(vec)
        embed_texts.append(f"{ctx}\n\n{text}" if ctx else text)
    model_counts = counter("model", model).count_many(embed_texts)
    limit = model_max_tokens(model)
    lengths = [r.end - r.start for r in spans.values()]
    chunk_info = {
        "count": len(rows),
        "per_corpus": {c: len(v) for c, v in sorted(by_corpus.items())},
        "mean_chars": round(float(np.mean(lengths)), 1),
        "mean_cl100k": round(float(np.mean([counter("cl100k_base").count(r[4]) for r in rows])), 1),
        "mean_model_tokens": round(float(np.mean(model_counts)), 1),
        "over_model_limit": int(sum(n > limit for n in model_counts)),
    }
    p_omega = [precision_omega(q.excerpts, by_corpus.get(q.corpus_id, [])) for q in questions]
    # exact top k, to tell chunking effects from approximate (HNSW) search effects
    mat = np.vstack(vecs)
    exact = np.argsort(-(qvecs @ mat.T), axis=1)[:, :k]
    out = []
    for mode in modes:
        per_q = []
        agree = []
        for qi, q in enumerate(questions):
            hits = store.search(conn, collection, qvecs[qi], k=k, query_text=q.text, mode=mode)
            got = [
                Retrieved(u2c[h.source_uri], *maps[h.source_uri].to_raw(h.char_start, h.char_end))
                for h in hits
            ]
            sc = question_scores(q.excerpts, q.corpus_id, got)
            sc["precision_omega"] = p_omega[qi]
            per_q.append(
                {"row": q.row, "corpus": q.corpus_id, **{m: round(v, 6) for m, v in sc.items()},
                 "retrieved": [[r.corpus_id, r.start, r.end] for r in got]}
            )  # fmt: skip
            if mode == "vector":
                exact_ids = {ids[j] for j in exact[qi]}
                agree.append(len(exact_ids & {h.chunk_id for h in hits}) / max(len(exact_ids), 1))
        res: dict[str, Any] = {
            "mode": mode,
            "summary": summarize(per_q),
            "per_corpus": {
                c: summarize([r for r in per_q if r["corpus"] == c])
                for c in sorted({r["corpus"] for r in per_q})
            },
            "chunks": chunk_info,
            "normalization": normalization,
            "per_question": per_q,
        }
        if mode == "vector":
            res["ann_agreement"] = round(float(np.mean(agree)), 4)
            exact_rows = [
                question_scores(q.excerpts, q.corpus_id, [spans[ids[j]] for j in exact[qi]])
                | {"precision_omega": p_omega[qi]}
                for qi, q in enumerate(questions)
            ]
            res["exact_search_summary"] = summarize(exact_rows)
        out.append(res)
    return out
