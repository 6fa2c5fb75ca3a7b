"""Ingest a folder with the embedding model replaced by a hash stand-in; print peak RSS and timings as JSON.

    python -m bench._standin FOLDER COLLECTION      (bench/throughput.py --only rss runs it per corpus size)

The stand-in returns a unit vector seeded by each text's hash: as fast as memory allows, so what grows with
the corpus is the pipeline's own memory, not the model's. Its vectors are not the model's: run it only
against a throwaway CHUNKYARD_DATA_DIR (bench/throughput.py does), never a database with a real cache.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pipeline import db, stages, store
from pipeline.config import Settings
from pipeline.ingest import run_ingest


class StandIn:
    """384-dimensional unit vectors from each text's CRC32: no model, no threads."""

    name, dim = "stand-in", 384

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            v = np.random.default_rng(zlib.crc32(t.encode())).standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        if progress:
            progress(len(texts))
        return out


def peak_rss_kib() -> int:
    """This process's peak RSS: VmHWM (ru_maxrss would carry over the parent's peak from before exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("folder", type=Path)
    ap.add_argument("collection")
    a = ap.parse_args()
    folder, collection = a.folder, a.collection
    if "CHUNKYARD_DATABASE_URL" in os.environ:
        sys.exit("refused: run with a throwaway CHUNKYARD_DATA_DIR, never a real database (its cache)")
    stages.get_embedder = lambda *a, **k: StandIn()  # the stages' one way to a model
    settings = Settings(embed_backend="torch")  # key only: the stand-in answers for it
    t = time.perf_counter()
    result = run_ingest([folder], settings=settings, collection=collection, prune=False)
    took = time.perf_counter() - t
    peak_mib = peak_rss_kib() / 1024
    with db.connection(db.database_url(settings)) as conn:
        store.drop_collection(conn, collection)
    c = result.stats.counts
    print(json.dumps({"documents": c["documents_new"], "chunks": c["chunks_written"],
                      "seconds": round(took, 1), "peak_rss_mib": round(peak_mib)}))  # fmt: skip


if __name__ == "__main__":
    main()
