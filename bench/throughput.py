"""Throughput in one run: embedding backends, their Chroma recall, start-up times, memory by corpus size.

    nice -n 5 python -m bench.throughput                       # all but recall (about 10 minutes on 2 cores)
    nice -n 5 python -m bench.throughput --recall              # + `chunkyard eval` per backend (slow)
    python -m bench.throughput --only embed --chunks 2952 --repeat 5
    python -m bench.throughput --only startup --only server --only rss

embed: the default profile's chunks of the Chroma corpora (the same chunks for every backend), embedded in
rounds that alternate the backends (a busy machine slows them alike); chunks/s is the median round, the
ratio is against torch, cosine is to torch's vectors. Export time is not counted (done once per machine).
recall: `chunkyard eval -s default --search hybrid` per backend (recall and IoU x100).
startup: wall time of `chunkyard --help`, `status` and `search` (medians of --runs), search per backend.
server: a no-change `chunkyard ingest ./examples/docs` through Prefect with the local server running, and
when its first task started after the command was launched (from the server's own task-run records).
rss: peak RSS of an ingest (`--no-prefect`, one process) of 1x, 4x and 16x the Chroma corpora, each copy's
lines marked so nothing is deduplicated, the model replaced by a hash stand-in (bench/_standin.py), in a
throwaway data directory and Postgres of its own (the stand-in's vectors never reach a real cache).
Runs against CHUNKYARD_DATA_DIR (set it to a scratch folder); the embedded Postgres is started there. The
Chroma data: ../shared/bench/chroma, or CHUNKYARD_CHROMA_DIR (as every bench script).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, chroma_dir

CHROMA = chroma_dir()
_SCRIPT = Path(sys.executable).parent / "chunkyard"
CLI = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "pipeline.cli"]
PARTS = ("embed", "recall", "startup", "server", "rss")


# ------------------------------------------------------------------------------------------- embed


def chroma_chunks(limit: int) -> list[str]:
    """What the default profile embeds for the Chroma corpora, evenly sampled down to `limit` chunks."""
    from pipeline.config import DEFAULT_MODEL, Profile
    from pipeline.jobs import preview_chunks

    texts = []
    for p in sorted((CHROMA / "corpora").glob("*.md")):
        texts += [c.embed_text for _, c in preview_chunks(p, Profile(), model=DEFAULT_MODEL)[2]]
    return texts[:: max(1, len(texts) // limit)][:limit]


def bench_embed(chunks: int, repeat: int) -> list[dict]:
    """chunks/s per installed backend on the same chunks, rounds alternating; cosine to torch."""
    import numpy as np

    from pipeline.config import DEFAULT_MODEL
    from pipeline.embed import embedding_key, get_embedder, installed

    texts = chroma_chunks(chunks)
    backends = [b for b in ("torch", "openvino", "onnx") if installed(b)]
    models = {b: get_embedder(embedding_key(DEFAULT_MODEL, b)) for b in backends}  # exports if needed
    vecs, times = {}, {b: [] for b in backends}
    for m in models.values():
        m.encode(texts[:32])  # warm-up: first-shape compilation, thread pools
    for _ in range(repeat):
        for b, m in models.items():
            t = time.perf_counter()
            vecs[b] = m.encode(texts)
            times[b].append(time.perf_counter() - t)
    base = statistics.median(times["torch"])
    rows = []
    for b in backends:
        cos = np.sum(vecs[b] * vecs["torch"], axis=1)
        med = statistics.median(times[b])
        rows.append({"backend": b, "key": models[b].name, "chunks": len(texts),
                     "chunks_per_s": len(texts) / med, "x_torch": base / med,
                     "cos_mean": float(cos.mean()), "cos_min": float(cos.min()),
                     "rounds_s": [round(t, 2) for t in times[b]]})  # fmt: skip
    return rows


def bench_recall() -> list[dict]:
    """Chroma recall / IoU under hybrid search, one `chunkyard eval` per backend."""
    rows = []
    for b in ("torch", "openvino"):
        out = Path(tempfile.mkdtemp(prefix="cy-eval-")) / f"eval-{b}"
        data = ["--corpora", str(CHROMA / "corpora"), "--questions", str(CHROMA / "questions_df.csv")]
        cmd = [*CLI, "eval", *data, "-s", "default", "--search", "hybrid", "-o", str(out)]
        subprocess.run(cmd, check=True, env={**os.environ, "CHUNKYARD_EMBED_BACKEND": b}, capture_output=True)
        r = json.loads(out.with_suffix(".json").read_text())["results"][0]
        rows.append({"backend": b, "recall": r["recall"]["mean"] * 100, "iou": r["iou"]["mean"] * 100})
    return rows


# ------------------------------------------------------------------------------------------ startup


def timed(cmd: list[str], runs: int, env: dict | None = None) -> float:
    """Median wall seconds of a command (its output discarded; a failure is an error)."""
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True, env={**os.environ, **(env or {})})
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def ensure_examples(backend: str, collection: str) -> None:
    """The sample folder ingested (without Prefect) into a collection with one backend's vectors."""
    cmd = [*CLI, "ingest", str(ROOT / "examples" / "docs"), "--no-prefect", "-c", collection]
    subprocess.run(
        cmd, check=True, capture_output=True, env={**os.environ, "CHUNKYARD_EMBED_BACKEND": backend}
    )


