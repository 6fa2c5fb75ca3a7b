"""Chroma's span metrics in characters: recall, precision, precision_Ω and IoU, plus hit rate and MRR.

Definitions follow Chroma's "Evaluating Chunking Strategies for Retrieval" (METHOD.md): ranges are
half-open, touching ranges intersect, and retrieved lengths are summed (overlaps count twice) while the
intersection with the excerpts is a union (each character once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.model import Span

METRICS = ("recall", "precision", "precision_omega", "iou")


def union(spans: Sequence[Span]) -> list[Span]:
    """Merge overlapping (or touching) ranges, so each character counts once."""
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def covered(spans: Sequence[Span]) -> int:
    """Characters covered by a set of ranges, each counted once."""
    return sum(b - a for a, b in union(spans))


def intersect(x: Span, y: Span) -> Span | None:
    """The common range of two ranges; touching ranges intersect in an empty range (Chroma's rule)."""
    a, b = max(x[0], y[0]), min(x[1], y[1])
    return (a, b) if a <= b else None


@dataclass(frozen=True)
class Retrieved:
    """A retrieved chunk as a raw-corpus range."""

    corpus_id: str
    start: int
    end: int


def question_scores(excerpts: Sequence[Span], corpus_id: str, retrieved: Sequence[Retrieved]) -> dict:
    """recall, precision, IoU, hit and reciprocal rank of one question (METHOD.md definitions)."""
    inter: list[Span] = []
    first_hit = 0
    for rank, r in enumerate(retrieved, 1):
        if r.corpus_id != corpus_id:
            continue
        for e in excerpts:
            x = intersect((r.start, r.end), e)
            if x is not None:
                inter.append(x)
                if not first_hit and x[1] > x[0]:
                    first_hit = rank
    i = covered(inter)
    e_len = sum(b - a for a, b in excerpts)
    r_len = sum(r.end - r.start for r in retrieved)  # a sum, not a union: overlaps and other corpora count
    return {
        "recall": i / e_len,
        "precision": i / r_len if r_len else 0.0,
        "iou": i / (r_len + e_len - i) if r_len + e_len - i else 0.0,
        "hit": 1.0 if first_hit else 0.0,
        "rr": 1.0 / first_hit if first_hit else 0.0,
    }


def within_budget(
    retrieved: Sequence[Retrieved], token_ends: Sequence[Sequence[int]], budget: int
) -> list[Retrieved]:
    """The retrieved chunks in rank order until `budget` tokens are spent, the last one cut at the budget.

    `token_ends[i][j]` is where chunk i's first j + 1 tokens end, in characters from its start: a chunk
    that does not fit whole counts only its first (budget - spent) tokens as retrieved. A context window is
    what a reader of the results pays, so chunkers of different sizes compare at equal cost.
    """
    out: list[Retrieved] = []
    left = budget
    for r, ends in zip(retrieved, token_ends, strict=True):
        if left <= 0:
            break
        if len(ends) <= left:
            out.append(r)
            left -= len(ends)
        else:
            out.append(Retrieved(r.corpus_id, r.start, r.start + ends[left - 1]))
            left = 0
    return out


def budget_scores(
    excerpts: Sequence[Span],
    corpus_id: str,
    retrieved: Sequence[Retrieved],
    token_ends: Sequence[Sequence[int]],
    budget: int,
) -> dict:
    """`question_scores` of the first `budget` tokens of the ranking, with the chunks and tokens they took."""
    got = within_budget(retrieved, token_ends, budget)
    spent = min(sum(len(e) for e in token_ends[: len(got)]), budget)
    return question_scores(excerpts, corpus_id, got) | {"chunks": len(got), "tokens": spent}


def precision_omega(excerpts: Sequence[Span], chunks: Sequence[Span]) -> float:
    """Best precision at perfect recall: excerpt coverage of every chunk touching an excerpt, over their union."""
    inter: list[Span] = []
    touching: list[Span] = []
    for c in chunks:
        hit = False
        for e in excerpts:
            x = intersect(c, e)
            if x is not None:
                hit = True
                inter.append(x)
        if hit:
            touching.append(c)
    i_star = union(inter)
    unused = _difference(list(excerpts), i_star)
    denom = covered(touching + unused)
    return covered(i_star) / denom if denom else 0.0


def _difference(spans: list[Span], minus: list[Span]) -> list[Span]:
    """Parts of `spans` not covered by `minus`."""
    out: list[Span] = []
    for a, b in spans:
        cur = a
        for x, y in minus:
            if y <= cur or x >= b:
                continue
            if x > cur:
                out.append((cur, x))
            cur = max(cur, y)
        if cur < b:
            out.append((cur, b))
    return out


def summarize(rows: Sequence[dict]) -> dict:
    """Mean and population std (x100) of each span metric, hit rate (%) and MRR over question rows."""
    out: dict[str, Any] = {"questions": len(rows)}
    for m in METRICS:
        v = np.array([r[m] for r in rows], dtype=float)
        out[m] = {"mean": round(float(v.mean()) * 100, 3), "std": round(float(v.std()) * 100, 3)}
    out["hit_rate"] = round(float(np.mean([r["hit"] for r in rows])) * 100, 3)
    out["mrr"] = round(float(np.mean([r["rr"] for r in rows])), 4)
    return out
