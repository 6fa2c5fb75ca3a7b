"""SIGTERM and SIGINT end a command the way Ctrl-C does, then say what was stored (issue 29).

Python's default SIGTERM ends the process at once: the ledger row stayed `running`, the collection lock
went only with the dead connection, Prefect's temporary server was left running and nothing was printed.
Here both signals raise `Interrupted` in the main thread instead, so a run's `with Run` block marks its
row crashed and closes its connection (the lock goes with it), psycopg cancels a query in flight, and the
CLI prints one line and exits 128 + the signal (130, 143) after stopping the server it started.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from types import FrameType

#: The signals a command turns into `Interrupted`.
HANDLED = (signal.SIGTERM, signal.SIGINT)


class Interrupted(KeyboardInterrupt):
    """A signal asked the command to stop. A KeyboardInterrupt, so code that cleans up after Ctrl-C (psycopg
    cancelling a query, Prefect marking a flow run crashed) does the same for SIGTERM."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 130 for SIGINT, 143 for SIGTERM."""
        return 128 + self.signum


#: A repeat within this many seconds of the first signal is the same request delivered twice (`timeout`
#: signals the child and then its process group), not a second Ctrl-C.
REPEAT_GRACE_S = 2.0

_first: float | None = None
_received: Interrupted | None = None
_note: str | None = None


def on_interrupt(note: str) -> None:
    """What the command's one line says after `interrupted by SIG...;` (default: what was stored)."""
    global _note
    _note = note


def note() -> str | None:
    """The line a command set with on_interrupt, if any."""
    return _note


def received() -> Interrupted | None:
    """The signal that interrupted the command, if one did (whatever the libraries made of the exception)."""
    return _received


def _raise(signum: int, frame: FrameType | None) -> None:
    """The first signal unwinds the command; a later one while it does ends it at once (as Ctrl-C twice)."""
    global _first, _received
    now = time.monotonic()
    if _first is None:
        _first, _received = now, Interrupted(signum)
        raise _received
    if now - _first < REPEAT_GRACE_S:
        return
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


@contextmanager
def interruptible() -> Iterator[None]:
    """Inside this block (the main thread of a command), SIGTERM and SIGINT raise `Interrupted`; the previous
    handlers come back after it (a test calling `main()` keeps pytest's own)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    global _first, _received, _note
    _first, _received, _note = None, None, None
    before = {s: signal.getsignal(s) for s in HANDLED}
    for s in HANDLED:
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)


def documents_stored() -> int | None:
    """Documents written by the runs this process began (`documents.last_run_id`); None when unknown (no
    run begun, or the database is what went away)."""
    run_mod = sys.modules.get("pipeline.run")
    ids = list(getattr(run_mod, "BEGUN", []))
    if not ids:
        return None
    import psycopg

    from pipeline import db

    try:
        with psycopg.connect(db.database_url(), connect_timeout=3, autocommit=True) as conn:
            row = conn.execute(
                "SELECT count(*) FROM documents WHERE last_run_id = ANY(%s)", (ids,)
            ).fetchone()
    except (psycopg.Error, OSError):
        return None
    return int(row[0]) if row else None


def exit_now(code: int) -> None:
    """Exit with `code`; at once (stdio flushed) when threads of a task runner are still working, since the
    interpreter would otherwise wait for their batch to end: what they had not committed is rolled back,
    as after a SIGKILL, and the run's row is already marked crashed."""
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if not others:
        sys.exit(code)
    for stream in (sys.stdout, sys.stderr):
        with suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
