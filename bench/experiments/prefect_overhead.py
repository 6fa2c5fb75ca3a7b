"""What Prefect costs: the ingest flow's wall time vs the same work as plain functions (`run_ingest`).

Every run ingests the corpus into a fresh collection with an empty embedding cache, in a throwaway
embedded Postgres (or --database-url, whose embedding cache is emptied!). The model is loaded before
timing, so all modes pay the same. Also measured: the cost of one task, and the temporary server's start.
Tasks run in worker threads, where torch embeds a little faster than in the main thread, so plain
functions are timed both ways and the worker-thread run is the baseline.

    python -m bench.experiments.prefect_overhead [CORPUS] [--files a.md b.md] [--repeat 1]

CORPUS defaults to ../shared/bench/chroma/corpora (relative to the repository root).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from bench.common import chroma_dir

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

DEFAULT_CORPUS = chroma_dir() / "corpora"


@contextmanager
def database(url: str | None):
    """The given database, or a throwaway embedded server's."""
    if url:
        yield url
        return
    from pipeline import db

    tmp = Path(tempfile.mkdtemp(prefix="cy-bench-"))
    try:
        yield db.start_embedded(tmp / "pg")
    finally:
        db.stop_embedded(tmp / "pg")
        shutil.rmtree(tmp, ignore_errors=True)


def reset(url: str) -> None:
    """Drop the bench collections and the embedding cache, so every mode embeds everything."""
    from pipeline import db

    with db.connection(url) as conn:
        conn.execute("DELETE FROM collections WHERE name LIKE 'bench-%'")
        conn.execute("TRUNCATE embedding_cache")


def corpus_files(corpus: Path, names: list[str] | None) -> list[str]:
    files = sorted(corpus.glob("*")) if not names else [corpus / n for n in names]
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        sys.exit(f"not found: {', '.join(missing)}")
    return [str(f) for f in files]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--files", nargs="*", help="only these file names from the corpus")
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs per mode (the median is reported, with min-max)"
    )
    ap.add_argument("--tasks", type=int, default=100, help="empty tasks for the per-task cost")
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()

    import flows  # noqa: F401  (quiet Prefect defaults)
    from pipeline.config import Settings
    from pipeline.embed import get_embedder
    from pipeline.ingest import run_ingest

    files = corpus_files(args.corpus, args.files)
    size = sum(Path(f).stat().st_size for f in files)
    print(f"corpus: {len(files)} files, {size / 1024:.0f} KiB, {os.cpu_count()} cores")
    t = time.perf_counter()
    get_embedder()
    print(f"model load: {time.perf_counter() - t:.1f} s (before timing)")

    with database(args.database_url) as url:
        os.environ["CHUNKYARD_DATABASE_URL"] = url
        settings = Settings()
        from prefect import flow
        from prefect.task_runners import ThreadPoolTaskRunner

        from flows.common import ingest_batch_task, outcome
        from flows.ingest import ingest_flow
        from pipeline.model import RunContext

        # The temporary Prefect server starts on the first flow call: time it on its own.
        @flow(name="bench-noop", validate_parameters=False)
        def noop_flow(n: int, ctx: object) -> int:
            futures = [ingest_batch_task.submit(ctx, []) for _ in range(n)]
            return sum(len(f.result()["counts"]) for f in futures)

        ctx = RunContext(url=url, run_id=None, collection_id=None, collection="x", profile={}, model="m")
        t = time.perf_counter()
        noop_flow(1, ctx)
        startup = time.perf_counter() - t
        one = min(_timed(lambda: noop_flow(1, ctx)) for _ in range(3))
        many = min(_timed(lambda: noop_flow(args.tasks, ctx)) for _ in range(2))
        per_task = (many - one) / (args.tasks - 1)
        serial = noop_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=1))
        many_serial = _timed(lambda: serial(args.tasks, ctx))
        per_task_serial = (many_serial - one) / (args.tasks - 1)

        modes = {
            "plain functions (run_ingest)": lambda c: _plain(run_ingest, files, settings, c),
            # Tasks run in worker threads, and torch embeds faster there than in the main thread here
            # (about 10%): this row, not the one above, is the like-for-like baseline.
            "plain functions in a worker thread": lambda c: _in_thread(
                _plain, run_ingest, files, settings, c
            ),
            "flow, same batches, 1 thread": lambda c: _flow(
                ingest_flow.with_options(task_runner=ThreadPoolTaskRunner(max_workers=1)),
                outcome,
                files,
                c,
                files_per_batch=settings.files_per_batch,
                batch_bytes=None,
            ),
            "flow, defaults (2 threads, 256 KiB batches)": lambda c: _flow(ingest_flow, outcome, files, c),
        }
        # Warm up what loads lazily (tokenizers, chunkers, the model's first batches), then forget it.
        smallest = min(files, key=lambda f: Path(f).stat().st_size)
        _plain(run_ingest, [smallest], settings, "bench-warm-up")
        walls: dict[str, list[float]] = {name: [] for name in modes}
        infos: dict[str, dict] = {}
        for i in range(args.repeat):  # modes take turns, so a busy moment does not hit one mode only
            for k, (name, fn) in enumerate(modes.items()):
                reset(url)
                wall, infos[name] = fn(f"bench-{k}-{i}")
                walls[name].append(wall)
                print(f"  {name}: {wall:.1f} s  {infos[name]}", flush=True)
        results = {name: (statistics.median(w), infos[name]) for name, w in walls.items()}

    base = results["plain functions in a worker thread"][0]
    print()
    print("| mode | median wall s | min-max s | vs plain in a thread | tasks |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, (wall, info) in results.items():
        rel = "-" if wall == base else f"{(wall - base) / base * 100:+.1f}%"
        print(
            f"| {name} | {wall:.1f} | {min(walls[name]):.1f}-{max(walls[name]):.1f} | {rel} | {info.get('tasks', '-')} |"
        )
    print()
    print(f"temporary Prefect server start (first flow call in a process): {startup:.1f} s")
    print(f"a flow run with one empty task: {one:.2f} s (flow-run overhead)")
    print(
        f"per task, {args.tasks} empty tasks on 2 threads: {per_task * 1000:.0f} ms; serially: "
        f"{per_task_serial * 1000:.0f} ms"
    )
    for name, (wall, info) in results.items():
        if "tasks" in info:
            share = (one + info["tasks"] * per_task_serial) / wall * 100
            print(f"{name}: flow + task overhead ~{share:.1f}% of the run")


def _in_thread(fn, *args):
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(fn, *args).result()


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _plain(run_ingest, files, settings, collection) -> tuple[float, dict]:
    t = time.perf_counter()
    stats, _, status = run_ingest(files, settings=settings, collection=collection, prune=False)
    wall = time.perf_counter() - t
    return wall, {"status": status, "chunks": stats.counts["chunks_written"], "failed": len(stats.errors)}


def _flow(flow, outcome, files, collection, **params) -> tuple[float, dict]:
    from flows.common import BATCH_BYTES
    from pipeline.config import Settings
    from pipeline.sources import cut_batches

    s = Settings()
    t = time.perf_counter()
    res = outcome(flow(paths=files, collection=collection, prune=False, return_state=True, **params))
    wall = time.perf_counter() - t
    batches = cut_batches(
        files,
        max_files=params.get("files_per_batch") or s.files_per_batch,
        max_bytes=params.get("batch_bytes", BATCH_BYTES),
    )
    return wall, {
        "status": res["status"],
        "chunks": res["counts"].get("chunks_written", 0),
        "failed": len(res["errors"]),
        "tasks": len(batches),
    }


if __name__ == "__main__":
    main()
