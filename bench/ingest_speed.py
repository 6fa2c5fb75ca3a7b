"""Ingest speed (issue 28): chunkyard and its peers end to end, each against the model alone on its own texts.

    python -m bench.ingest_speed                                   # FastAPI docs 0.140.0, torch (+ openvino), peers
    python -m bench.ingest_speed ../shared/bench/fastapi-docs/0.141.1 --backend torch --backend openvino
    python -m bench.ingest_speed ../shared/bench/chroma/corpora --backend torch --repeat 3 --no-peers
    python -m bench.ingest_speed CORPUS --json bench/results/ingest-speed.json

For each backend: `chunkyard ingest CORPUS --no-prefect` in a subprocess (CHUNKYARD_EMBED_BACKEND set) into a
fresh collection, the embedding cache emptied first, on a throwaway embedded Postgres whose data folder also
holds the exported models. An untimed warm-up ingest of one file per backend comes first (it exports the
OpenVINO model once and reads the weights into the page cache), so every timed run pays the same model load.
Then the model alone: the distinct texts that run embedded (each stored chunk's context and text, as the
model saw them), encoded in batches of CHUNKYARD_EMBED_BATCH_SIZE (default 64) after the model is loaded, by
sentence-transformers for torch and by the exported model's own runtime for openvino. "outside the model" is
the share of a system's wall time the model alone does not account for (start-up, imports, model load,
reading, parsing, chunking, tokenizing, writes); "run" is the sum of the ingest's own stage timers (the run
ledger), without the process start, and "embed stage" its embed stage (model load, tokenizing, the cache, the
model).

The peers (`--no-peers` leaves them out; skipped where the bench extra is not installed), each a whole
`python -m bench.ingest_peers PEER` process timed the same way, cold (fresh database and state), after an
untimed warm-up on one file: LlamaIndex's IngestionPipeline (SimpleDirectoryReader -> MarkdownNodeParser ->
SentenceSplitter at 144 cl100k tokens -> the model -> PGVectorStore) and CocoIndex's text_embedding example
(bench/incremental_peers.py: RecursiveSplitter at 600 bytes -> its SentenceTransformerEmbedder -> a Postgres
table), each in a database of its own on the same server. Both load the same all-MiniLM-L6-v2 from the local
path with sentence-transformers on torch (CPU): compare them with chunkyard's torch row; OpenVINO is
chunkyard's only. Their model-alone bound is sentence-transformers on exactly the texts their model was
asked (LlamaIndex's include the metadata it embeds), in batches of the same size.

CORPUS defaults to ../shared/bench/fastapi-docs/0.140.0 (the FastAPI docs of one release, 1.8 MB).
Never part of the test suite.
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
    # the exports go where model_alone loads them (data/models), not to the per-user export cache
    env = dict(os.environ, CHUNKYARD_DATA_DIR=str(data), CHUNKYARD_DATABASE_URL=url,
               CHUNKYARD_EMBED_BACKEND=backend, CHUNKYARD_EXPORT_CACHE=str(data / "models"),
               HF_HUB_OFFLINE="1")  # fmt: skip
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
        from pipeline.embed.embedder import quiet_offline_transformers

        quiet_offline_transformers()  # as chunkyard's embedder: no tokenizer threads beside torch's
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


#: The peers (bench/ingest_peers.py) and the module each needs: name -> (row label, module).
PEERS = {
    "llamaindex": ("LlamaIndex IngestionPipeline -> pgvector (torch)", "llama_index.vector_stores.postgres"),
    "cocoindex": ("CocoIndex text_embedding -> Postgres (torch)", "cocoindex"),
}

#: How each peer is configured (printed under the table).
PEER_NOTES = {
    "llamaindex": "SimpleDirectoryReader(*.md) -> MarkdownNodeParser -> SentenceSplitter(chunk_size=144 cl100k "
    "tokens, overlap 0: chunkyard's markdown size, split under each heading as chunkyard does) -> the "
    "SentenceTransformer behind a BaseEmbedding (embed_batch_size=BATCH; LlamaIndex's default is 10) -> "
    "PGVectorStore (its defaults: no HNSW index); it embeds its metadata too (file_path, header_path)",
    "cocoindex": "its text_embedding example (bench/incremental_peers.py): localfs **/*.md -> RecursiveSplitter "
    "(markdown, 600 bytes, about 144 cl100k tokens, overlap 0) -> SentenceTransformerEmbedder (memoized per "
    "text, dynamic batches of at most 64) -> postgres table (no vector index); a cold first update",
}


def importable(module: str) -> bool:
    """Whether a peer's package is installed (the bench extra), without importing it."""
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing
        return False


def reset_peer(url: str, work: Path) -> None:
    """Drop the peers' databases and state, so a peer run starts cold."""
    import psycopg

    from bench.incremental_peers import database_uri
    from bench.ingest_peers import LLAMA_DB

    with psycopg.connect(database_uri(url, "postgres"), autocommit=True) as conn:
        for name in (LLAMA_DB, "cocoindex"):
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    shutil.rmtree(work, ignore_errors=True)


def peer_ingest(peer: str, corpus: Path, url: str, work: Path, batch: int) -> tuple[float, dict, list[str]]:
    """Wall seconds of one `python -m bench.ingest_peers PEER`, its summary and the texts its model embedded."""
    reset_peer(url, work)
    env = dict(os.environ, HF_HUB_OFFLINE="1", COCOINDEX_DISABLE_USAGE_TRACKING="1")
    cmd = [sys.executable, "-m", "bench.ingest_peers", peer, str(corpus), "--url", url, "--work", str(work),
           "--batch", str(batch)]  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        sys.exit(f"{peer} failed with exit {proc.returncode}:\n{proc.stderr[-2000:]}")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    return wall, summary, json.loads((work / "texts.json").read_text())


