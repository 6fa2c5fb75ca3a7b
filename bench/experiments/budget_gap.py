"""Why one configuration trails another at a token budget, question by question; and ranking/packing variants.

    python -m bench.experiments.budget_gap gap                                    # default vs semchunk at 254 word pieces
    python -m bench.experiments.budget_gap gap --budget 512 --show 20 --b 'peer:semchunk-cl100k-200'
    python -m bench.experiments.budget_gap gap --complete 0.5                     # A packed with sections completed at 1/2
    python -m bench.experiments.budget_gap variants                               # ranking/packing variants, default's chunks
    python -m bench.experiments.budget_gap variants --a 'markdown:size=144,overlap=0,keep_whole=384'

Offline, over kept collections (retrieval_variants.Index: exact vector search, convex fusion exactly as
`chunkyard_hybrid_search`, embeddings from the cache): a configuration is a pipeline spec or `peer:NAME` (a
splitter of bench/peers.py, its chunks stored as peers.py stores them). Budgets are filled as
`chunkyard eval --budget` fills them (metrics.budget_scores: chunks in rank order, the last one cut).

`gap` prints recall per corpus at k = 5 and at every budget for A and B, then every question B answers better
at --budget, with the chunks each side read (rank, cl100k tokens, characters of the answer in it) and a cause:
  later   - A holds the missed answer text in a chunk it ranks past the budget (B ranks its chunk higher);
  cut     - A's chunk with the missed text is the last one, cut at the budget;
  split   - the missed text is in A's neighbour of a chunk read within the budget (the answer spans a cut);
  absent  - A's ranking (its 100 candidates) never holds the missed text.
`variants` scores re-rankings and packings of A's chunks at k = 5 and at every budget, overall and per corpus
(k = 5 both as the SQL search answers it, sections at least half retrieved whole, and as the ranking's first 5
chunks). "section completed at S read" packs a budget as the SQL's section rule would if applied while the budget
fills: chunks in rank order, and once the chunks read cover S of their section, the section's other chunks follow
at once (document order), every token counted; the ranking itself is unchanged.
"""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from collections.abc import Callable

import numpy as np

from bench.replay import Index, complete_sections
from pipeline import db
from pipeline import evaluate as ev
from pipeline.config import Settings
from pipeline.evaluate.metrics import Retrieved, budget_scores, question_scores, within_budget

BUDGETS = (256, 512, 1024, 2048)
DEFAULT = "default"


def load(qset: str, spec: str, settings: Settings) -> Index:
    """A kept collection of `spec` (a pipeline spec or peer:NAME), ranked offline."""
    if spec.startswith("peer:"):
        import hashlib

        from bench.peers import PEERS, locate_chunks

        name = f"_variants_{qset}_" + hashlib.sha256(spec.encode()).hexdigest()[:8]
        with db.connection(db.database_url(settings)) as conn:
            have = conn.execute("SELECT 1 FROM collections WHERE name = %s", (name,)).fetchone()
        if not have:
            from bench.eval_chroma import load_set

            corpora, _, _ = load_set(qset)
            peer = spec.removeprefix("peer:")
            split = PEERS[peer]()
            spans = {
                cid: locate_chunks(c.text, split(c.text), name=f"{peer}/{cid}") for cid, c in corpora.items()
            }
            ev.spans_indexer(peer, corpora, spans, settings)(name)
    return Index(qset, spec, settings)


def tokens(ix: Index, i: int) -> int:
    return len(ix.ends(i))


def at_budget(ix: Index, ranking: list[int], budget: int) -> list[Retrieved]:
    return within_budget([ix.raw(i) for i in ranking], [ix.ends(i) for i in ranking], budget)


def score(ix: Index, qi: int, ranking: list[int], budget: int | None, k: int = 5) -> dict:
    q = ix.questions[qi]
    if budget is None:
        return question_scores(q.excerpts, q.corpus_id, [ix.raw(i) for i in ranking[:k]])
    return budget_scores(
        q.excerpts, q.corpus_id, [ix.raw(i) for i in ranking], [ix.ends(i) for i in ranking], budget
    )


def overlap(r: Retrieved, excerpts: list[tuple[int, int]]) -> int:
    return sum(max(0, min(r.end, b) - max(r.start, a)) for a, b in excerpts)


