"""What a run is asked to do, one frozen model per kind: made once (by the CLI, a flow, a script), read by
the `run_*` functions of `pipeline.ingest` and by `Run.begin`.

Pydantic models, not dataclasses: Prefect validates flow parameters with pydantic, and the flows build
their request from their parameters by name (`Request.model_validate(params)`), so a deployment's
parameters, the CLI's and a script's meet the same checks, and a request dumps to JSON for the Prefect
API (`flow_params`). The annotated field types below are the flows' parameter types too.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from pipeline.config import Profile
from pipeline.model import RunKind

#: Bytes of changed files per batch. Measured (bench/experiments/prefect_overhead.py): a task costs Prefect 0.01-0.15 s
#: and a flow run about 1.2 s, while embedding 256 KiB of text takes 30-60 s on 2 CPU cores (about a second
#: on a GPU), so overhead stays under 5%, and a corpus still splits into enough tasks to keep workers busy.
BATCH_BYTES = 256 * 1024

#: A collection name as a parameter.
CollectionName = Annotated[str, Field(min_length=1, max_length=200)]


def _as_text(paths: Any) -> Any:
    """Paths as given by a script (`pathlib.Path`s, a tuple) as the strings a flow parameter holds."""
    if isinstance(paths, list | tuple):
        return [os.fspath(p) if isinstance(p, os.PathLike) else p for p in paths]
    return paths


#: Files or folders (or globs, for a backfill): at least one.
Paths = Annotated[list[str], Field(min_length=1), BeforeValidator(_as_text)]
#: Most files per batch (None: CHUNKYARD_FILES_PER_BATCH).
FilesPerBatch = Annotated[int, Field(ge=1)] | None
#: About this many bytes of changed files per batch (None: only the file count cuts batches).
BatchBytes = Annotated[int, Field(ge=1024)] | None


class RunRequest(BaseModel):
    """A run of some kind on one collection; the ledger row (`runs.params`) records `ledger()`."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: The Prefect flow that runs this kind, named in the ledger (None: no flow, e.g. a benchmark's peer).
    FLOW: ClassVar[str | None] = None
    #: A model switch may ask for another model than the collection's active set's (`Run.begin`).
    SWITCHES_MODEL: ClassVar[bool] = False

    #: None: CHUNKYARD_COLLECTION (an ingest's default); the name is checked by `Run.begin`, with its rules
    collection: str | None = None
    profile: Profile | None = None  # None: the default profile, or the stored one (reindex, prune)
    kind: RunKind = RunKind.INGEST
    dry_run: bool = False
    #: eval only: chunks may exceed the model's input (it truncates)
    model_limit: int | None = Field(default=None, exclude=True)
    #: what else the ledger row says (a benchmark's peer library)
    note: dict[str, Any] = Field(default_factory=dict, exclude=True)

    def ledger(self) -> dict:
        """What `runs.params` records of this request."""
        return dict(self.note)

    def flow_params(self) -> dict:
        """The fields set on this request, as the parameters of its Prefect flow (by name; the profile as
        JSON); the others take the flow's defaults, which are the request's."""
        fields = type(self).model_fields
        return {
            name: value.as_json() if isinstance(value, Profile) else value
            for name, value in self
            if name in self.model_fields_set and name != "kind" and not fields[name].exclude
        }

    def with_flow(self) -> RunRequest:
        """The same request, noted in the ledger as run by its Prefect flow."""
        return self.model_copy(update={"note": self.note | {"flow": self.FLOW}})


class IngestRequest(RunRequest):
    """Files and folders into one collection; rows of files gone from the folders pruned (`prune`)."""

    FLOW = "ingest"

    paths: Paths
    prune: bool = True
    soft_delete: bool = False
    files_per_batch: FilesPerBatch = None
    batch_bytes: BatchBytes = BATCH_BYTES
    follow_external_links: bool | None = None  # None: CHUNKYARD_FOLLOW_EXTERNAL_LINKS

    def ledger(self) -> dict:
        return {"paths": list(self.paths), "dry_run": self.dry_run} | self.note


class BackfillRequest(RunRequest):
    """Many sources (globs, a modification-date range); rerun after an interruption to finish."""

    FLOW = "backfill"

    kind: RunKind = RunKind.BACKFILL
    collection: str = "default"
    sources: Paths
    modified_since: datetime | None = None
    modified_until: datetime | None = None
    prune: bool = False
    soft_delete: bool = False
    files_per_batch: FilesPerBatch = None
    batch_bytes: BatchBytes = BATCH_BYTES
    follow_external_links: bool | None = None

    def ledger(self) -> dict:
        return {
            "sources": list(self.sources),
            "modified_since": self.modified_since,
            "modified_until": self.modified_until,
            "flow": "backfill",
        }


class ReindexRequest(RunRequest):
    """Re-read a collection's source files and redo what a new profile (or the stored one) changes."""

    FLOW = "reindex"

    kind: RunKind = RunKind.REINDEX
    collection: str
    files_per_batch: FilesPerBatch = None
    batch_bytes: BatchBytes = BATCH_BYTES

    def ledger(self) -> dict:
        return {"collection": self.collection, "profile_given": self.profile is not None, "flow": "reindex"}


class ModelSwitchRequest(RunRequest):
    """Embed a collection's chunks with another model and switch search to it when complete."""

    FLOW = "reindex"
    SWITCHES_MODEL = True

    kind: RunKind = RunKind.REINDEX
    collection: str
    model: str
    batch: int = Field(default=256, ge=1, exclude=True)

    def ledger(self) -> dict:
        return {"collection": self.collection, "model": self.model, "flow": "reindex"}


class PruneRequest(RunRequest):
    """Drop the rows of live documents whose source file is gone (only under `paths` when given)."""

    FLOW = "prune"

    kind: RunKind = RunKind.PRUNE
    collection: str = "default"
    paths: list[str] = Field(default_factory=list)
    soft: bool = False

    def ledger(self) -> dict:
        return {"paths": list(self.paths), "soft": self.soft, "flow": "prune"}


def flow_request(flow: str, params: dict[str, Any]) -> RunRequest:
    """The typed request a flow's parameters make (`flows.run.FLOWS` names; the flows and the in-process runs
    of `cli/here.py` alike). A reindex that names a model is a model switch: it keeps the chunks, so the
    profile and batching parameters do not apply to it."""
    if flow == "reindex" and params.get("model") is not None:
        return ModelSwitchRequest(**{k: params[k] for k in ("collection", "model", "dry_run") if k in params})
    kinds: dict[str, type[RunRequest]] = {
        "ingest": IngestRequest, "backfill": BackfillRequest, "reindex": ReindexRequest, "prune": PruneRequest,
    }  # fmt: skip
    if flow not in kinds:
        raise ValueError(f"no run request for flow {flow!r}: expected one of {', '.join(kinds)}")
    return kinds[flow](**{k: v for k, v in params.items() if not (k == "model" and v is None)})
