"""A bound on each file's parse and chunk: time and memory, so that no single input can stop a run.

Parsers and chunkers are plain Python over untrusted input; one pathological file (a deeply nested source,
a bomb a check missed) can run for hours or take the machine's memory. `FileGuard` runs the per-file work
of a batch (`jobs.parse_files`, `jobs.chunk_files`: the same functions a run calls in-process) in a
long-lived worker process, one file at a time, and a watchdog in the caller's thread kills the worker when
the file it is on runs past `file_timeout_s` (parse and chunk together) or the worker's memory (RSS) past
`file_max_mb`. That file fails with an `InputError` naming the bound; a fresh worker goes on with the rest.

Workers are fresh interpreters (never forked from a process that holds threads and connections), kept
for later batches of the process (a pool: one per batch running at once), started at a batch's first
file to parse (a no-change run starts none). Both bounds at 0 run everything in-process, unbounded (for
debugging).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

from pipeline.errors import InputError

#: A per-file job run by the guard: (shared, items, prepare) -> READY, then one (value, error) per item.
Job = Callable[[Any, Sequence[Any], bool], Iterator[Any]]

#: What a job yields once its shared work (`prepare`) is done, before the first item's result.
READY = "ready"

#: Seconds between two looks at the worker's memory while a file is worked on.
POLL_S = 0.05

#: Seconds a new worker may take to import and load the default tokenizers (charged to no file), and the
#: least a job's shared work (building chunkers, a semantic batch's embeddings) is given before its files.
SETUP_S = 180.0

#: Environment passed on to a worker with each job (settings read inside parsers: PDF limits, passwords).
_ENV_PREFIXES = ("CHUNKYARD_", "HF_", "TRANSFORMERS_", "TIKTOKEN_", "TOKENIZERS_")


@dataclass(frozen=True)
class Bound:
    """Seconds and MiB one file may take to parse and chunk; 0 = unbounded; both 0 = in-process."""

    timeout_s: float = 300.0
    max_mb: int = 2048

    @property
    def in_process(self) -> bool:
        return not self.timeout_s and not self.max_mb

    @classmethod
    def from_settings(cls) -> Bound:
        from pipeline.config import Settings

        s = Settings()
        return cls(s.file_timeout_s, s.file_max_mb)


@dataclass
class Outcome:
    """One item's result: its value, or the error it raised (rebuilt here), and the seconds it took."""

    value: Any = None
    error: BaseException | None = None
    seconds: float = 0.0


class _Worker:
    """One worker process and the socket to it.

    A fresh interpreter (`python -c`), not multiprocessing's spawn or forkserver: those run the caller's
    main script again in the child, which a library must not ask of its callers' scripts."""

    def __init__(self, warm: str) -> None:
        import psutil

        ours, theirs = socket.socketpair()
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = f"import pipeline.guard as g; g._main({theirs.fileno()}, {warm!r})"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL
        )
        theirs.close()
        self.conn = Connection(ours.detach())
        self.ps = psutil.Process(self.proc.pid)
        self.ready = False  # said hello: imported and warmed up

    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss_mb(self) -> float:
        try:
            return self.ps.memory_info().rss / 2**20
        except Exception:  # noqa: BLE001 - gone already: the socket says so next
            return 0.0

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.wait(5)
        self.conn.close()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.conn.send(None)
        try:
            self.proc.wait(2)
        except subprocess.TimeoutExpired:
            self.kill()
        else:
            self.conn.close()


_idle: list[_Worker] = []
_pool_lock = threading.Lock()


def _checkout(warm: str) -> _Worker:
    """An idle worker, or a new one that imports `warm` (the first job's module) before it says hello."""
    with _pool_lock:
        while _idle:
            w = _idle.pop()
            if w.alive():
                return w
            w.kill()
    return _Worker(warm)


def _checkin(w: _Worker | None) -> None:
    if w is not None and w.alive():
        with _pool_lock:
            _idle.append(w)


@atexit.register
def shutdown() -> None:
    """Stop the idle workers (a worker also stops by itself when its parent's end of the pipe closes)."""
    with _pool_lock:
        workers, _idle[:] = list(_idle), []
    for w in workers:
        w.close()


