"""Retrieval-time variants scored offline over one configuration's chunks: fusions, neighbours, sections.

    python -m bench.experiments.retrieval_variants                    # the default profile on Chroma's benchmark
    python -m bench.experiments.retrieval_variants --set fastapi      # on the FastAPI dev set (bench/devsets.py)
    python -m bench.experiments.retrieval_variants --set contracts-footers --spec default:as=text   # contracts as plain text

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
from collections.abc import Callable

import numpy as np

from bench.eval_chroma import add_set_option
from bench.replay import Index
from pipeline.config import Settings
from pipeline.evaluate.metrics import Retrieved, budget_scores, question_scores


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