def summary(
    ix: Index,
    rank: Callable[[int], list[int]],
    budgets=BUDGETS,
    at_k: Callable[[int], list[int]] | None = None,
) -> dict:
    """Recall (and IoU) at k = 5 and each budget, overall and per corpus. `at_k`: the ranking the search answers
    k = 5 from (default `rank`; a packing of budgets leaves it the plain ranking)."""
    rows = []
    for qi, q in enumerate(ix.questions):
        r = rank(qi)
        rk = at_k(qi) if at_k else r
        row = {
            "c": q.corpus_id,
            "k": score(ix, qi, rk, None),
            # k = 5 as the SQL search answers it: sections at least half retrieved come back whole
            "ks": question_scores(q.excerpts, q.corpus_id, ix.sections(rk, 5, 0.5)),
        }
        for b in budgets:
            row[b] = score(ix, qi, r, b)
        rows.append(row)
    out = {}
    for c in ["all", *(sorted(ix.corpora) if len(ix.corpora) <= 6 else [])]:
        rs = [x for x in rows if c == "all" or x["c"] == c]
        out[c] = {key: (100 * np.mean([x[key]["recall"] for x in rs]), 100 * np.mean([x[key]["iou"] for x in rs]))
                  for key in ["k", "ks", *budgets]}  # fmt: skip
    out["_rows"] = rows
    return out


def fmt_summary(name: str, s: dict, budgets=BUDGETS) -> list[str]:
    lines = []
    for c in [k for k in s if not k.startswith("_")]:
        k5, ks = s[c]["k"], s[c]["ks"]
        lines.append(
            f"| {name} | {c} | {ks[0]:.1f} / {ks[1]:.1f} | {k5[0]:.1f} / {k5[1]:.1f} | "
            + " | ".join(f"{s[c][b][0]:.1f}" for b in budgets)
            + " |"
        )
    return lines


def head(budgets=BUDGETS) -> list[str]:
    return ["| variant | corpus | k=5 R / IoU (SQL: sections whole) | k=5, chunks of the ranking | "
            + " | ".join(map(str, budgets)) + " |",
            "| --- | --- | --- | --- | " + " | ".join("---" for _ in budgets) + " |"]  # fmt: skip


# ------------------------------------------------------------------------------------------------ gap


def explain(ix: Index, qi: int, ranking: list[int], budget: int) -> tuple[str, list[str]]:
    """What A read within the budget, and why it missed the text it missed."""
    q = ix.questions[qi]
    got = at_budget(ix, ranking, budget)
    lines, spent = [], 0
    for n, (i, g) in enumerate(zip(ranking, got, strict=False), 1):
        t = tokens(ix, i)
        cut = g.end < ix.raw(i).end
        vr = int((ix.sims[qi] > ix.sims[qi][i]).sum()) + 1
        br = next((m for m, (c, _) in enumerate(ix.bm25[qi], 1) if ix.pos[c] == i), None)
        lines.append(f"    #{n} {'cut ' if cut else ''}{min(t, budget - spent)}/{t} tok, answer chars {overlap(g, q.excerpts)}"
                     f" (v{vr} b{br})"
                     f"  [{ix.rows[i][2]}:{ix.rows[i][3]}] {ix.rows[i][5][:70]!r}")  # fmt: skip
        spent += t
    # the answer characters A did not read, and where A has them
    covered = [(g.start, g.end) for g in got if g.corpus_id == q.corpus_id]
    missed = []
    for a, b in q.excerpts:
        pts = [x for x in range(a, b) if not any(s <= x < e for s, e in covered)]
        if pts:
            missed.append((pts[0], pts[-1] + 1, len(pts)))
    cause = "none"
    if missed:
        taken = set(ranking[: len(got)])
        holders = [(n, i) for n, i in enumerate(ranking, 1) if ix.raw(i).corpus_id == q.corpus_id
                   and any(overlap(ix.raw(i), [(s, e)]) for s, e, _ in missed)]  # fmt: skip
        last = ranking[len(got) - 1] if got else None
        if last is not None and got[-1].end < ix.raw(last).end and any(i == last for _, i in holders):
            cause = "cut"
        elif any(
            ix.adjacent(i, j) and overlap(ix.raw(j), q.excerpts)
            for _, i in holders
            for j in taken
            if i not in taken
        ):
            cause = "split"
        elif holders:
            cause = "later"
        else:
            cause = "absent"
        first = holders[0] if holders else None
        if first:
            vr = int((ix.sims[qi] > ix.sims[qi][first[1]]).sum()) + 1
            br = next((n for n, (c, _) in enumerate(ix.bm25[qi], 1) if ix.pos[c] == first[1]), None)
            lines.append(f"    missed {sum(m[2] for m in missed)} chars; first chunk holding them: rank {first[0]}, "
                         f"{tokens(ix, first[1])} tok, after {sum(tokens(ix, i) for i in ranking[: first[0] - 1])} tok; "
                         f"vector rank {vr}, BM25 rank {br}")  # fmt: skip
    return cause, lines


