"""Scheduled ingestion and evaluation: deployments with interval or cron schedules, served from this process."""

from __future__ import annotations

import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from pipeline.config import Profile, load_profile
from pipeline.errors import ConfigError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_every(text: str) -> timedelta:
    """'15m', '1h30m', '90s', '2d' or plain seconds as a timedelta; at least one second."""
    t = text.strip().lower().replace(" ", "")
    if t.isdigit():
        seconds = int(t)
    else:
        parts = re.findall(r"(\d+)([smhd])", t)
        if not parts or "".join(n + u for n, u in parts) != t:
            raise ConfigError(f"--every {text!r}: expected a duration like 30s, 15m, 1h30m or 2d")
        seconds = sum(int(n) * _UNITS[u] for n, u in parts)
    if seconds < 1:
        raise ConfigError(f"--every {text!r}: must be at least one second")
    return timedelta(seconds=seconds)


class _Timed(BaseModel):
    """When a deployment runs: exactly one of an interval or a cron expression."""

    model_config = ConfigDict(extra="forbid")

    every: str | None = None
    cron: str | None = None

    @field_validator("every")
    @classmethod
    def _every(cls, v: str | None) -> str | None:
        if v is not None:
            parse_every(v)
        return v

    @field_validator("cron")
    @classmethod
    def _cron(cls, v: str | None) -> str | None:
        if v is not None:
            from prefect.client.schemas.schedules import CronSchedule

            CronSchedule(cron=v)  # raises on an invalid expression
        return v

    @model_validator(mode="after")
    def _one_schedule(self) -> _Timed:
        if (self.every is None) == (self.cron is None):
            raise ValueError("give exactly one of every (e.g. 15m) or cron (e.g. '*/15 * * * *')")
        return self

    def when(self) -> dict:
        """The schedule as `to_deployment` keywords."""
        return {"interval": parse_every(self.every)} if self.every else {"cron": self.cron}


class Schedule(_Timed):
    """One configured source: what to ingest into which collection, and when."""

    paths: list[str] = Field(min_length=1)
    collection: str = Field(default="default", min_length=1)
    profile: str | None = Field(default=None, description="Chunking profile TOML; default profile if unset.")
    prune: bool = True
    name: str | None = None

    @property
    def deployment_name(self) -> str:
        """Stable name: re-serving the same source updates its deployment instead of adding one."""
        return self.name or f"ingest-{self.collection}"


class EvalSchedule(_Timed):
    """One configured evaluation: a question set scored on a collection, and when ([[eval]] tables)."""

    questions: str = Field(
        min_length=1, description="JSONL question set (README: Watching retrieval quality)."
    )
    collection: str = Field(default="default", min_length=1)
    k: int = Field(default=5, ge=1, le=1000)
    mode: Literal["vector", "fulltext", "hybrid", "rrf"] = "hybrid"
    max_drop: float = Field(
        default=5.0, ge=0, description="Recall points below the baseline that fail a run."
    )
    name: str | None = None

    @property
    def deployment_name(self) -> str:
        """Stable name per collection and question set."""
        return self.name or f"eval-{self.collection}-{Path(self.questions).stem}"


