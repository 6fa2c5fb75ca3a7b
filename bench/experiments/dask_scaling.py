"""Scale-out on Dask: the ingest flow on a LocalCluster of 1 and 2 worker processes, and the speed-up.

Each run ingests the corpus into a fresh collection with an empty embedding cache, in a throwaway
embedded Postgres (or --database-url, whose embedding cache is emptied!). Cluster start and each
worker's model load are timed apart from the run (`startup`), so `wall` is the ingest itself.
Torch threads per worker default to cores // workers (Dask's own default would be one).

    python -m bench.experiments.dask_scaling [CORPUS] [--workers 1 2] [--files a.md b.md] [--torch-threads N]

CORPUS defaults to ../shared/bench/chroma/corpora (relative to the repository root).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench.experiments.prefect_overhead import DEFAULT_CORPUS, corpus_files, database, reset


def warm_up() -> int:
    """Load what a worker loads lazily (model, tokenizers, chunkers) before the clock starts."""
    import torch

    from pipeline.chunkers.router import Router
    from pipeline.config import Profile, Settings
    from pipeline.embed import get_embedder
    from pipeline.normalize import normalize
    from pipeline.sources import SourceFile

    settings = Settings()
    src = SourceFile(Path("warm-up.md"), "file:///warm-up.md", "markdown")
    doc = normalize(src, b"# Warm up\n\nA few words to chunk and embed.\n")
    chunker = Router(Profile(), model=settings.model).chunker_for("markdown")
    chunks = [c for s in doc.sections for c in chunker.chunk(doc, s)]
    get_embedder(settings.model, settings.device, settings.embed_batch_size).encode(
        [c.embed_text for c in chunks]
    )
    return torch.get_num_threads()


def run(files: list[str], n_workers: int, torch_threads: int | None, url: str, batch_bytes: int) -> dict:
    """One ingest on a fresh n-worker cluster; startup (cluster + warm-up) timed apart."""
    import distributed
    from prefect_dask import DaskTaskRunner

    from flows.common import outcome
    from flows.ingest import ingest_flow
    from flows.runners import local_cluster

    reset(url)
    t = time.perf_counter()
    cluster = local_cluster(n_workers, torch_threads)
    with distributed.Client(cluster) as client:
        threads = sorted(set(client.run(warm_up).values()))
        startup = time.perf_counter() - t
        flow = ingest_flow.with_options(task_runner=DaskTaskRunner(address=cluster.scheduler_address))
        t = time.perf_counter()
        res = outcome(
            flow(
                paths=files,
                collection=f"bench-dask-{n_workers}",
                prune=False,
                batch_bytes=batch_bytes,
                return_state=True,
            )
        )
        wall = time.perf_counter() - t
    cluster.close()
    return {
        "workers": n_workers,
        "threads": threads,
        "startup": startup,
        "wall": wall,
        "chunks": res["counts"].get("chunks_written", 0),
        "embedded": res["counts"].get("chunks_embedded", 0),
        "failed": len(res["errors"]),
        "embed_s": res["timings"].get("embed", 0.0),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", type=Path, default=DEFAULT_CORPUS)
    ap.add_argument("--files", nargs="*", help="only these file names from the corpus")
    ap.add_argument("--workers", nargs="+", type=int, default=[1, 2])
    ap.add_argument("--torch-threads", type=int, default=None, help="per worker; default cores // workers")
    ap.add_argument("--batch-bytes", type=int, default=None, help="bytes per task (default: the flow's)")
    ap.add_argument("--repeat", type=int, default=1, help="rounds over --workers; the fastest run counts")
    ap.add_argument("--database-url", default=None)
    args = ap.parse_args()

    import flows  # noqa: F401  (quiet Prefect defaults)
    from flows.common import BATCH_BYTES
    from pipeline.config import Settings
    from pipeline.sources import cut_batches

    files = corpus_files(args.corpus, args.files)
    size = sum(Path(f).stat().st_size for f in files)
    batch_bytes = args.batch_bytes or BATCH_BYTES
    batches = cut_batches(files, max_files=Settings().files_per_batch, max_bytes=batch_bytes)
    print(f"corpus: {len(files)} files, {size / 1024:.0f} KiB, {len(batches)} tasks, {os.cpu_count()} cores")
    best: dict[int, dict] = {}
    with database(args.database_url) as url:
        os.environ["CHUNKYARD_DATABASE_URL"] = url
        for _ in range(args.repeat):  # rounds, so a busy moment does not hit one setting only
            for n in args.workers:
                row = run(files, n, args.torch_threads, url, batch_bytes)
                print(f"  {row}", flush=True)
                if n not in best or row["wall"] < best[n]["wall"]:
                    best[n] = row
    rows = [best[n] for n in dict.fromkeys(args.workers)]
    base = rows[0]["wall"]
    print()
    print(
        "| workers | torch threads each | startup s | ingest wall s | speed-up | chunks | embedded | failed |"
    )
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(
            f"| {r['workers']} | {','.join(map(str, r['threads']))} | {r['startup']:.1f} | {r['wall']:.1f} | "
            f"{base / r['wall']:.2f}x | {r['chunks']} | {r['embedded']} | {r['failed']} |"
        )
    print(
        "\nembed seconds summed over tasks (CPU-side work, not wall):", [round(r["embed_s"], 1) for r in rows]
    )


if __name__ == "__main__":
    main()