@dataclass
class FileGuard:
    """Runs jobs for one batch (one thread): each item bounded, in a worker checked out for the batch."""

    bound: Bound = field(default_factory=Bound)
    #: seconds each item (by key) has used so far: a file's chunk step gets what its parse step left
    spent: dict[str, float] = field(default_factory=dict)
    _worker: _Worker | None = None
    #: workers started (the first, and one after each kill): for tests and benchmarks
    started: int = 0

    def close(self) -> None:
        _checkin(self._worker)
        self._worker = None

    def run(self, job: Job, shared: Any, items: Sequence[Any], keys: Sequence[str]) -> list[Outcome]:
        """One `Outcome` per item, in order; an item over the bound fails with an `InputError`."""
        if self.bound.in_process:
            return self._local(job, shared, items)
        out: list[Outcome] = []
        prepare = True
        while len(out) < len(items):
            rest = items[len(out) :]
            got = self._remote(job, shared, rest, keys[len(out) :], prepare)
            if got is None:  # the shared work went past the bound: each item on its own
                prepare = False
                continue
            out += got
        for k, o in zip(keys, out, strict=True):
            self.spent[k] = self.spent.get(k, 0.0) + o.seconds
        return out

    def _local(self, job: Job, shared: Any, items: Sequence[Any]) -> list[Outcome]:
        gen = job(shared, items, True)
        next(gen)  # READY
        out = []
        t = time.perf_counter()
        for value, error in gen:
            now = time.perf_counter()
            out.append(Outcome(value, error, now - t))
            t = now
        return out

    def _remote(
        self, job: Job, shared: Any, items: Sequence[Any], keys: Sequence[str], prepare: bool
    ) -> list[Outcome] | None:
        """Outcomes of a prefix of items (the last one failed if the worker had to be killed on it), or
        None if the worker was killed before its first item (in the job's shared work)."""
        if self._worker is None or not self._worker.alive():
            self._worker = _checkout(job.__module__)
            self.started += 1
        w = self._worker
        if not w.ready:
            try:
                if not w.conn.poll(SETUP_S) or w.conn.recv() != "hello":
                    raise OSError("no hello")
            except (EOFError, OSError) as exc:
                w.kill()
                self._worker = None
                raise RuntimeError(
                    f"the file worker process did not start ({exc}); set "
                    "CHUNKYARD_FILE_TIMEOUT_S=0 and CHUNKYARD_FILE_MAX_MB=0 to work in-process"
                ) from exc
            w.ready = True
        env = {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)}
        w.conn.send((env, job.__module__, job.__qualname__, shared, list(items), prepare))
        out: list[Outcome] = []
        limit_s, max_mb = self.bound.timeout_s, self.bound.max_mb
        ready = False
        t0 = time.perf_counter()
        # before READY the shared work of every item runs: it may take each item's time
        deadline = t0 + max(limit_s * len(items), SETUP_S) if limit_s else None
        while True:
            over = ""
            try:
                has = w.conn.poll(POLL_S)
                msg = w.conn.recv() if has else None
            except (EOFError, OSError):
                code = w.proc.poll()
                over = f"its worker process died (exit code {code}) while parsing and chunking it"
                msg = None
            if msg is not None:
                now = time.perf_counter()
                if msg == READY:
                    ready = True
                elif msg == "end":
                    return out
                else:
                    value, err = msg
                    out.append(Outcome(value, _rebuild(err) if err is not None else None, now - t0))
                if ready and len(out) < len(items):
                    t0 = now
                    left = limit_s - self.spent.get(keys[len(out)], 0.0) if limit_s else 0.0
                    deadline = now + max(left, 0.0) if limit_s else None
                continue
            if not over:
                now = time.perf_counter()
                if deadline is not None and now > deadline:
                    over = f"took over {limit_s:g} s to parse and chunk (CHUNKYARD_FILE_TIMEOUT_S)"
                elif max_mb and (rss := w.rss_mb()) > max_mb:
                    over = (
                        f"needed over {max_mb} MiB of memory to parse and chunk (CHUNKYARD_FILE_MAX_MB; "
                        f"the worker held {rss:.0f} MiB)"
                    )
                else:
                    continue
            w.kill()
            self._worker = None
            if not ready:
                if not prepare:  # nothing shared to blame: the first item is the one
                    ready = True
                else:
                    return None
            elapsed = time.perf_counter() - t0
            key = keys[len(out)]
            reason = f"{over}; it was stopped and the run went on without it (its stored rows are kept)"
            out.append(Outcome(None, InputError(key, reason, stage="normalize"), elapsed))
            return out


@contextlib.contextmanager
def file_guard(bound: Bound | None = None) -> Iterator[FileGuard]:
    """A guard for one batch; its worker goes back to the pool afterwards."""
    g = FileGuard(bound or Bound.from_settings())  # a worker is started (or taken) at the first file
    try:
        yield g
    finally:
        g.close()


# ------------------------------------------------------------------------------------ the worker


def _main(fd: int, warm: str) -> None:
    """Entry point of a worker process: import the jobs' module `warm` and load the default tokenizers (time
    charged to no file), say hello, serve jobs on the socket it inherited."""
    conn = Connection(fd)
    importlib.import_module(warm)
    from pipeline.tokens import counter

    counter("cl100k_base")
    counter("model")
    conn.send("hello")
    _serve(conn)


def _serve(conn: Connection) -> None:
    """The worker's loop: run each job it is sent, one result per item, until the pipe closes."""
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        env, module, name, shared, items, prepare = msg
        for k in [k for k in os.environ if k.startswith(_ENV_PREFIXES) and k not in env]:
            del os.environ[k]
        os.environ.update(env)
        job: Job = getattr(importlib.import_module(module), name)
        for res in job(shared, items, prepare):
            if res == READY:
                conn.send(READY)
                continue
            value, error = res
            conn.send((value, None if error is None else _portable(error)))
        conn.send("end")


def _portable(exc: BaseException) -> tuple[str, str, str, dict]:
    """An exception as plain values (exceptions with their own __init__ do not unpickle)."""
    cls = type(exc)
    attrs = {k: v for k, v in vars(exc).items() if isinstance(v, (str, int, float, bool, type(None)))}
    return cls.__module__, cls.__qualname__, str(exc), attrs


def _rebuild(err: tuple[str, str, str, dict]) -> BaseException:
    """The worker's exception, as its own class where that can be made (else a RuntimeError naming it)."""
    module, name, message, attrs = err
    try:
        cls = getattr(importlib.import_module(module), name)
        exc = cls.__new__(cls)
        Exception.__init__(exc, message)
        exc.__dict__.update(attrs)
    except Exception:  # noqa: BLE001 - a class that cannot be made here
        return RuntimeError(f"{name}: {message}")
    return exc
