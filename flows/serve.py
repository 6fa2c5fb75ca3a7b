"""Scheduled ingestion: deployments with interval or cron schedules, served from this process."""

from __future__ import annotations

import re
import tomllib
from datetime import timedelta
from pathlib import Path
from typing import Any

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


class Schedule(BaseModel):
    """One configured source: what to ingest into which collection, and when."""

    model_config = ConfigDict(extra="forbid")

    paths: list[str] = Field(min_length=1)
    collection: str = Field(default="default", min_length=1)
    every: str | None = None
    cron: str | None = None
    profile: str | None = Field(default=None, description="Chunking profile TOML; default profile if unset.")
    prune: bool = True
    name: str | None = None

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
    def _one_schedule(self) -> Schedule:
        if (self.every is None) == (self.cron is None):
            raise ValueError("give exactly one of every (e.g. 15m) or cron (e.g. '*/15 * * * *')")
        return self

    @property
    def deployment_name(self) -> str:
        """Stable name: re-serving the same source updates its deployment instead of adding one."""
        return self.name or f"ingest-{self.collection}"


def load_schedules(path: Path) -> list[Schedule]:
    """[[source]] tables from a TOML file; a mistake names the entry and field."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"sources file {path}: {exc}") from exc
    entries = data.get("source")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"sources file {path}: expected one or more [[source]] tables")
    out = []
    for i, entry in enumerate(entries):
        try:
            s = Schedule.model_validate(entry)
        except ValidationError as exc:
            msgs = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'source'}: {e['msg']}" for e in exc.errors())
            raise ConfigError(f"sources file {path}: source {i + 1}: {msgs}") from exc
        if s.profile and not Path(s.profile).is_absolute():
            s.profile = str((path.parent / s.profile).resolve())
        out.append(s)
    names = [s.deployment_name for s in out]
    if len(set(names)) != len(names):
        raise ConfigError(f"sources file {path}: two sources share a deployment name; set `name` on one")
    return out


def deployment(schedule: Schedule, *, task_runner: Any = None, profile: Profile | None = None) -> Any:
    """A RunnerDeployment of the ingest flow for one source; overlapping runs wait instead of piling up."""
    from flows.ingest import ingest_flow

    flow = ingest_flow if task_runner is None else ingest_flow.with_options(task_runner=task_runner)
    prof = profile or (load_profile(schedule.profile) if schedule.profile else None)
    paths = [str(Path(p).expanduser().resolve()) for p in schedule.paths]
    when = {"interval": parse_every(schedule.every)} if schedule.every else {"cron": schedule.cron}
    return flow.to_deployment(
        name=schedule.deployment_name,
        **when,
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


def serve(schedules: list[Schedule], *, task_runner: Any = None, profile: Profile | None = None) -> None:
    """Register the deployments and run their scheduled flow runs here until interrupted."""
    import prefect

    prefect.serve(*(deployment(s, task_runner=task_runner, profile=profile) for s in schedules))
