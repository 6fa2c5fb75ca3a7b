"""What the full-text half of hybrid search would find if it also read each chunk's context (offline).

    python -m bench.experiments.fts_context --set fastapi-qa                       # default profile, all FTS variants
    python -m bench.experiments.fts_context --set chroma --a 'markdown:size=144,overlap=0,keep_whole=256,context=path'
    python -m bench.experiments.fts_context --set fastapi-qa --perq                # which questions change, per variant

Written when the SQL indexed only a chunk's own text for BM25; since migration 010 it indexes the title and
heading path with it (chunks.search_context), the "+path" variant below, which this measured first. The
embedded context (title and nearest heading by default) goes only into the embedding. BM25 is recomputed in
Python (Okapi, k1 1.2, b 0.75, IDF ln(1 + (N - df + 0.5) / (df + 0.5)), length = the tsvector's positions,
all matching chunks scored: chunkyard_fulltext_search without its candidate quorum) over the lexemes
Postgres gives for each variant's text, then fused with the kept collection's vectors exactly as
`retrieval_variants.Index.fused` (convex, alpha 0.5, top 50 of each list, min-max scaled).

Variants of the full-text document of a chunk:
  text        - its text only (what the SQL indexed before migration 010);
  +context    - the context actually embedded with it (the profile's `context` mode) and its text;
  +path       - the document title and the chunk's full heading path, and its text;
  +heading    - the nearest heading (when not in the text already), and its text;
  +path+prev  - as +path, with the last 300 characters of the document's previous chunk before the text.
Contexts come from the pipeline's own chunker (`jobs.preview_chunks` over the staged corpora), matched to
the stored chunks by offsets. Peers (peer:NAME) have no headings; use a pipeline spec.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from bench.eval_chroma import load_set
from bench.experiments.budget_gap import BUDGETS, load, score
from pipeline import db
from pipeline import evaluate as ev
from pipeline.config import Settings
from pipeline.evaluate.metrics import question_scores

CAND = 50
PREV = 300  # characters of the previous chunk in "+path+prev"


def contexts(qset: str, spec: str, settings: Settings) -> dict[tuple[str, int, int], tuple[str, str, str]]:
    """(corpus id, start, end) of each chunk -> (embedded context, title + full heading path, nearest heading)."""
    from pipeline.jobs import preview_chunks

    cfg = ev.parse_config(spec)
    corpora, _, _ = load_set(qset)
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        uris = ev.stage_corpora(corpora, Path(tmp), cfg.doc_type)
        for uri, cid in uris.items():
            path = Path(tmp) / Path(uri.removeprefix("file://")).name
            doc, _, chunks = preview_chunks(path, cfg.profile, model=settings.model)
            for si, c in chunks:
                sec = doc.sections[si]
                heads = [h for h in sec.heading_path if h and h != doc.title]
                full = " > ".join(([doc.title] if doc.title else []) + heads)
                near = next((h for h in reversed(sec.heading_path) if h), "")
                near = "" if near and near in c.text else near
                out[(cid, c.start, c.end)] = (c.context, full, near)
    return out


class Bm25:
    """Okapi BM25 over given documents' lexemes (from Postgres' english configuration)."""

    def __init__(self, conn, docs: list[str], k1: float = 1.2, b: float = 0.75) -> None:
        rows = conn.execute(
            """SELECT t.i, w.lexeme, coalesce(array_length(w.positions, 1), 1)
               FROM unnest(%s::text[]) WITH ORDINALITY AS t(txt, i)
               CROSS JOIN LATERAL unnest(to_tsvector('english', t.txt)) AS w""",
            (docs,),
        ).fetchall()
        self.tf: list[Counter] = [Counter() for _ in docs]
        for i, w, n in rows:
            self.tf[i - 1][w] = n
        self.dl = np.array([sum(c.values()) for c in self.tf], dtype=float)
        self.n = int((self.dl > 0).sum())
        self.avgdl = self.dl[self.dl > 0].mean()
        self.df = Counter(w for c in self.tf for w in c)
        self.post: dict[str, list[int]] = {}
        for i, c in enumerate(self.tf):
            for w in c:
                self.post.setdefault(w, []).append(i)
        self.k1, self.b = k1, b

    def search(self, lexemes: list[str], k: int = CAND) -> list[tuple[int, float]]:
        sc: dict[int, float] = {}
        for w in set(lexemes):
            if w not in self.df:
                continue
            idf = np.log(1 + (max(self.n, self.df[w]) - self.df[w] + 0.5) / (self.df[w] + 0.5))
            for i in self.post[w]:
                f = self.tf[i][w]
                sc[i] = sc.get(i, 0.0) + idf * f * (self.k1 + 1) / (
                    f + self.k1 * (1 - self.b + self.b * self.dl[i] / self.avgdl)
                )
        return sorted(sc.items(), key=lambda x: (-x[1], x[0]))[:k]


def fused(ix, qi: int, bm: list[tuple[int, float]], alpha: float = 0.5) -> list[int]:
    """Convex fusion as chunkyard_hybrid_search (and Index.fused), with a given BM25 list."""
    vtop = np.argsort(-ix.sims[qi])[:CAND]
    bmd = dict(bm)
    cand = sorted(set(vtop.tolist()) | set(bmd))
    sv = np.array([ix.sims[qi][i] for i in cand])
    bv = np.array([bmd.get(i, 0.0) for i in cand])

    def norm(x):
        return (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros_like(x)

    s = alpha * norm(sv) + (1 - alpha) * norm(bv)
    return [cand[j] for j in sorted(range(len(cand)), key=lambda j: (-s[j], cand[j]))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--set", dest="qset", default="fastapi-qa")
    ap.add_argument("--a", default="default", help="A pipeline spec (its kept collection, as budget_gap).")
    ap.add_argument("--perq", action="store_true", help="Per question: recall at k=5 and budgets, per variant.")
    ap.add_argument("--only", action="append", default=[], help="Variants to run (text, +context, ...).")
    a = ap.parse_args()
    settings = Settings()
    ix = load(a.qset, a.a, settings)
    spec = "default" if a.a == "default" else a.a
    ctx = contexts(a.qset, spec, settings)
    keys = [(ix.corpus_of[r[1]], r[2], r[3]) for r in ix.rows]
    miss = sum(k not in ctx for k in keys)
    if miss:
        print(f"warning: {miss} of {len(keys)} stored chunks have no context (offsets differ)")
    got = [ctx.get(k, ("", "", "")) for k in keys]
    texts = [r[5] for r in ix.rows]
    variants = {
        "text": texts,
        "+context": [f"{c[0]}\n\n{t}" if c[0] else t for c, t in zip(got, texts, strict=True)],
        "+path": [f"{c[1]}\n\n{t}" if c[1] else t for c, t in zip(got, texts, strict=True)],
        "+heading": [f"{c[2]}\n\n{t}" if c[2] else t for c, t in zip(got, texts, strict=True)],
        # and the end of the previous chunk of the document (what a window crossing the boundary would hold)
        "+path+prev": [
            (f"{c[1]}\n\n" if c[1] else "")
            + (ix.rows[i - 1][5][-PREV:] + "\n\n" if i and ix.rows[i - 1][1] == ix.rows[i][1] else "")
            + t
            for i, (c, t) in enumerate(zip(got, texts, strict=True))
        ],
    }
    if a.only:
        variants = {k: v for k, v in variants.items() if k in a.only}
    with db.connection(db.database_url(settings)) as conn:
        qlex = [
            [w for (w,) in conn.execute(
                "SELECT unnest(tsvector_to_array(to_tsvector('english', %s)))", (q.text,)).fetchall()]
            for q in ix.questions
        ]  # fmt: skip
        engines = {name: Bm25(conn, docs) for name, docs in variants.items()}
    # the stored ranking (SQL BM25) for reference
    rankings = {"SQL (stored BM25)": ix.fused}
    for name, eng in engines.items():
        rankings[f"FTS {name}"] = lambda qi, eng=eng: fused(ix, qi, eng.search(qlex[qi]))
        rankings[f"FTS {name}, BM25 only"] = lambda qi, eng=eng: [i for i, _ in eng.search(qlex[qi], 100)]
    corpora = sorted(ix.corpora) if len(ix.corpora) <= 6 else []
    print(f"{a.qset} {a.a}: {len(ix.rows)} chunks")
    print("| ranking | corpus | k=5 (SQL sections) | k=5 chunks | " + " | ".join(map(str, BUDGETS)) + " |")
    print("| --- | --- | --- | --- | " + " | ".join("---" for _ in BUDGETS) + " |")
    perq = {}
    for name, rank in rankings.items():
        rows = []
        for qi, q in enumerate(ix.questions):
            r = rank(qi)
            rows.append(
                (q.corpus_id,
                 [question_scores(q.excerpts, q.corpus_id, ix.sections(r, 5, 0.5))["recall"],
                  score(ix, qi, r, None)["recall"]] + [score(ix, qi, r, b)["recall"] for b in BUDGETS])
            )  # fmt: skip
        perq[name] = [x for _, x in rows]
        for c in ["all", *corpora]:
            m = 100 * np.mean([x for cc, x in rows if c == "all" or cc == c], axis=0)
            print(f"| {name} | {c} | " + " | ".join(f"{v:.1f}" for v in m) + " |", flush=True)
    if a.perq:
        base = perq["SQL (stored BM25)"]
        for name, rows in perq.items():
            ch = [(qi, b, r) for qi, (b, r) in enumerate(zip(base, rows, strict=True)) if b != r]
            print(f"\n{name}: {len(ch)} questions differ from the stored ranking")
            for qi, b, r in ch:
                print(f"  q{qi} [{ix.questions[qi].corpus_id}] "
                      f"{' '.join(f'{100 * x:3.0f}' for x in b)} -> {' '.join(f'{100 * x:3.0f}' for x in r)}"
                      f"  {ix.questions[qi].text[:70]!r}")  # fmt: skip


if __name__ == "__main__":
    main()