def load_schedules(path: Path) -> list[Schedule | EvalSchedule]:
    """[[source]] (ingestion) and [[eval]] (evaluation) tables from a TOML file; a mistake names the entry
    and field. Relative profile and question paths are relative to the file; question sets are checked now."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"sources file {path}: {exc}") from exc
    tables: list[tuple[str, type[Schedule] | type[EvalSchedule], Any]] = []
    for key, model in (("source", Schedule), ("eval", EvalSchedule)):
        entries = data.get(key, [])
        if not isinstance(entries, list):
            raise ConfigError(f"sources file {path}: {key} must be [[{key}]] tables")
        tables += [(key, model, e) for e in entries]
    if not tables:
        raise ConfigError(f"sources file {path}: expected one or more [[source]] or [[eval]] tables")
    out: list[Schedule | EvalSchedule] = []
    counters = {"source": 0, "eval": 0}
    for key, model, entry in tables:
        counters[key] += 1
        where = f"sources file {path}: {key} {counters[key]}"
        try:
            s = model.model_validate(entry)
        except ValidationError as exc:
            msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or key}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"{where}: {msgs}") from exc
        if isinstance(s, Schedule) and s.profile and not Path(s.profile).is_absolute():
            s.profile = str((path.parent / s.profile).resolve())
        if isinstance(s, EvalSchedule):
            from pipeline.evaluate.data import EvalError
            from pipeline.evaluate.live import load_question_set

            s.questions = str((path.parent / Path(s.questions).expanduser()).resolve())
            try:
                load_question_set(s.questions)
            except EvalError as exc:
                raise ConfigError(f"{where}: {exc}") from exc
        out.append(s)
    names = [s.deployment_name for s in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"sources file {path}: two entries share a deployment name; set `name` on one")
    return out


def deployment(
    schedule: Schedule | EvalSchedule, *, task_runner: Any = None, profile: Profile | None = None
) -> Any:
    """A RunnerDeployment for one entry; overlapping runs wait instead of piling up."""
    if isinstance(schedule, EvalSchedule):
        return eval_deployment(schedule)
    from flows.ingest import ingest_flow

    flow = ingest_flow if task_runner is None else ingest_flow.with_options(task_runner=task_runner)
    prof = profile or (load_profile(schedule.profile) if schedule.profile else None)
    paths = [str(Path(p).expanduser().resolve()) for p in schedule.paths]
    return flow.to_deployment(
        name=schedule.deployment_name,
        **schedule.when(),
        parameters={
            "paths": paths,
            "collection": schedule.collection,
            "profile": prof.as_json() if prof else None,
            "prune": schedule.prune,
        },
        concurrency_limit=1,
        description=f"Ingest {', '.join(paths)} into collection {schedule.collection!r}",
        tags=["chunkyard", f"collection:{schedule.collection}"],
    )


def eval_deployment(schedule: EvalSchedule) -> Any:
    """A RunnerDeployment of the evaluate flow: its runs end Failed when recall dropped below the baseline."""
    from flows.evaluate import evaluate_flow

    questions = str(Path(schedule.questions).expanduser().resolve())
    return evaluate_flow.to_deployment(
        name=schedule.deployment_name,
        **schedule.when(),
        parameters={
            "collection": schedule.collection,
            "questions": questions,
            "k": schedule.k,
            "mode": schedule.mode,
            "max_drop": schedule.max_drop,
        },
        concurrency_limit=1,
        description=f"Score {questions} on collection {schedule.collection!r}; Failed when recall drops "
        f"more than {schedule.max_drop} points below the baseline",
        tags=["chunkyard", "eval", f"collection:{schedule.collection}"],
    )


def serve(
    schedules: list[Schedule | EvalSchedule],
    *,
    task_runner: Any = None,
    profile: Profile | None = None,
    api_url: str | None = None,
) -> None:
    """Register the deployments on the server at api_url (None: Prefect's setting) and run their scheduled
    flow runs here until interrupted."""
    import prefect

    from flows.server import using

    with using(api_url):
        names = [s.deployment_name for s in schedules]
        release_runs(names)  # a serve killed earlier left one: it would hold the concurrency slot for ever
        deployments = [deployment(s, task_runner=task_runner, profile=profile) for s in schedules]
        try:
            prefect.serve(*deployments, print_starting_message=False)
        finally:  # Ctrl-C: Prefect's runner stops without ending the run it was executing
            release_runs(names)


def release_runs(names: list[str]) -> int:
    """Mark the running or pending flow runs of these deployments crashed; how many.

    Only `serve` executes its deployments' runs, one at a time (concurrency_limit=1), so one left running when
    no serve runs is a dead one, and it holds the deployment's concurrency slot: every later scheduled run
    would wait for it (AwaitingConcurrencySlot) and nothing would run again (issue 26).
    """
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        DeploymentFilter,
        DeploymentFilterName,
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    live = FlowRunFilterStateType(any_=[StateType.RUNNING, StateType.PENDING])
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=names)),
            flow_run_filter=FlowRunFilter(state=FlowRunFilterState(type=live)),
        )
        for run in runs:
            client.set_flow_run_state(run.id, Crashed(message="its `chunkyard serve` process stopped"))
    return len(runs)
