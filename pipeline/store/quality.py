"""Chunk quality per run: measured in SQL at the end of a run, kept in `runs.quality`, compared run to run.

The figures (sql/functions/30_quality.sql) are counts over the collection's live chunks, per document type and
for 'all'; this module holds their thresholds, writes them, and compares a run with the one before it,
flagging the shifts an operator should look at (`chunkyard status --quality`, the view chunkyard_run_quality).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import psycopg

#: A chunk under this many tokens (in its chunker's unit) is tiny: too little text to retrieve on its own.
TINY_TOKENS = 16
#: A chunk at or above this share of its type's budget (the profile's `size`) is counted "at the budget":
#: it ended because the budget was full, not at a boundary the chunker chose (for a packing chunker, the
#: next piece did not fit; for a window, the cut fell mid-text).
BUDGET_FILL = 0.9
#: Token histogram buckets: < 16, 16-31, 32-63, ..., 384-511, >= 512 (fixed, so runs compare).
HISTOGRAM_EDGES = (16, 32, 64, 96, 128, 160, 192, 256, 384, 512)

# Large shifts from the previous run, flagged by `compare` (only where both runs have MIN_CHUNKS chunks of
# the type, so a type with three chunks does not flag on one tiny chunk).
#: Shares of chunks (at the budget, tiny, duplicates): a change of at least 5 percentage points.
SHARE_SHIFT = 0.05
#: Means and medians (tokens per chunk, chunks per section): a change of at least 25% either way.
RELATIVE_SHIFT = 0.25
#: Token histograms: a total variation distance of at least 0.2 (a fifth of the chunks changed bucket).
HISTOGRAM_SHIFT = 0.2
MIN_CHUNKS = 10

#: (figure, label, how it is compared): "share" of chunks, "relative", "count" (shown, never flagged).
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("documents", "documents", "count"),
    ("chunks", "chunks", "count"),
    ("tokens_mean", "tokens mean", "relative"),
    ("tokens_p50", "tokens p50", "relative"),
    ("tokens_p95", "tokens p95", "count"),
    ("tokens_max", "tokens max", "count"),
    ("budget", "budget", "count"),
    ("at_budget_share", "at budget", "share"),
    ("tiny_share", f"tiny (<{TINY_TOKENS})", "share"),
    ("duplicate_share", "duplicates", "share"),
    ("chunks_per_section_mean", "chunks/section mean", "relative"),
    ("chunks_per_section_p50", "chunks/section p50", "count"),
    ("chunks_per_section_max", "chunks/section max", "count"),
    ("empty_sections", "sections w/o chunk", "count"),
    ("uncovered_space_chars", "uncovered space", "count"),
    ("uncovered_text_share", "uncovered text", "share"),
)

_SHARES = {
    "at_budget_share": ("at_budget", "chunks"),
    "tiny_share": ("tiny", "chunks"),
    "duplicate_share": ("duplicates", "chunks"),
    "uncovered_text_share": ("uncovered_text_chars", "text_chars"),
}


#: Tally counts of a run that change what the figures measure; a run with none of them carries the
#: previous run's figures over instead of measuring (1.0 s on 12k chunks, most runs change nothing).
CHANGE_COUNTS = (
    "documents_new",
    "documents_changed",
    "documents_deleted",
    "sections_rechunked",
    "sections_deleted",
    "chunks_written",
    "chunks_deleted",
)


def changed(counts: dict[str, int]) -> bool:
    """Whether a run's tally says it changed the collection's documents, sections or chunks."""
    return any(counts.get(k) for k in CHANGE_COUNTS)


def record_quality(
    conn: psycopg.Connection, run_id: int, collection_id: int, *, carry_over: bool = False
) -> dict[str, Any]:
    """Measure the collection's live chunks (one statement) and store the figures on the run's ledger row.

    `carry_over`: the run changed nothing, so the figures of the run just before it are copied when it has
    them (a run that crashed has none: then they are measured)."""
    with conn.transaction():
        row = conn.execute(
            """UPDATE runs SET quality = coalesce(
                   CASE WHEN %(carry)s THEN (SELECT p.quality FROM runs p
                                             WHERE p.collection_id = %(coll)s AND p.id < %(run)s
                                             ORDER BY p.id DESC LIMIT 1) END,
                   chunkyard_quality_figures(%(coll)s, %(tiny)s, %(fill)s, %(edges)s))
               WHERE id = %(run)s RETURNING quality""",
            {
                "carry": carry_over,
                "coll": collection_id,
                "run": run_id,
                "tiny": TINY_TOKENS,
                "fill": BUDGET_FILL,
                "edges": list(HISTOGRAM_EDGES),
            },
        ).fetchone()
    return row[0] if row else {}


def with_shares(figures: dict[str, Any]) -> dict[str, Any]:
    """One type's stored counts plus the shares derived from them (None where the denominator is 0)."""
    out = dict(figures)
    # whitespace between chunks (and around them) is in no chunk by design: chunks are stripped spans
    out["uncovered_space_chars"] = (figures.get("uncovered_chars") or 0) - (
        figures.get("uncovered_text_chars") or 0
    )
    for name, (num, den) in _SHARES.items():
        d = figures.get(den) or 0
        out[name] = (figures.get(num) or 0) / d if d else None
    return out


