"""One retry policy: the serial executor and the Prefect tasks retry the same failures, the same number of
times, and neither ever retries a bad file, a bad setting or a bug."""

from __future__ import annotations

import psycopg
import pytest
from prefect.states import Completed, Failed

import flows  # noqa: F401  (quiet Prefect defaults before Prefect is imported)
from flows.common import TASK_OPTIONS, retry_transient
from pipeline import executor
from pipeline.errors import (
    ConcurrentUpdate,
    ConfigError,
    DatabaseError,
    DatabaseUnavailable,
    InputError,
    SkipFile,
    TransientError,
)
from pipeline.model import RunContext, Stats

#: Every failure a batch or step can end with, and whether it is worth another attempt.
CASES: list[tuple[BaseException, bool]] = [
    (TransientError("another run is writing collection 'x'"), True),
    (ConcurrentUpdate("a document changed meanwhile"), True),
    (psycopg.OperationalError("server closed the connection unexpectedly"), True),
    (psycopg.errors.SerializationFailure("could not serialize access"), True),
    (TimeoutError("timed out"), True),
    (ConnectionResetError("connection reset by peer"), True),
    (DatabaseUnavailable("the database stayed away its whole wait"), False),
    (ConfigError("bad setting"), False),
    (InputError("file:///x.md", "not UTF-8"), False),
    (SkipFile("file:///x.md", "empty"), False),
    (DatabaseError("the vector extension is missing"), False),
    (psycopg.errors.UniqueViolation("duplicate key"), False),
    (ValueError("a bug"), False),
]


@pytest.fixture
def ctx(database_url) -> RunContext:
    return RunContext(url=database_url, run_id=None, collection_id=None, collection="c", profile={}, model="m")


def _serial_retries(ctx: RunContext, exc: BaseException) -> bool:
    """Whether `retrying` calls again after `exc` (the second call succeeds)."""
    calls: list[int] = []

    def call() -> Stats:
        calls.append(1)
        if len(calls) == 1:
            raise exc
        return Stats()

    try:
        executor.retrying(ctx, call)
    except BaseException as raised:  # noqa: BLE001 - the one raised must be the one thrown
        assert raised is exc and calls == [1]
        return False
    return calls == [1, 1]


@pytest.mark.parametrize(("exc", "transient"), CASES, ids=[type(e).__name__ for e, _ in CASES])
def test_serial_and_prefect_retry_the_same_failures(ctx, exc, transient, monkeypatch):
    monkeypatch.setattr(executor.time, "sleep", lambda s: None)  # the delays, not what this is about
    assert executor.is_transient(exc) is transient
    assert _serial_retries(ctx, exc) is transient
    assert retry_transient(None, None, Failed(data=exc)) is transient


def test_both_paths_make_the_same_attempts_with_the_same_delays(ctx, monkeypatch):
    slept: list[float] = []
    monkeypatch.setattr(executor.time, "sleep", slept.append)
    calls: list[int] = []

    def always_lost() -> Stats:
        calls.append(1)
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    with pytest.raises(psycopg.OperationalError):
        executor.retrying(ctx, always_lost)
    assert len(calls) == executor.ATTEMPTS == TASK_OPTIONS["retries"] + 1
    assert slept == list(executor.RETRY_DELAYS) == TASK_OPTIONS["retry_delay_seconds"]
    assert retry_transient(None, None, Completed(data={})) is False


def test_a_task_waits_for_the_database_before_prefect_retries_it(monkeypatch):
    down = RunContext(
        url="postgresql://nobody@127.0.0.1:1/none", run_id=None, collection_id=None, collection="c",
        profile={}, model="m", db_retry_seconds=0.1,
    )  # fmt: skip
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    with pytest.raises(DatabaseUnavailable) as err:
        executor.attempt(down, lambda: (_ for _ in ()).throw(lost))
    assert err.value.__cause__ is lost and not executor.is_transient(err.value)
    bug = ValueError("a bug")
    with pytest.raises(ValueError):  # no wait for a failure that is not transient
        executor.attempt(down, lambda: (_ for _ in ()).throw(bug))
