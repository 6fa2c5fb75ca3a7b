"""Every chunkyard strategy on the Chroma corpora, side by side with LangChain, Chonkie and semchunk.

    python -m bench.chunkers                          # size 256 cl100k, median of 3 rounds
    python -m bench.chunkers --size 200 --repeats 5 --only recursive --only langchain-recursive
    python -m bench.chunkers --profile markdown       # cProfile of one strategy's run, top functions

For each chunker and corpus: chunks, mean and max cl100k tokens, how many chunks are longer than the
embedding model reads (254 word pieces: the model silently truncates those), and throughput in MB/s
(UTF-8 bytes of the corpus / median time of the chunking alone), by this process's CPU time (steady on a
shared machine) and by wall time. Every chunker here runs on one core, except semantic, whose
embedding uses several torch threads (its CPU-time figure is then below its wall-time one). chunkyard's chunkers work on the
normalized document (sections from normalize, timed separately as "normalize"); the peers get the raw
corpus text, as their users give it. Peers are built fresh for every run so no memo carries over.
The peers do not check the model's limit; chonkie-recursive-limit is Chonkie held to it as chunkyard is
(each piece counted by tiktoken and by the model's tokenizer): "x best peer" compares with the fastest peer
as users run it, "x peer in limit" with that one.
Needs the bench extra: pip install -e '.[bench]'. The data is read in place, never copied.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import CORPORA, chroma_dir, load_corpus, table, timed
from pipeline.chunkers import REGISTRY
from pipeline.config import _ADAPTER
from pipeline.embed.meta import model_max_tokens
from pipeline.model import Document
from pipeline.tokens import counter, seed_tiktoken_cache, tiktoken_encoding

#: Strategies whose run is dominated by something else than chunking get fewer repeats by default.
SLOW = {"semantic", "chonkie-recursive-limit"}
#: Peers held to the model's limit as chunkyard's chunkers are ("x peer in limit" compares with them).
LIMITED = {"chonkie-recursive-limit"}

Run = Callable[[], list[str]]  # one timed chunking run of one corpus -> chunk texts


# ------------------------------------------------------------------------------------------- peers


def peer_factories(size: int) -> dict[str, Callable[[], Callable[[str], list[str]]]]:
    """name -> a factory of a fresh splitter (text -> chunk texts) at `size` cl100k tokens, no overlap."""
    enc = tiktoken_encoding("cl100k_base")

    def langchain() -> Callable[[str], list[str]]:
        from langchain_text_splitters import RecursiveCharacterTextSplitter

        return RecursiveCharacterTextSplitter.from_tiktoken_encoder(
            encoding_name="cl100k_base", chunk_size=size, chunk_overlap=0
        ).split_text

    def chonkie() -> Callable[[str], list[str]]:
        from chonkie import RecursiveChunker

        ch = RecursiveChunker(tokenizer=enc, chunk_size=size)
        return lambda text: [c.text for c in ch.chunk(text)]

    def semchunk() -> Callable[[str], list[str]]:
        import semchunk as sc

        ch = sc.chunkerify(enc, size)
        return lambda text: list(ch(text))

    def chonkie_limited() -> Callable[[str], list[str]]:
        # held to chunkyard's guarantees: every piece within `size` cl100k tokens AND within the model's
        # limit, each counted by both tokenizers (what a Chonkie user would write to keep the model's limit)
        from chonkie import RecursiveChunker

        model, limit = counter("model"), model_max_tokens()

        def count(text: str) -> int:  # <= size exactly when both counts are within their limits
            return max(len(enc.encode_ordinary(text)), model.count(text) + size - limit)

        ch = RecursiveChunker(tokenizer=count, chunk_size=size)
        return lambda text: [c.text for c in ch.chunk(text)]

    return {
        "langchain-recursive": langchain,
        "chonkie-recursive": chonkie,
        "semchunk": semchunk,
        "chonkie-recursive-limit": chonkie_limited,
    }


# ------------------------------------------------------------------------------------------ corpora



def ours(kind: str, size: int, doc: Document) -> Run:
    """One run of a chunkyard strategy over every section of the document (a fresh chunker).

    The tokenizers and the span indexer's table over their vocabularies are loaded once per process (as
    the peers' tiktoken encoding is); the texts counted so far are forgotten, so every run starts cold.
    """
    chunker = REGISTRY[kind](_ADAPTER.validate_python({"kind": kind, "size": size}))
    if chunker.indexer is not None:
        chunker.indexer.clear_memo()

    def run() -> list[str]:
        return [c.text for _, cs in chunker.chunk_document(doc) for c in cs]

    return run



# ------------------------------------------------------------------------------------------- report


def stats(chunks: list[str]) -> dict[str, float]:
    tok, model = counter("cl100k_base"), counter("model")
    counts = [tok.count(c) for c in chunks]
    limit = model_max_tokens()
    over = sum(n > limit for n in model.count_many(chunks))  # type: ignore[attr-defined]
    return {
        "chunks": len(chunks),
        "mean": statistics.fmean(counts) if counts else 0.0,
        "max": max(counts, default=0),
        "over": over,
    }



def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=chroma_dir())
    ap.add_argument("--size", type=int, default=256, help="Budget in cl100k tokens for every chunker.")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--slow-repeats", type=int, default=1, help="Repeats for the slow ones (SLOW: semantic embeds on CPU).")
    ap.add_argument("--only", action="append", help="Chunker names to run (repeatable).")
    ap.add_argument("--profile", metavar="NAME", help="cProfile one chunker over all corpora instead.")
    args = ap.parse_args()

    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one core for every chunker
    seed_tiktoken_cache()
    paths = {name: args.data / "corpora" / f"{name}.md" for name in CORPORA}
    texts = {name: p.read_text(encoding="utf-8") for name, p in paths.items()}
    nbytes = {name: len(t.encode("utf-8")) for name, t in texts.items()}
    t0 = time.process_time()
    docs = {name: load_corpus(p, 1024) for name, p in paths.items()}
    norm_s = time.process_time() - t0
    peers = peer_factories(args.size)
    names = [*REGISTRY, *peers]
    if args.only:
        names = [n for n in names if n in args.only]

    def maker(name: str, corpus: str) -> Callable[[], Run]:
        if name in peers:

            def make() -> Run:
                split = peers[name]()
                return lambda: split(texts[corpus])

            return make
        return lambda: ours(name, args.size, docs[corpus])

    if args.profile:
        prof = cProfile.Profile()
        runs = [maker(args.profile, c)() for c in CORPORA]
        prof.enable()
        for run in runs:
            run()
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        return

    total_mb = sum(nbytes.values()) / 1e6
    print(
        f"Chroma corpora: {', '.join(CORPORA)} ({total_mb:.2f} MB); budget {args.size} cl100k, no overlap; "
        f"median of {args.repeats} interleaved rounds ({args.slow_repeats} for {', '.join(sorted(SLOW))}); "
        f"normalize (all corpora, once): {norm_s:.2f} s CPU = {total_mb / norm_s:.2f} MB/s\n"
    )
    # Rounds: every chunker once per round, so a change in the machine's load hits all of them alike
    # (the ratios to the peers are what to read); the figures are medians over the rounds.
    cpu_s: dict[tuple[str, str], list[float]] = {}
    wall_s: dict[tuple[str, str], list[float]] = {}
    outs: dict[tuple[str, str], list[str]] = {}
    for rnd in range(args.repeats):
        for name in names:
            if name in SLOW and rnd >= args.slow_repeats:
                continue
            for corpus in CORPORA:
                c, w, out = timed(maker(name, corpus), 1)
                cpu_s.setdefault((name, corpus), []).append(c)
                wall_s.setdefault((name, corpus), []).append(w)
                outs[(name, corpus)] = out
        print(f"  round {rnd + 1} of {args.repeats} done", file=sys.stderr, flush=True)
    mbps: dict[str, float] = {}
    rows, per_corpus = [], []
    for name in names:
        cpu = sum(statistics.median(cpu_s[(name, c)]) for c in CORPORA)
        wall = sum(statistics.median(wall_s[(name, c)]) for c in CORPORA)
        mbps[name] = total_mb / cpu
        chunks = [t for c in CORPORA for t in outs[(name, c)]]
        st = stats(chunks)
        rows.append((name, st, cpu, wall))
        per_corpus.append(
            [name]
            + [
                f"{len(outs[(name, c)])} @ {nbytes[c] / 1e6 / statistics.median(cpu_s[(name, c)]):.3g}"
                for c in CORPORA
            ]
        )
    # the fastest peer as users run it, and the fastest held to the model's limit as chunkyard is
    best_peer = max((mbps[n] for n in names if n in peers and n not in LIMITED), default=None)
    best_limited = max((mbps[n] for n in names if n in LIMITED), default=None)
    totals = []
    for name, st, _cpu, wall in rows:
        totals.append(
            [
                name,
                "peer" if name in peers else "chunkyard",
                str(st["chunks"]),
                f"{st['mean']:.1f}",
                str(st["max"]),
                str(st["over"]),
                f"{mbps[name]:.3g}",
                f"{total_mb / wall:.3g}",
                f"{mbps[name] / best_peer:.2f}" if best_peer else "-",
                f"{mbps[name] / best_limited:.2f}" if best_limited else "-",
                f"{mbps[name] / mbps['recursive']:.2f}" if "recursive" in mbps else "-",
            ]
        )
    print(
        table(
            [
                "chunker",
                "from",
                "chunks",
                "mean tok",
                "max tok",
                f"> {model_max_tokens()} wp",
                "MB/s CPU",
                "MB/s wall",
                "x best peer",
                "x peer in limit",
                "x recursive",
            ],
            totals,
        )
    )
    print("\nPer corpus: chunks @ MB/s (CPU time)\n")
    print(table(["chunker", *CORPORA], per_corpus))


if __name__ == "__main__":
    main()
