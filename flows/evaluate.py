"""The evaluate flow: a saved question set against a live collection; Failed when recall dropped."""

from __future__ import annotations

from typing import Annotated, Literal

from prefect import flow, task
from prefect.states import Failed, State
from pydantic import Field

from flows.common import TASK_OPTIONS, CollectionName, RunFailed
from pipeline.evaluate.live import DEFAULT_K, DEFAULT_MAX_DROP, run_live_eval, verdict_line


class RecallDropped(RunFailed):
    """Recall fell more than the allowed margin below the baseline: the flow ends Failed with the figures."""


@task(name="score-questions", **TASK_OPTIONS)
def score_task(
    collection: str, questions: str, k: int, mode: str, max_drop: float, set_baseline: bool, name: str | None
) -> dict:
    """Search every question, score the spans, store the run (a plain function: pipeline.evaluate.live)."""
    return run_live_eval(
        collection, questions, k=k, mode=mode, max_drop=max_drop, set_baseline=set_baseline, name=name
    )


@flow(name="chunkyard-evaluate", log_prints=False, validate_parameters=True)
def evaluate_flow(
    collection: CollectionName,
    questions: Annotated[str, Field(min_length=1)],
    k: Annotated[int, Field(ge=1, le=1000)] = DEFAULT_K,
    mode: Literal["vector", "fulltext", "hybrid", "rrf"] = "hybrid",
    max_drop: Annotated[float, Field(ge=0)] = DEFAULT_MAX_DROP,
    set_baseline: bool = False,
    name: str | None = None,
) -> dict | State:
    """Score a question set (JSONL with answer spans) on a collection; Failed when recall dropped too far.

    The figures are stored in eval_results with the run (runs.kind = 'eval'); the first run of a question
    set is its baseline, and a run more than `max_drop` recall points below it fails, so a notification
    on the deployment's Failed runs tells the operator that retrieval got worse.
    """
    result = score_task(collection, questions, k, mode, max_drop, set_baseline, name)
    if result["passed"]:
        return result
    msg = verdict_line(result)
    return Failed(message=msg, data=RecallDropped(msg, result))
