"""Span-level retrieval evaluation (Chroma's method): chunks from the real pipeline, scored in characters.

Questions come with excerpts, character ranges of a corpus file. Each configuration ingests the corpora
into a throwaway collection (same chunkers, embedding and Postgres as a user's run), retrieves the top k
chunks per question with the SQL search users call, and scores the overlap of chunks and excerpts:
recall, precision, precision_Ω and IoU exactly as Chroma's "Evaluating Chunking Strategies for
Retrieval" defines them, plus hit rate and MRR.

Beside the top k, a ranking can be scored at a budget of cl100k tokens (`within_budget`: chunks in rank
order until the budget is spent, the last one cut), so chunkers of different sizes compare at equal cost.

`data` loads and checks the input, `metrics` and `offsets` do the arithmetic, `configs` parses what to
score, `index` puts chunks into a collection through the run API, `score` scores against it, `report`
writes the results. `run_eval` is the whole evaluation, as `chunkyard eval` runs it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from pipeline.config import Settings
from pipeline.errors import ConfigError
from pipeline.evaluate.configs import (
    CHROMA_SEPARATORS,
    NO_MODEL_LIMIT,
    DocTypeChoice,
    EvalConfig,
    config_meta,
    parse_config,
    profile_config,
)
from pipeline.evaluate.data import Corpus, EvalError, Question, load_corpora, load_questions
from pipeline.evaluate.index import Indexed, SpanChunk, pipeline_indexer, spans_indexer, stage_corpora
from pipeline.evaluate.metrics import (
    METRICS,
    Retrieved,
    budget_scores,
    covered,
    intersect,
    precision_omega,
    question_scores,
    summarize,
    union,
    within_budget,
)
from pipeline.evaluate.offsets import OffsetMap
from pipeline.evaluate.report import (
    brief,
    budget_per_corpus_table,
    budget_plot,
    budget_table,
    markdown_table,
    per_corpus_table,
    plot,
    report,
    write_outputs,
)
from pipeline.evaluate.score import Mode, embed_questions, evaluate_index
from pipeline.model import Span

__all__ = [
    "CHROMA_SEPARATORS",
    "METRICS",
    "NO_MODEL_LIMIT",
    "ConfigError",
    "Corpus",
    "DocTypeChoice",
    "EvalConfig",
    "EvalError",
    "Indexed",
    "Mode",
    "OffsetMap",
    "Question",
    "Retrieved",
    "Span",
    "SpanChunk",
    "budget_per_corpus_table",
    "budget_plot",
    "budget_scores",
    "budget_table",
    "config_meta",
    "covered",
    "embed_questions",
    "evaluate_index",
    "intersect",
    "load_corpora",
    "load_questions",
    "markdown_table",
    "parse_config",
    "per_corpus_table",
    "pipeline_indexer",
    "plot",
    "precision_omega",
    "profile_config",
    "question_scores",
    "report",
    "run_eval",
    "spans_indexer",
    "stage_corpora",
    "summarize",
    "union",
    "within_budget",
    "write_outputs",
]


def run_eval(
    corpora_dir: Path | str,
    questions_path: Path | str,
    configs: Sequence[EvalConfig],
    *,
    k: int = 5,
    modes: Sequence[Mode] = ("vector", "hybrid"),
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
    budgets: Sequence[int] = (),
) -> dict:
    """Score each configuration on one question set, one result row per search mode (and at each budget)."""
    settings = settings or Settings()
    corpora = load_corpora(corpora_dir)
    questions = load_questions(questions_path, corpora)
    say = progress or (lambda _msg: None)
    say(f"{len(questions)} questions over {len(corpora)} corpora; embedding questions")
    qvecs = embed_questions(questions, settings)
    results: list[dict] = []
    for cfg in configs:
        say(f"indexing {cfg.label}")
        results += evaluate_index(
            cfg.label, pipeline_indexer(cfg, corpora, settings), corpora, questions, qvecs,
            settings=settings, k=k, modes=modes, meta=config_meta(cfg), budgets=budgets,
        )  # fmt: skip
        say(f"done {cfg.label}: " + ", ".join(brief(r) for r in results[-len(modes) :]))
    return report(results, corpora=corpora, questions=questions, k=k, settings=settings, budgets=budgets)
