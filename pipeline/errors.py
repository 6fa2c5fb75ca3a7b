"""Two error families, mapped at one boundary: transient (retried) and input (recorded, run goes on)."""

from __future__ import annotations


class ChunkyardError(Exception):
    """Base class: every message says what went wrong and what to do about it."""


class InputError(ChunkyardError):
    """A bad source file: recorded in ingest_errors, the run goes on with the rest, never retried."""

    def __init__(self, source: str, reason: str, *, stage: str = "load") -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason
        self.stage = stage


class SkipFile(ChunkyardError):
    """A file that is valid but holds nothing to index (empty, whitespace only): counted as skipped."""

    def __init__(self, source: str, reason: str) -> None:
        super().__init__(f"{source}: {reason}")
        self.source = source
        self.reason = reason


class TransientError(ChunkyardError):
    """A failure worth retrying: connection lost, timeout, serialization conflict."""


class DatabaseUnavailable(TransientError):
    """The database stayed away longer than a run waits for it: stop, say nothing was lost, say how to resume."""


class ConcurrentUpdate(TransientError):
    """A document changed in the database while this run was processing it: redo it from the new state."""


class ConfigError(ChunkyardError):
    """Invalid settings or profile: the message names the field."""


class DatabaseError(ChunkyardError):
    """The database is reachable but unusable as configured (missing extension, wrong dimension)."""