def bench_startup(runs: int) -> list[dict]:
    """Medians of --help, status and search (one collection per backend, searched with its own)."""
    from pipeline.embed import installed

    subprocess.run([*CLI, "db", "start"], check=True, capture_output=True)
    rows = [{"command": "chunkyard --help", "s": timed([*CLI, "--help"], runs)},
            {"command": "chunkyard status", "s": timed([*CLI, "status"], runs)}]  # fmt: skip
    for b in [b for b in ("openvino", "torch") if installed(b)]:
        ensure_examples(b, f"bench-{b}")
        q = [*CLI, "search", "how do I rotate the API keys?", "-k", "3", "-c", f"bench-{b}"]
        rows.append({"command": f"chunkyard search (hybrid, {b} collection)", "s": timed(q, runs)})
    q = [*CLI, "search", "rotate API keys", "-k", "3", "--mode", "fulltext", "-c", "bench-torch"]
    rows.append({"command": "chunkyard search --mode fulltext", "s": timed(q, runs)})
    return rows


def bench_server(runs: int) -> list[dict]:
    """No-change ingests through Prefect on the local server: wall time and launch-to-first-task."""
    import urllib.request

    from flows import server
    from pipeline.config import Settings

    url = server.start(Settings().data_dir)
    docs = str(ROOT / "examples" / "docs")
    subprocess.run([*CLI, "ingest", docs], check=True, capture_output=True)  # stored once: the rest no-change
    walls, first = [], []
    for _ in range(runs):
        t0, p0 = time.time(), time.perf_counter()
        proc = subprocess.run([*CLI, "ingest", docs, "--json"], check=True, capture_output=True, text=True)
        walls.append(time.perf_counter() - p0)
        run_id = json.loads(proc.stdout)["flow_run_id"]
        body = json.dumps({"flow_runs": {"id": {"any_": [run_id]}}}).encode()
        req = urllib.request.Request(f"{url}/task_runs/filter", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - the local server
            starts = [r["start_time"] for r in json.load(resp) if r.get("start_time")]
        from datetime import datetime

        first.append(min(datetime.fromisoformat(s).timestamp() for s in starts) - t0)
    return [{"what": "no-change ingest ./examples/docs, local server", "s": statistics.median(walls),
             "first_task_s": statistics.median(first), "runs": [round(w, 2) for w in walls]}]  # fmt: skip


# ---------------------------------------------------------------------------------------------- rss


def bench_rss(scales: list[int]) -> list[dict]:
    """Peak RSS of an ingest of N copies of the Chroma corpora (stand-in model), each in a fresh process."""
    rows = []
    for n in scales:
        with tempfile.TemporaryDirectory(prefix="cy-rss-") as tmp:
            folder = Path(tmp)
            (folder / "corpus").mkdir()
            for i in range(n):
                for p in sorted((CHROMA / "corpora").glob("*.md")):
                    lines = p.read_text(encoding="utf-8").splitlines()
                    marked = [f"{ln} ({i})" if ln.strip() and not ln.startswith("#") else ln for ln in lines]
                    (folder / "corpus" / f"{p.stem}-{i}.md").write_text("\n".join(marked), encoding="utf-8")
            mb = sum(f.stat().st_size for f in (folder / "corpus").iterdir()) / 1e6
            cmd = [sys.executable, "-m", "bench._standin", str(folder / "corpus"), f"rss-{n}x"]
            env = {k: v for k, v in os.environ.items() if k != "CHUNKYARD_DATABASE_URL"}
            env["CHUNKYARD_DATA_DIR"] = str(folder / "data")  # its own Postgres: stand-in vectors stay there
            out = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, cwd=ROOT).stdout)
            rows.append({"scale": f"{n}x", "mb": round(mb, 1), **out})
    return rows


# -------------------------------------------------------------------------------------------- main


def table(title: str, rows: list[dict]) -> None:
    """A markdown table of rows (floats rounded)."""
    if not rows:
        return
    cols = list(rows[0])
    print(f"\n### {title}\n\n| " + " | ".join(cols) + " |\n|" + " --- |" * len(cols))
    for r in rows:
        vals = [f"{v:.3f}" if isinstance(v, float) and abs(v) < 10 else
                f"{v:.1f}" if isinstance(v, float) else str(v) for v in r.values()]  # fmt: skip
        print("| " + " | ".join(vals) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", action="append", choices=PARTS, help="Run only these parts (repeatable).")
    ap.add_argument("--recall", action="store_true", help="Also run the Chroma eval per backend (slow).")
    ap.add_argument("--chunks", type=int, default=600, help="Chunks embedded per round.")
    ap.add_argument("--repeat", type=int, default=3, help="Embedding rounds per backend.")
    ap.add_argument("--runs", type=int, default=5, help="Runs per start-up figure (the median is shown).")
    ap.add_argument("--scales", type=int, nargs="+", default=[1, 4, 16], help="Corpus copies for rss.")
    ap.add_argument("--json", type=Path, help="Also write every figure here.")
    a = ap.parse_args()
    parts = a.only or [p for p in PARTS if p != "recall" or a.recall]
    if not (CHROMA / "corpora").is_dir() and {"embed", "recall", "rss"} & set(parts):
        sys.exit(f"no Chroma corpora in {CHROMA}: set CHUNKYARD_CHROMA_DIR to the folder with corpora/")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    print(f"# chunkyard throughput ({os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    found: dict[str, list[dict]] = {}
    steps = {"embed": lambda: bench_embed(a.chunks, a.repeat), "recall": bench_recall,
             "startup": lambda: bench_startup(a.runs), "server": lambda: bench_server(a.runs),
             "rss": lambda: bench_rss(a.scales)}  # fmt: skip
    for part in parts:
        found[part] = steps[part]()
        table(part, found[part])
    if a.json:
        a.json.write_text(json.dumps(found, indent=1))


if __name__ == "__main__":
    main()
