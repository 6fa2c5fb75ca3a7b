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
from pipeline.evaluate.metrics import Retrieved, budget_scores, precision_omega, question_scores, summarize
from pipeline.evaluate.offsets import OffsetMap
from pipeline.model import Span

if TYPE_CHECKING:
    import psycopg

Mode = Literal["vector", "fulltext", "hybrid", "rrf"]


def embed_questions(questions: Sequence[Question], settings: Settings) -> np.ndarray:
    """Question vectors, embedded afresh with the collection's model (and its query prompt)."""
    from pipeline.embed import key_for, query_embedder

    return query_embedder(key_for(settings), settings).encode([q.text for q in questions])


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
    budgets: Sequence[int] = (),
) -> list[dict]:
    """Index into a throwaway collection, score every mode, drop the collection; one result per mode.

    With `budgets`, each mode is also scored at each budget of cl100k tokens (`metrics.within_budget`).
    """
    from pipeline import db, store

    collection = f"_eval_{uuid.uuid4().hex[:12]}"
    url = db.database_url(settings)
    t0 = time.perf_counter()
    try:
        indexed = index(collection)
        t_index = time.perf_counter() - t0
        with db.connection(url) as conn:
            results = _score(
                conn, collection, indexed, corpora, questions, qvecs, k=k, modes=modes, model=settings.model,
                budgets=budgets,
            )  # fmt: skip
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
    budgets: Sequence[int] = (),
) -> list[dict]:
    """One result per mode; chunk facts and precision_Ω depend on the chunks only, so all modes share them."""
    from pipeline import store
    from pipeline.embed.meta import model_max_tokens
    from pipeline.tokens import counter

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
            if mode == "vector":  # the index's top k chunks against the exact ones (no section returned whole)
                exact_ids = {ids[j] for j in exact[qi]}
                ann = store.search(conn, collection, qvecs[qi], k=k, mode=mode, whole_sections=None)
                agree.append(len(exact_ids & {h.chunk_id for h in ann}) / max(len(exact_ids), 1))
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
        if budgets:
            _score_budgets(conn, collection, res, questions, qvecs, maps, u2c, p_omega, mode=mode,
                           k=k, budgets=budgets)  # fmt: skip
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


def _score_budgets(
    conn: psycopg.Connection,
    collection: str,
    res: dict,
    questions: Sequence[Question],
    qvecs: np.ndarray,
    maps: dict[str, OffsetMap],
    u2c: dict[str, str],
    p_omega: list[float],
    *,
    mode: Mode,
    k: int,
    budgets: Sequence[int],
) -> None:
    """Each question's ranking read until the largest budget is spent, scored at every budget (in place)."""
    from pipeline.tokens import counter

    cl100k = counter("cl100k_base")
    ends_memo: dict[int, tuple[Retrieved, list[int]]] = {}

    def raw(h: Any) -> tuple[Retrieved, list[int]]:
        """The chunk as a raw range, and where its first 1, 2, ... cl100k tokens end (raw characters)."""
        if h.chunk_id not in ends_memo:
            m = maps[h.source_uri]
            rs, re_ = m.to_raw(h.char_start, h.char_end)
            ends = [min(m.to_raw(h.char_start, h.char_start + e)[1], re_) - rs
                    for _, e in cl100k.encode_offsets(h.text)]  # fmt: skip
            ends_memo[h.chunk_id] = (Retrieved(u2c[h.source_uri], rs, re_), ends)
        return ends_memo[h.chunk_id]

    top = max(budgets)
    rows: dict[int, list[dict]] = {b: [] for b in budgets}
    for qi, q in enumerate(questions):
        got = ranked_until(conn, collection, qvecs[qi], q.text, mode=mode, tokens=top, start_k=k, chunk=raw)
        ranked = [g for g, _ in got]
        ends = [e for _, e in got]
        per = {}
        for b in budgets:
            sc = budget_scores(q.excerpts, q.corpus_id, ranked, ends, b)
            sc["precision_omega"] = p_omega[qi]
            rows[b].append({"corpus": q.corpus_id, **sc})
            per[str(b)] = {m: round(sc[m], 6) for m in ("recall", "precision", "iou", "chunks", "tokens")}
        res["per_question"][qi]["budgets"] = per
    res["budgets"] = {
        str(b): {
            "summary": summarize(rs) | {"mean_chunks": round(float(np.mean([r["chunks"] for r in rs])), 2),
                                        "mean_tokens": round(float(np.mean([r["tokens"] for r in rs])), 1)},
            "per_corpus": {c: summarize([r for r in rs if r["corpus"] == c]) for c in sorted({r["corpus"] for r in rs})},
        }
        for b, rs in rows.items()
    }  # fmt: skip


def ranked_until(
    conn: psycopg.Connection,
    collection: str,
    qvec: np.ndarray | None,
    text: str,
    *,
    mode: Mode,
    tokens: int,
    start_k: int,
    chunk: Callable[[Any], tuple[Retrieved, list[int]]],
) -> list[tuple[Retrieved, list[int]]]:
    """The chunks a context of `tokens` tokens reads, in order, as `chunkyard search --budget` reads them
    (`store.context`: rank order, and the rest of a section once half of it is read, in document order); the
    search is asked for more chunks until they hold `tokens` cl100k tokens (or it has no more)."""
    from pipeline import store

    kk = max(start_k, 32)
    while True:
        # every chunk of the search's top kk, read in order (the budget is counted here, in cl100k tokens,
        # whatever unit the collection counts its chunks in)
        hits = store.context(conn, collection, qvec, budget=None, k=kk, query_text=text, mode=mode)
        got = [chunk(h) for h in hits]
        ranked = sum(not h.metadata.get("completes_section") for h in hits)
        if sum(len(e) for _, e in got) >= tokens or ranked < kk or kk >= 1000:
            return got
        kk = min(kk * 4, 1000)