def gap(a: Index, b: Index, budget: int, show: int, share: float | None = None) -> None:
    """A's losses to B at `budget`; with `share`, A's budgets are packed with complete_sections(share)."""

    def rank_a(qi: int) -> list[int]:
        return complete_sections(a, a.fused(qi), share) if share else a.fused(qi)

    sa, sb = summary(a, rank_a), summary(b, b.fused)
    print("\n".join(head() + fmt_summary("A", sa) + fmt_summary("B", sb)))
    diffs = []
    for qi in range(len(a.questions)):
        ra, rb = sa["_rows"][qi][budget]["recall"], sb["_rows"][qi][budget]["recall"]
        if abs(ra - rb) > 1e-9:
            diffs.append((ra - rb, qi))
    print(
        f"\n{len(diffs)} questions differ at {budget} tokens; net {100 * sum(d for d, _ in diffs) / len(a.questions):+.2f} points"
    )
    per = defaultdict(lambda: [0, 0.0, 0, 0.0])
    causes: Counter = Counter()
    cause_pts: Counter = Counter()
    detail = []
    for d, qi in sorted(diffs):
        c = a.questions[qi].corpus_id
        p = per[c]
        if d < 0:
            p[0] += 1
            p[1] += d
            cause, lines = explain(a, qi, rank_a(qi), budget)
            causes[(c, cause)] += 1
            cause_pts[(c, cause)] += d
            detail.append((d, qi, cause, lines))
        else:
            p[2] += 1
            p[3] += d
    print("| corpus | lost (q, recall pts of the corpus) | won | net |")
    for c in sorted(per):
        n = sum(1 for q in a.questions if q.corpus_id == c)
        p = per[c]
        print(
            f"| {c} | {p[0]}, {100 * p[1] / n:.1f} | {p[2]}, {100 * p[3] / n:+.1f} | {100 * (p[1] + p[3]) / n:+.1f} |"
        )
    print("\ncauses of A's losses (questions, points of all):")
    for (c, cause), n in sorted(causes.items()):
        print(f"  {c:20s} {cause:7s} {n:3d}  {100 * cause_pts[(c, cause)] / len(a.questions):+.2f}")
    for d, qi, cause, lines in detail[:show]:
        q = a.questions[qi]
        print(f"\n[{q.corpus_id}] q{qi} A-B {100 * d:+.1f}  cause {cause}  excerpts {[(s, e) for s, e in q.excerpts]}"
              f" ({sum(e - s for s, e in q.excerpts)} chars)\n  {q.text[:150]!r}\n  A:")  # fmt: skip
        print("\n".join(lines))
        _, lb = explain(b, qi, b.fused(qi), budget)
        print("  B:")
        print("\n".join(lb))


# ------------------------------------------------------------------------------------------- variants


def _follow(ix: Index, ranking: list[int], admit: Callable[[int, int], bool]) -> list[int]:
    """The ranking, each chunk followed at once by its adjacent chunks of one section that `admit(first, n)`
    (first: the ranked chunk the run started from), transitively."""
    out, seen = [], set()
    for i in ranking:
        if i in seen:
            continue
        stack = [i]
        while stack:
            j = stack.pop(0)
            if j in seen:
                continue
            seen.add(j)
            out.append(j)
            for n in (j - 1, j + 1):
                if 0 <= n < len(ix.rows) and n not in seen and ix.adjacent(j, n) and admit(i, n):
                    stack.append(n)
    return out


def pull_neighbours(ix: Index, ranking: list[int], only_retrieved: bool = True) -> list[int]:
    """A chunk's retrieved neighbours of the same section follow it at once (adjacent retrieved chunks merged)."""
    pool = set(ranking)
    return _follow(ix, ranking, lambda _i, n: n in pool or not only_retrieved)


def drop_small(ix: Index, ranking: list[int], min_tokens: int) -> list[int]:
    return [i for i in ranking if tokens(ix, i) >= min_tokens]


def small_last(ix: Index, ranking: list[int], min_tokens: int) -> list[int]:
    return [i for i in ranking if tokens(ix, i) >= min_tokens] + [
        i for i in ranking if tokens(ix, i) < min_tokens
    ]


def small_with_next(ix: Index, ranking: list[int], min_tokens: int) -> list[int]:
    """A chunk under min_tokens (a heading, a stub) brings the next chunk of its section right after it."""
    out, seen = [], set()
    for i in ranking:
        for j in (
            [i, i + 1]
            if tokens(ix, i) < min_tokens and i + 1 < len(ix.rows) and ix.adjacent(i, i + 1)
            else [i]
        ):
            if j not in seen:
                seen.add(j)
                out.append(j)
    return out


