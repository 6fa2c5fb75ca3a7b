"""What the optional reranker (CHUNKYARD_RERANK_MODEL, pipeline/rerank.py) costs per query.

    python -m bench.rerank_cost                 # 10 questions x 3 rounds, k = 5, CPU
    python -m bench.rerank_cost --rounds 5 --threads 2

The repository's docs/ and examples/docs are ingested into a throwaway embedded Postgres, then the same
questions go through `pipeline.search.search` (hybrid, k = 5, and a 1,024-token context) without a reranker
and with two cross-encoders built here, never downloaded: a tiny BERT (1 layer, hidden 16: the harness's
own cost) and a realistic-size one, a BertForSequenceClassification initialised from the shipped
all-MiniLM-L6-v2 weights (6 layers, hidden 384, the size of the common ms-marco-MiniLM-L6 rerankers; its
one-logit head is random, so it measures cost, not quality), each at 30 and 50 candidates. Reported: the
median milliseconds per query over every question and round (the model loaded and warmed first; its load
time on its own), and the median added by reranking.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench.common import ROOT, table

QUESTIONS = [
    "How do I rotate the API keys?",
    "Which embedding model is used by default?",
    "What happens when I edit one paragraph of a long document?",
    "How are sections returned whole?",
    "How does hybrid search mix BM25 and cosine scores?",
    "Can several workers ingest into the same collection?",
    "How do I filter a search by metadata?",
    "What does a context budget of tokens return?",
    "How is retrieval quality of a live collection evaluated?",
    "Which languages does full-text search stem?",
]


def build_models(folder: Path) -> dict[str, str]:
    """The two cross-encoders, saved as CrossEncoder folders under `folder`."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification, BertTokenizerFast

    from pipeline.embed.meta import model_path

    torch.manual_seed(0)
    minilm_raw = folder / "minilm-raw"
    base = model_path()
    BertForSequenceClassification.from_pretrained(base, num_labels=1).save_pretrained(minilm_raw)
    AutoTokenizer.from_pretrained(base).save_pretrained(minilm_raw)
    tiny_raw = folder / "tiny-raw"
    tiny_raw.mkdir()
    words = sorted({w.strip("?.,").lower() for q in QUESTIONS for w in q.split()})
    (tiny_raw / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tok = BertTokenizerFast(vocab_file=str(tiny_raw / "vocab.txt"), do_lower_case=True)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=512, num_labels=1)  # fmt: skip
    BertForSequenceClassification(cfg).save_pretrained(tiny_raw)
    tok.save_pretrained(tiny_raw)
    out = {}
    for name, raw in (("tiny BERT (1x16)", tiny_raw), ("MiniLM-L6 size (6x384)", minilm_raw)):
        dest = folder / raw.name.replace("-raw", "")
        CrossEncoder(str(raw), device="cpu", local_files_only=True).save(str(dest))
        out[name] = str(dest)
    return out


def per_query_ms(configs: dict[str, object], *, rounds: int, budget: int | None) -> dict[str, list[float]]:
    """Milliseconds of every (round, question) search per configuration, the configurations interleaved
    question by question (a busy machine slows them alike), after one warm-up search each."""
    from pipeline.search import search

    for settings in configs.values():
        search(QUESTIONS[0], settings=settings, k=5, budget=budget)
    out: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(rounds):
        for q in QUESTIONS:
            for name, settings in configs.items():
                t0 = time.perf_counter()
                search(q, settings=settings, k=5, budget=budget)
                out[name].append((time.perf_counter() - t0) * 1000)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="Times every question is asked per row.")
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default).")
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("CHUNKYARD_EMBED_BACKEND", "torch")
    import torch

    from pipeline import db
    from pipeline.config import Settings
    from pipeline.ingest import run_ingest
    from pipeline.rerank import cross_encoder

    if args.threads:
        torch.set_num_threads(args.threads)
    scratch = Path(tempfile.mkdtemp(prefix="cy-rr-"))  # short: the server's socket lives under it
    try:
        url = db.start_embedded(scratch / "pgdata")
        settings = Settings(database_url=url, data_dir=scratch, device="cpu")
        run_ingest([ROOT / "docs", ROOT / "examples" / "docs"], settings=settings, collection="default")
        with db.connection(url) as conn:
            n_chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        models = build_models(scratch / "models")
        loads, configs = {}, {("off", "-"): settings}
        for name, path in models.items():
            t0 = time.perf_counter()
            cross_encoder(path, device="cpu")
            loads[name] = f"{(time.perf_counter() - t0) * 1000:.0f}"
            for n in (30, 50):
                configs[(name, str(n))] = settings.model_copy(update={"rerank_model": path, "rerank_candidates": n})
        rows = []
        for budget in (None, 1024):
            what = "k = 5" if budget is None else f"context {budget} tokens"
            ms = {c: statistics.median(t) for c, t in per_query_ms(configs, rounds=args.rounds, budget=budget).items()}
            base = ms[("off", "-")]
            for (name, n), m in ms.items():
                added = "-" if name == "off" else f"{m - base:+.1f}"
                rows.append([what, name, n, loads.get(name, "-") if budget is None else "-", f"{m:.1f}", added])
        print(f"{n_chunks} chunks; {len(QUESTIONS)} questions x {args.rounds} rounds, hybrid; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU\n")  # fmt: skip
        print(table(["search", "reranker", "candidates", "load ms", "median ms/query", "added ms"], rows))
    finally:
        db.stop_embedded(scratch / "pgdata")
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
