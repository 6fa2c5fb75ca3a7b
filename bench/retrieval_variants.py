"""Retrieval-time variants scored offline over one configuration's chunks: fusions, neighbours, sections.

    python bench/retrieval_variants.py                    # the default profile on Chroma's benchmark
    python bench/retrieval_variants.py --set fastapi      # on the FastAPI dev set (bench/devsets.py)
    python bench/retrieval_variants.py --set contracts-footers --spec default:as=text   # contracts as plain text

Indexes the configuration once into a kept collection (`_variants_<set>`, embeddings from the cache), reads
every chunk's vector, each question's BM25 top 50 (`chunkyard_fulltext_search`), then ranks in Python:
convex fusion exactly as `chunkyard_hybrid_search` does (checked: the same top 5 as the SQL), and variants of
it. Each variant is scored at k = 5 and at 512 tokens, overall and per corpus, with the same span metrics.
Exact vector search stands in for HNSW, so the vector rows differ a little from `chunkyard eval`.

Fusions that aim to be safe (never clearly below the better of the two lists): reciprocal rank fusion, and
convex fusion with the full-text half scaled by its IDF coverage, the share of the query's IDF mass (its
lexemes' IDF as chunkyard_fulltext_search computes it) held by the best BM25 hit: a list whose best hit
matches only a few of a long query's words (a template's) counts less. When the set has template questions
("Highlight the parts ..."), the table splits them from the plain ones. A --spec other than `default` gets
its own kept collection.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from eval_chroma import add_set_option, load_set  # noqa: E402

from pipeline import db  # noqa: E402
from pipeline import evaluate as ev  # noqa: E402
from pipeline.config import Settings  # noqa: E402
from pipeline.evaluate.metrics import Retrieved, budget_scores, question_scores  # noqa: E402
from pipeline.tokens import counter  # noqa: E402

CANDIDATES = 50


class Index:
    """One collection's chunks in document order, their vectors, and each question's BM25 list."""

    def __init__(self, qset: str, spec: str, settings: Settings) -> None:
        self.corpora, self.questions, _ = load_set(qset)
        name = f"_variants_{qset}" + ("" if spec == "default" else "_" + hashlib.sha256(spec.encode()).hexdigest()[:8])
        url = db.database_url(settings)
        with db.connection(url) as conn:
            have = conn.execute("SELECT 1 FROM collections WHERE name = %s", (name,)).fetchone()
        if not have:
            ev.pipeline_indexer(ev.parse_config(spec), self.corpora, settings)(name)
        qv = ev.embed_questions(self.questions, settings)
        with db.connection(url) as conn:
            self.rows = conn.execute(
                """SELECT c.id, d.source_uri, c.char_start, c.char_end, c.section_id, c.text, s.char_start,
                          s.char_end, e.embedding
                   FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sections s ON s.id = c.section_id
                   JOIN chunk_embeddings e ON e.chunk_id = c.id JOIN collections col ON col.id = c.collection_id
                   WHERE col.name = %s ORDER BY d.source_uri, c.char_start""",
                (name,),
            ).fetchall()
            texts = dict(conn.execute(
                """SELECT d.source_uri, d.normalized_text FROM documents d
                   JOIN collections col ON col.id = d.collection_id WHERE col.name = %s""", (name,),
            ).fetchall())  # fmt: skip
            self.bm25 = [
                conn.execute(
                    "SELECT chunk_id, score FROM chunkyard_fulltext_search(%s, %s, %s)",
                    (name, q.text, CANDIDATES),
                ).fetchall()
                for q in self.questions
            ]
            # each question's lexemes with their IDF (as chunkyard_fulltext_search computes it), and which of them
            # each BM25 hit holds: how much of the query's IDF mass a full-text list actually matches
            self.qidf: list[dict[str, float]] = []
            self.hit_terms: list[dict[int, set[str]]] = []
            for q, hits in zip(self.questions, self.bm25, strict=True):
                idf = dict(conn.execute(
                    """SELECT t.lexeme, ln(1 + (greatest(col.fts_chunks, t.df) - t.df + 0.5) / (t.df + 0.5))
                       FROM fts_terms t JOIN collections col ON col.id = t.collection_id
                       WHERE col.name = %s AND t.df > 0
                         AND t.lexeme = ANY (tsvector_to_array(to_tsvector('english', %s)))""",
                    (name, q.text),
                ).fetchall())  # fmt: skip
                self.qidf.append({w: float(v) for w, v in idf.items()})
                ids = [c for c, _ in hits]
                self.hit_terms.append({c: set(ws) & set(idf) for c, ws in conn.execute(
                    "SELECT id, tsvector_to_array(tsv) FROM chunks WHERE id = ANY(%s)", (ids,)).fetchall()})  # fmt: skip
        self.pos = {r[0]: i for i, r in enumerate(self.rows)}
        self.hit_terms = [{self.pos[c]: ws for c, ws in h.items()} for h in self.hit_terms]
        mat = np.vstack(
            [np.asarray(r[8].to_numpy() if hasattr(r[8], "to_numpy") else r[8]) for r in self.rows]
        )
        self.sims = qv @ mat.T
        self.corpus_of = {u: Path(u).stem for u in texts}
        self.maps = {u: ev.OffsetMap(self.corpora[self.corpus_of[u]].text, t, u) for u, t in texts.items()}
        self._ends: dict[int, list[int]] = {}
        self._cl100k = counter("cl100k_base")

    def raw(self, i: int, span: tuple[int, int] | None = None) -> Retrieved:
        """Chunk i (or a span of its document) as a raw-corpus range."""
        u = self.rows[i][1]
        s, e = span or self.rows[i][2:4]
        return Retrieved(self.corpus_of[u], *self.maps[u].to_raw(s, e))

    def ends(self, i: int) -> list[int]:
        """Where chunk i's first 1, 2, ... cl100k tokens end, in raw characters from its start."""
        if i not in self._ends:
            u, s, e = self.rows[i][1:4]
            m, rs = self.maps[u], self.raw(i).start
            self._ends[i] = [
                m.to_raw(s, s + b)[1] - rs for _, b in self._cl100k.encode_offsets(self.rows[i][5])
            ]
        return self._ends[i]

    def adjacent(self, i: int, j: int) -> bool:
        """Neighbouring chunks of one section."""
        return abs(i - j) == 1 and self.rows[i][4] == self.rows[j][4]

    def coverage(self, qi: int, top: int = 1) -> float:
        """Share of the query's IDF mass that the best `top` BM25 hits hold (the best of them): near 1 when the
        full-text list found the query's words together, low when it matched a few of many (template) words."""
        idf, hits = self.qidf[qi], self.bm25[qi][:top]
        total = sum(idf.values())
        if not hits or total <= 0:
            return 0.0
        return max(sum(idf[w] for w in self.hit_terms[qi].get(self.pos[c], ())) for c, _ in hits) / total

    def fused(self, qi: int, *, alpha: float = 0.5, scale: str = "minmax", adaptive: bool = False,
              neighbour: float = 0.0, bm25_weight: Callable[[int], float] | None = None) -> list[int]:  # fmt: skip
        """Convex fusion over the top 50 of each list (chunkyard_hybrid_search), with the variants' switches."""
        vtop = np.argsort(-self.sims[qi])[:CANDIDATES]
        bm = {self.pos[c]: s for c, s in self.bm25[qi]}
        cand = sorted(set(vtop.tolist()) | set(bm))
        sv = np.array([self.sims[qi][i] for i in cand])
        bv = np.array([bm.get(i, 0.0) for i in cand])

        def norm(x: np.ndarray) -> np.ndarray:
            if scale == "z":
                return (x - x.mean()) / (x.std() + 1e-9)
            return (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros_like(x)

        if adaptive:  # trust the list whose top stands out from its own top 20

            def gap(x: np.ndarray) -> float:
                x = np.sort(x)[::-1]
                return float((x[0] - x[:20].mean()) / x[0]) if len(x) > 1 and x[0] > 0 else 0.0

            v, b = gap(self.sims[qi][vtop]), gap(np.array([s for _, s in self.bm25[qi]]))
            alpha = min(max(v / (v + b), 0.25), 0.75) if v + b > 0 else 0.5
        if bm25_weight is not None:  # the full-text half scaled by a per-query confidence in [0, 1]
            w = min(max(bm25_weight(qi), 0.0), 1.0)
            sc = alpha * norm(sv) + (1 - alpha) * w * norm(bv)
        else:
            sc = alpha * norm(sv) + (1 - alpha) * norm(bv)
        if neighbour:
            d, lo = dict(zip(cand, sc, strict=True)), sc.min()
            sc = np.array([s + neighbour * max([d.get(j, lo) - lo for j in (i - 1, i + 1)
                                                if 0 <= j < len(self.rows) and self.adjacent(i, j)] or [0])
                           for i, s in zip(cand, sc, strict=True)])  # fmt: skip
        return [cand[j] for j in np.argsort(-sc, kind="stable")]

    def vector(self, qi: int) -> list[int]:
        return list(np.argsort(-self.sims[qi])[:CANDIDATES])

    def fulltext(self, qi: int) -> list[int]:
        """BM25's own ranking (chunkyard_fulltext_search), vector ranks after its hits."""
        out = [self.pos[c] for c, _ in self.bm25[qi]]
        seen = set(out)
        return out + [i for i in self.vector(qi) if i not in seen]

    def rrf(self, qi: int, k: int = 60, wb: float = 1.0) -> list[int]:
        """Reciprocal rank fusion of the two top-50 lists (chunkyard_hybrid_search's 'rrf'), BM25 weighted by wb."""
        sc: dict[int, float] = defaultdict(float)
        for r, i in enumerate(self.vector(qi), 1):
            sc[i] += 1 / (k + r)
        for r, (c, _) in enumerate(self.bm25[qi], 1):
            sc[self.pos[c]] += wb / (k + r)
        return sorted(sc, key=lambda i: -sc[i])

    def merged(self, ranking: list[int], k: int) -> list[Retrieved]:
        """k spans: a chunk next to a taken one of the same section joins it instead of counting."""
        groups: list[set[int]] = []
        taken: list[int] = []
        for i in ranking:
            g = next((g for g in groups if any(self.adjacent(i, j) for j in g)), None)
            if g is None:
                if len(groups) >= k:
                    break
                g = set()
                groups.append(g)
            g.add(i)
            taken.append(i)
        return [self.raw(i) for i in taken]

    def sections(self, ranking: list[int], k: int, share: float = 2 / 3) -> list[Retrieved]:
        """The top k, a section returned whole when its retrieved chunks cover `share` of it."""
        top = ranking[:k]
        by_sec: dict[int, list[int]] = defaultdict(list)
        for i in top:
            by_sec[self.rows[i][4]].append(i)
        out, done = [], set()
        for i in top:
            sec, (ss, se) = self.rows[i][4], self.rows[i][6:8]
            if sec in done:
                continue
            cov = sum(self.rows[j][3] - self.rows[j][2] for j in by_sec[sec])
            if se > ss and cov / (se - ss) >= share:
                out.append(self.raw(i, (ss, se)))
                done.add(sec)
            else:
                out.append(self.raw(i))
        return out


def table(
    ix: Index, variants: dict[str, tuple[Callable[[int], list[Retrieved]], Callable[[int], list[int]] | None]]
) -> str:
    """Recall / IoU at k (and recall at 512 tokens where the variant is a ranking), overall and per corpus."""
    corpora = sorted(ix.corpora) if len(ix.corpora) <= 6 else []
    tmpl = [q.text.startswith("Highlight the parts") for q in ix.questions]
    split = ["template", "plain"] if any(tmpl) else []
    head = ["variant", "all, k=5", "512 tokens", *split, *corpora]
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    for name, (at_k, ranking) in variants.items():
        rows = [question_scores(q.excerpts, q.corpus_id, at_k(qi)) | {"c": q.corpus_id}
                for qi, q in enumerate(ix.questions)]  # fmt: skip

        def ri(rs: list[dict]) -> str:
            return f"{100 * np.mean([r['recall'] for r in rs]):.1f} / {100 * np.mean([r['iou'] for r in rs]):.1f}"

        b512 = "-"
        if ranking:
            b = [budget_scores(q.excerpts, q.corpus_id, [ix.raw(i) for i in ranking(qi)[:60]],
                               [ix.ends(i) for i in ranking(qi)[:60]], 512)["recall"]
                 for qi, q in enumerate(ix.questions)]  # fmt: skip
            b512 = f"{100 * np.mean(b):.1f}"
        cells = [ri([r for r in rows if r["c"] == c]) for c in corpora]
        parts = [ri([r for r, t in zip(rows, tmpl, strict=True) if t == want]) for want in (True, False)]
        lines.append("| " + " | ".join([name, ri(rows), b512, *(parts if split else []), *cells]) + " |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_set_option(ap)
    ap.add_argument("--spec", default="default", help="The configuration whose chunks are ranked.")
    a = ap.parse_args()
    ix = Index(a.qset, a.spec, Settings())
    k = 5

    def top(
        rank: Callable[[int], list[int]],
    ) -> tuple[Callable[[int], list[Retrieved]], Callable[[int], list[int]]]:
        return (lambda qi: [ix.raw(i) for i in rank(qi)[:k]]), rank

    cov = ix.coverage
    variants = {
        "vector (exact)": top(ix.vector),
        "full text (BM25)": top(ix.fulltext),
        "rrf (k 60)": top(ix.rrf),
        "BM25 x IDF coverage of its top hit": top(lambda qi: ix.fused(qi, bm25_weight=cov)),
        "BM25 x IDF coverage, best of top 5": top(lambda qi: ix.fused(qi, bm25_weight=lambda q: cov(q, 5))),
        "BM25 x min(1, 2 x coverage)": top(lambda qi: ix.fused(qi, bm25_weight=lambda q: 2 * cov(q))),
        "BM25 x min(1, 1.5 x coverage)": top(lambda qi: ix.fused(qi, bm25_weight=lambda q: 1.5 * cov(q))),
        "BM25 x coverage^0.5": top(lambda qi: ix.fused(qi, bm25_weight=lambda q: cov(q) ** 0.5)),
        "rrf, BM25 x coverage": top(lambda qi: ix.rrf(qi, wb=cov(qi))),
        "convex fusion, alpha 0.5 (the SQL default)": top(ix.fused),
        "alpha 0.4": top(lambda qi: ix.fused(qi, alpha=0.4)),
        "alpha 0.6": top(lambda qi: ix.fused(qi, alpha=0.6)),
        "z-score scaling": top(lambda qi: ix.fused(qi, scale="z")),
        "query-adaptive weights (top-score gap)": top(lambda qi: ix.fused(qi, adaptive=True)),
        "best neighbour's score x 0.2 added": top(lambda qi: ix.fused(qi, neighbour=0.2)),
        "section whole when 2/3 retrieved": (lambda qi: ix.sections(ix.fused(qi), k), None),
        "section whole when 1/2 retrieved": (lambda qi: ix.sections(ix.fused(qi), k, 1 / 2), None),
        "section whole when 3/4 retrieved": (lambda qi: ix.sections(ix.fused(qi), k, 3 / 4), None),
        "neighbours merged, 5 spans": (lambda qi: ix.merged(ix.fused(qi), k), None),
    }
    print(table(ix, variants))


if __name__ == "__main__":
    main()