def fused_scores(ix: Index, qi: int, alpha: float = 0.5) -> dict[int, float]:
    """Each candidate's convex-fusion score (as Index.fused ranks them: min-max scaled, alpha * vector + rest)."""
    vtop = np.argsort(-ix.sims[qi])[:50]
    bm = {ix.pos[c]: s for c, s in ix.bm25[qi]}
    cand = sorted(set(vtop.tolist()) | set(bm))
    sv = np.array([ix.sims[qi][i] for i in cand])
    bv = np.array([bm.get(i, 0.0) for i in cand])

    def norm(x: np.ndarray) -> np.ndarray:
        return (x - x.min()) / (x.max() - x.min()) if x.max() > x.min() else np.zeros_like(x)

    return dict(zip(cand, alpha * norm(sv) + (1 - alpha) * norm(bv), strict=True))


def merge_close(ix: Index, qi: int, ratio: float) -> list[int]:
    """Adjacent candidates of one section whose scores are within `ratio` of each other are one passage: a
    chunk's neighbour follows it at once when the neighbour scores at least `ratio` x the chunk's score."""
    sc = fused_scores(ix, qi)
    ranking = sorted(sc, key=lambda i: (-sc[i], i))
    return _follow(ix, ranking, lambda i, n: n in sc and sc[n] >= ratio * sc[i])



def variants(ix: Index, budgets=BUDGETS, only: list[str] | None = None) -> None:
    sizes = np.array([tokens(ix, i) for i in range(len(ix.rows))])
    print(
        f"chunks {len(sizes)}, cl100k tokens: mean {sizes.mean():.0f}, <16: {(sizes < 16).sum()}, <32: {(sizes < 32).sum()}"
    )
    vs: dict[str, Callable[[int], list[int]]] = {
        "convex alpha 0.5 (SQL)": ix.fused,
        "alpha 0.4": lambda qi: ix.fused(qi, alpha=0.4),
        "alpha 0.6": lambda qi: ix.fused(qi, alpha=0.6),
        "retrieved neighbours follow": lambda qi: pull_neighbours(ix, ix.fused(qi)),
        "any neighbour follows": lambda qi: pull_neighbours(ix, ix.fused(qi), only_retrieved=False),
        "chunks < 16 tok dropped": lambda qi: drop_small(ix, ix.fused(qi), 16),
        "chunks < 32 tok last": lambda qi: small_last(ix, ix.fused(qi), 32),
        "chunk < 32 tok brings the next": lambda qi: small_with_next(ix, ix.fused(qi), 32),
        "best neighbour x 0.2": lambda qi: ix.fused(qi, neighbour=0.2),
        "best neighbour x 0.1": lambda qi: ix.fused(qi, neighbour=0.1),
        "best neighbour x 0.05": lambda qi: ix.fused(qi, neighbour=0.05),
        "neighbour >= 0.9 x score follows": lambda qi: merge_close(ix, qi, 0.9),
        "neighbour >= 0.8 x score follows": lambda qi: merge_close(ix, qi, 0.8),
        "neighbour >= 0.7 x score follows": lambda qi: merge_close(ix, qi, 0.7),
        "section completed at 1/2 read": lambda qi: complete_sections(ix, ix.fused(qi), 0.5),
        "section completed at 2/3 read": lambda qi: complete_sections(ix, ix.fused(qi), 2 / 3),
    }
    if only:
        vs = {k: v for k, v in vs.items() if any(o in k for o in only)}
    lines = head(budgets)
    for name, rank in vs.items():
        memo: dict[int, list[int]] = {}

        def cached(qi: int, rank=rank, memo=memo) -> list[int]:
            if qi not in memo:
                memo[qi] = rank(qi)
            return memo[qi]

        packing = name.startswith("section completed")  # budgets only: the search at k is unchanged
        lines += fmt_summary(name, summary(ix, cached, budgets, ix.fused if packing else None), budgets)
        print("\n".join(lines[-6:]), flush=True)
    print("\n" + "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["gap", "variants"])
    ap.add_argument("--a", default=DEFAULT, help="Configuration A (pipeline spec or peer:NAME).")
    ap.add_argument("--b", default="peer:semchunk-model-254", help="Configuration B (gap).")
    ap.add_argument("--budget", type=int, default=1024)
    ap.add_argument(
        "--complete", type=float, help="gap: A's budgets packed with sections completed at this share."
    )
    ap.add_argument("--show", type=int, default=1000, help="Lost questions shown in detail.")
    ap.add_argument("--set", dest="qset", default="chroma")
    ap.add_argument(
        "--only", action="append", default=[], help="Variants whose name contains this (repeatable)."
    )
    a = ap.parse_args()
    settings = Settings()
    ia = load(a.qset, a.a, settings)
    if a.cmd == "gap":
        gap(ia, load(a.qset, a.b, settings), a.budget, a.show, a.complete)
    else:
        variants(ia, only=a.only)


if __name__ == "__main__":
    main()