@dataclass(frozen=True)
class Shift:
    """A figure of one document type that moved more than its threshold since the previous run."""

    doc_type: str
    figure: str
    before: float | None
    after: float | None
    why: str


def histogram_distance(a: list[int], b: list[int]) -> float:
    """Total variation distance between two token histograms (0 the same shape, 1 no bucket shared)."""
    na, nb = sum(a), sum(b)
    if not na or not nb or len(a) != len(b):
        return 0.0
    return sum(abs(x / na - y / nb) for x, y in zip(a, b, strict=True)) / 2


def compare(now: dict[str, dict], before: dict[str, dict] | None) -> list[Shift]:
    """The shifts to flag between two runs' figures (per type), and any text no chunk covers (always)."""
    shifts: list[Shift] = []
    for t, f in now.items():
        f = with_shares(f)
        if f.get("uncovered_text_chars"):
            shifts.append(
                Shift(t, "uncovered_text_share", None, f["uncovered_text_share"],
                      f"{f['uncovered_text_chars']} characters of text are in no chunk (must be 0)")
            )  # fmt: skip
        p = (before or {}).get(t)
        if p is None:
            continue
        p = with_shares(p)
        if min(f.get("chunks") or 0, p.get("chunks") or 0) < MIN_CHUNKS:
            continue
        for name, _, how in FIGURES:
            a, b = p.get(name), f.get(name)
            if a is None or b is None or name == "uncovered_text_share":
                continue
            if how == "share" and abs(b - a) >= SHARE_SHIFT:
                shifts.append(
                    Shift(t, name, a, b, f"{(b - a) * 100:+.1f} points (threshold {SHARE_SHIFT:.0%})")
                )
            elif how == "relative" and a and abs(b - a) / a >= RELATIVE_SHIFT:
                shifts.append(Shift(t, name, a, b, f"{(b - a) / a:+.0%} (threshold ±{RELATIVE_SHIFT:.0%})"))
        tvd = histogram_distance(p.get("histogram") or [], f.get("histogram") or [])
        if tvd >= HISTOGRAM_SHIFT:
            shifts.append(
                Shift(t, "histogram", None, round(tvd, 3),
                      f"{tvd:.0%} of chunks moved token bucket (threshold {HISTOGRAM_SHIFT:.0%})")
            )  # fmt: skip
    return shifts


def quality_report(conn: psycopg.Connection, collection: str | None = None) -> list[dict[str, Any]]:
    """Per collection (or the one named): its last run with figures, the run before it, and the shifts."""
    rows = conn.execute(
        """SELECT c.name, r.id, r.kind, r.status, r.finished_at, r.quality, p.id, p.quality
           FROM collections c
           CROSS JOIN LATERAL (SELECT id, kind, status, finished_at, quality FROM runs
                               WHERE collection_id = c.id AND quality IS NOT NULL
                               ORDER BY id DESC LIMIT 1) r
           LEFT JOIN LATERAL (SELECT id, quality FROM runs
                              WHERE collection_id = c.id AND quality IS NOT NULL AND id < r.id
                              ORDER BY id DESC LIMIT 1) p ON true
           WHERE %(name)s::text IS NULL OR c.name = %(name)s
           ORDER BY c.name""",
        {"name": collection},
    ).fetchall()
    conn.commit()
    out = []
    for name, run_id, kind, status, finished, now, prev_id, prev in rows:
        out.append(
            {
                "collection": name,
                "run_id": run_id,
                "kind": kind,
                "status": status,
                "finished_at": finished,
                "previous_run_id": prev_id,
                "types": {t: with_shares(f) for t, f in _ordered(now).items()},
                "previous": {t: with_shares(f) for t, f in (prev or {}).items()},
                "shifts": [asdict(s) for s in compare(now, prev)],
            }
        )
    return out


def _ordered(figures: dict[str, dict]) -> dict[str, dict]:
    """'all' first, then the document types by name."""
    return dict(sorted(figures.items(), key=lambda kv: (kv[0] != "all", kv[0])))
