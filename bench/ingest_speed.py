"""Ingest speed: chunkyard end to end against the model alone on the same chunk texts (issue 28).

    python -m bench.ingest_speed                                   # FastAPI docs 0.140.0, torch (+ openvino)
    python -m bench.ingest_speed ../shared/bench/chroma/corpora --backend torch --repeat 3
    python -m bench.ingest_speed CORPUS --json bench/results/ingest-speed.json

For each backend: `chunkyard ingest CORPUS --no-prefect` in a subprocess (CHUNKYARD_EMBED_BACKEND set) into a
fresh collection, the embedding cache emptied first, on a throwaway embedded Postgres whose data folder also
holds the exported models. An untimed warm-up ingest of one file per backend comes first (it exports the
OpenVINO model once and reads the weights into the page cache), so every timed run pays the same model load.
Then the model alone: the distinct texts that run embedded (each stored chunk's context and text, as the
model saw them), encoded in batches of CHUNKYARD_EMBED_BATCH_SIZE (default 64) after the model is loaded, by
sentence-transformers for torch and by the exported model's own runtime for openvino. "outside the model" is
the share of chunkyard's wall time the model alone does not account for (start-up, model load, parsing,
chunking, tokenizing, writes); "run" is the sum of the ingest's own stage timers (the run ledger), without
the process start, and "embed stage" its embed stage (model load, tokenizing, the cache, the model).

CORPUS defaults to ../shared/bench/fastapi-docs/0.140.0 (the FastAPI docs of one release, 1.8 MB).
The peers (LlamaIndex's IngestionPipeline into pgvector, CocoIndex) are measured only where their packages
import (the bench extra); otherwise their rows say so. Never part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from bench.common import ROOT, shared_data, table

COLLECTION = "ingest-speed"


@contextmanager
def scratch() -> Iterator[tuple[Path, str]]:
    """A throwaway data folder (exported models) and the URL of an embedded Postgres inside it."""
    from pipeline import db

    tmp = Path(tempfile.mkdtemp(prefix="cy-ingest-speed-"))
    try:
        yield tmp, db.start_embedded(tmp / "pg")
    finally:
        db.stop_embedded(tmp / "pg")
        shutil.rmtree(tmp, ignore_errors=True)


def reset(url: str) -> None:
    """Drop the bench collections and empty the embedding cache, so a run embeds every chunk."""
    from pipeline import db

    with db.connection(url) as conn:
        conn.execute("DELETE FROM collections WHERE name LIKE %s", (f"{COLLECTION}%",))
        conn.execute("TRUNCATE embedding_cache")


def ingest(paths: list[Path], collection: str, backend: str, data: Path, url: str) -> tuple[float, dict]:
    """Wall seconds of one `chunkyard ingest --no-prefect --json` and its summary."""
    env = dict(os.environ, CHUNKYARD_DATA_DIR=str(data), CHUNKYARD_DATABASE_URL=url,
               CHUNKYARD_EMBED_BACKEND=backend, HF_HUB_OFFLINE="1")  # fmt: skip
    cmd = [sys.executable, "-m", "pipeline.cli", "ingest", *map(str, paths), "--no-prefect", "-c", collection, "--json"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"chunkyard ingest ({backend}) failed with exit {proc.returncode}:\n{proc.stderr[-2000:]}")
    out = proc.stdout  # the summary is the last thing printed (an export may print before it)
    start = 0 if out.startswith("{") else out.rfind("\n{") + 1
    return wall, json.loads(out[start:])


def embedded_texts(url: str, collection: str) -> list[str]:
    """The distinct texts a run embedded (the cache's unit): each chunk's context and text, in document order."""
    from pipeline import db
    from pipeline.model import embedded_text

    with db.connection(url) as conn:
        rows = conn.execute(
            """SELECT DISTINCT ON (c.embed_hash) c.context, c.text FROM chunks c
               JOIN collections col ON col.id = c.collection_id WHERE col.name = %s
               ORDER BY c.embed_hash, c.document_id, c.char_start""",
            (collection,),
        ).fetchall()
    return [embedded_text(context, text) for context, text in rows]


def model_alone(texts: list[str], backend: str, data: Path, batch: int) -> tuple[float, float]:
    """Seconds to load the model and to encode `texts` in batches of `batch`, outside the pipeline."""
    from pipeline.config import Settings
    from pipeline.embed.meta import model_path

    t0 = time.perf_counter()
    if backend == "torch":
        from sentence_transformers import SentenceTransformer

        st = SentenceTransformer(str(model_path()), device="cpu")

        def encode() -> object:
            return st.encode(texts, batch_size=batch, normalize_embeddings=True)
    else:
        from pipeline.embed import embedding_key, get_embedder

        enc = get_embedder(embedding_key(Settings().model, backend), batch_size=batch, cache_dir=data / "models")

        def encode() -> object:
            return enc.encode(texts)

    load = time.perf_counter() - t0
    t0 = time.perf_counter()
    encode()
    return load, time.perf_counter() - t0


def stage_seconds(summary: dict) -> dict[str, float]:
    """The ingest's own stage timers (the run ledger: load, normalize, chunk, embed, store, ...)."""
    return {k: float(v) for k, v in (summary.get("timings") or {}).items() if isinstance(v, int | float)}


def peers_note() -> list[str]:
    """Which peers can run here: their packages come with the bench extra."""
    notes = []
    for name, module in (("LlamaIndex IngestionPipeline -> pgvector", "llama_index.vector_stores.postgres"),
                         ("CocoIndex", "cocoindex")):  # fmt: skip
        try:
            __import__(module)
        except ImportError:
            notes.append(f"{name}: skipped, `{module}` does not import (pip install -e '.[bench]')")
        else:
            notes.append(f"{name}: importable, but not measured by this script yet")
    return notes


def backends(wanted: list[str] | None) -> list[str]:
    """torch, and openvino where its runtime is installed (or the ones asked for)."""
    from pipeline.embed import installed

    if wanted:
        return wanted
    return ["torch", *(["openvino"] if installed("openvino") else [])]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", type=Path, default=shared_data("fastapi-docs") / "0.140.0")
    ap.add_argument("--backend", action="append", choices=["torch", "openvino", "onnx"],
                    help="Embedding backends (repeatable); default torch, and openvino where installed.")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=1, help="Timed runs per backend (medians reported).")
    ap.add_argument("--json", type=Path, help="Also write the figures here (e.g. bench/results/ingest-speed.json).")
    a = ap.parse_args()
    if not a.corpus.exists():
        sys.exit(f"no corpus at {a.corpus}: pass a folder or file")
    files = [p for p in sorted(a.corpus.rglob("*")) if p.is_file()] if a.corpus.is_dir() else [a.corpus]
    mb = sum(p.stat().st_size for p in files) / 1e6
    warm = next((p for p in files if p.suffix in (".md", ".txt", ".html")), files[0])  # the first text file
    batch = int(os.environ.get("CHUNKYARD_EMBED_BATCH_SIZE", "64"))
    rows, found = [], []
    with scratch() as (data, url):
        for backend in backends(a.backend):
            reset(url)
            ingest([warm], f"{COLLECTION}-warmup", backend, data, url)  # export, page cache: untimed
            walls, runs, embeds, summary = [], [], [], {}
            for i in range(a.repeat):
                reset(url)
                wall, summary = ingest([a.corpus], f"{COLLECTION}-{backend}-{i}", backend, data, url)
                stages = stage_seconds(summary)
                walls.append(wall)
                runs.append(sum(stages.values()))
                embeds.append(stages.get("embed", 0.0))
                print(f"  {backend} run {i + 1}: {wall:.1f} s", file=sys.stderr, flush=True)
            texts = embedded_texts(url, f"{COLLECTION}-{backend}-{a.repeat - 1}")
            load, encode = model_alone(texts, backend, data, batch)
            wall, run, embed = statistics.median(walls), statistics.median(runs), statistics.median(embeds)
            fig = {"backend": backend, "files": len(files), "mb": round(mb, 2), "texts": len(texts),
                   "wall_s": round(wall, 1), "run_s": round(run, 1), "embed_stage_s": round(embed, 1),
                   "model_load_s": round(load, 1), "model_encode_s": round(encode, 1),
                   "outside_wall": round(1 - encode / wall, 3), "outside_run": round(1 - encode / run, 3),
                   "summary": summary}  # fmt: skip
            found.append(fig)
            rows.append([f"chunkyard ({backend})", f"{len(texts)}", f"{wall:.1f}", f"{run:.1f}", f"{embed:.1f}",
                         f"{load:.1f}", f"{encode:.1f}", f"{100 * (1 - encode / wall):.0f}%",
                         f"{100 * (1 - encode / run):.0f}%", f"{len(texts) / wall:.1f}",
                         f"{len(texts) / encode:.1f}"])  # fmt: skip
    print(f"{a.corpus}: {len(files)} files, {mb:.2f} MB; batch {batch}; medians of {a.repeat} run(s)\n")
    print(table(["", "texts", "wall s", "run s", "embed stage s", "model load s", "model encode s",
                 "outside (wall)", "outside (run)", "texts/s (wall)", "texts/s (model)"], rows))  # fmt: skip
    for line in peers_note():
        print(f"\n{line}", end="")
    print()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(found, indent=1, default=str))
        print(f"figures: {a.json}")


if __name__ == "__main__":
    main()