def backends(wanted: list[str] | None) -> list[str]:
    """torch, and openvino where its runtime is installed (or the ones asked for)."""
    from pipeline.embed import installed

    if wanted:
        return wanted
    return ["torch", *(["openvino"] if installed("openvino") else [])]


HEADERS = ["", "chunks", "texts embedded", "wall s", "chunks/s", "model load s", "model encode s",
           "texts/s (model)", "outside the model", "run s", "embed stage s", "outside (run)"]  # fmt: skip


def row(label: str, fig: dict) -> list[str]:
    """One line of the table; the run-ledger columns are chunkyard's only."""
    wall, encode, run = fig["wall_s"], fig["model_encode_s"], fig.get("run_s")
    return [label, f"{fig['chunks']}", f"{fig['texts']}", f"{wall:.1f}", f"{fig['chunks'] / wall:.1f}",
            f"{fig['model_load_s']:.1f}", f"{encode:.1f}", f"{fig['texts'] / encode:.1f}",
            f"{100 * (1 - encode / wall):.0f}%", "-" if run is None else f"{run:.1f}",
            "-" if run is None else f"{fig['embed_stage_s']:.1f}",
            "-" if run is None else f"{100 * (1 - encode / run):.0f}%"]  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("corpus", nargs="?", type=Path, default=shared_data("fastapi-docs") / "0.140.0")
    ap.add_argument("--backend", action="append", choices=["torch", "openvino", "onnx"],
                    help="Embedding backends (repeatable); default torch, and openvino where installed.")  # fmt: skip
    ap.add_argument("--repeat", type=int, default=1, help="Timed runs per system (medians reported).")
    ap.add_argument("--peers", action=argparse.BooleanOptionalAction, default=True,
                    help="Also run LlamaIndex and CocoIndex where installed (default: yes).")  # fmt: skip
    ap.add_argument("--json", type=Path, help="Also write the figures here (e.g. bench/results/ingest-speed.json).")
    a = ap.parse_args()
    if not a.corpus.exists():
        sys.exit(f"no corpus at {a.corpus}: pass a folder or file")
    files = [p for p in sorted(a.corpus.rglob("*")) if p.is_file()] if a.corpus.is_dir() else [a.corpus]
    mb = sum(p.stat().st_size for p in files) / 1e6
    warm = next((p for p in files if p.suffix in (".md", ".txt", ".html")), files[0])  # the first text file
    batch = int(os.environ.get("CHUNKYARD_EMBED_BATCH_SIZE", "64"))
    peers = [p for p in PEERS if a.peers and importable(PEERS[p][1])]
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
            fig = {"system": f"chunkyard ({backend})", "files": len(files), "mb": round(mb, 2),
                   "chunks": summary["counts"]["chunks_written"], "texts": len(texts),
                   "wall_s": statistics.median(walls), "run_s": statistics.median(runs),
                   "embed_stage_s": statistics.median(embeds), "model_load_s": load, "model_encode_s": encode,
                   "summary": summary}  # fmt: skip
            fig["outside_wall"] = round(1 - encode / fig["wall_s"], 3)
            found.append(fig)
            rows.append(row(fig["system"], fig))
        if peers:  # one folder with the warm-up file: the peers read folders
            (data / "warm").mkdir(exist_ok=True)
            shutil.copy(warm, data / "warm" / warm.name)
        for peer in peers:
            peer_ingest(peer, data / "warm", url, data / peer, batch)  # imports, page cache: untimed
            walls, summary, texts = [], {}, []
            for i in range(a.repeat):
                wall, summary, texts = peer_ingest(peer, a.corpus, url, data / peer, batch)
                walls.append(wall)
                print(f"  {peer} run {i + 1}: {wall:.1f} s", file=sys.stderr, flush=True)
            load, encode = model_alone(texts, "torch", data, batch)
            fig = {"system": PEERS[peer][0], "files": len(files), "mb": round(mb, 2), "chunks": summary["rows"],
                   "texts": len(texts), "model_calls": summary["calls"], "wall_s": statistics.median(walls),
                   "model_load_s": load, "model_encode_s": encode}  # fmt: skip
            fig["outside_wall"] = round(1 - encode / fig["wall_s"], 3)
            found.append(fig)
            rows.append(row(fig["system"], fig))
    print(f"{a.corpus}: {len(files)} files, {mb:.2f} MB; batch {batch}; medians of {a.repeat} run(s)\n")
    print(table(HEADERS, rows))
    print("\nchunks: rows stored; texts embedded: what the model was asked (chunkyard: distinct texts, the cache's "
          "unit); model: all-MiniLM-L6-v2 from the local path for every system, alone on each system's own "
          f"texts in batches of {batch} (torch: sentence-transformers; openvino: chunkyard's export). The peers "
          "run sentence-transformers on torch: compare them with chunkyard (torch); OpenVINO is chunkyard's only.")  # fmt: skip
    for peer in PEERS:
        label = PEERS[peer][0]
        if peer in peers:
            print(f"\n{label}: {PEER_NOTES[peer].replace('BATCH', str(batch))}", end="")
        elif a.peers:
            print(f"\n{label}: skipped, `{PEERS[peer][1]}` is not installed (the bench extra)", end="")
    print()
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(found, indent=1, default=str))
        print(f"figures: {a.json}")


if __name__ == "__main__":
    main()
