"""The chunkers people use, scored in the same harness as chunkyard: same model, k, Postgres and SQL search.

    python -m bench.peers                      # chunkyard's default and every peer below, k=5 and budgets
    python -m bench.peers --only chunkyard-default --only semchunk-cl100k-200 --search hybrid
    python -m bench.peers --budget 256,512 --budget 4096   # other budgets (cl100k tokens of context)

Every configuration is scored at k and at budgets of 256, 512, 1024 and 2048 cl100k tokens (chunks in rank
order until the budget is spent, the last one cut: `chunkyard eval --budget`), under vector and hybrid
search; one table, one per-corpus table and one plot of recall against budget (bench/results/NAME-budget.png).

Peers return chunk texts; `locate_chunks` maps them back to corpus offsets, then `evaluate.spans_indexer`
embeds and stores them like any collection and `evaluate.evaluate_index` scores them. Chunks longer than the
model's input are left as the peer made them (the model truncates), as a user of that library would get.
Needs the bench extra: pip install -e '.[bench]'.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Callable

from bench.common import result_path
from bench.eval_chroma import (
    BUDGETS,
    add_budget_option,
    add_search_option,
    add_set_option,
    load_set,
    print_tables,
    reference_points,
)
from pipeline import evaluate as ev
from pipeline.config import Settings
from pipeline.embed.meta import model_path
from pipeline.tokens import seed_tiktoken_cache, tiktoken_encoding

Splitter = Callable[[str], list[str]]


# ------------------------------------------------------------------------------------------- peers


def _cl100k_len(text: str) -> int:
    return len(tiktoken_encoding("cl100k_base").encode(text, disallowed_special=()))


def langchain_recursive(size: int, overlap: int = 0, separators: list[str] | None = None) -> Splitter:
    """LangChain's RecursiveCharacterTextSplitter sized in cl100k (its documented tiktoken constructor)."""
    from langchain_text_splitters import RecursiveCharacterTextSplitter

    kw = {"separators": separators} if separators else {}
    sp = RecursiveCharacterTextSplitter(
        chunk_size=size, chunk_overlap=overlap, length_function=_cl100k_len, **kw
    )
    return sp.split_text


def langchain_token(size: int, overlap: int) -> Splitter:
    """LangChain's TokenTextSplitter on cl100k: the algorithm of Chroma's TokenText rows."""
    from langchain_text_splitters import TokenTextSplitter

    return TokenTextSplitter(encoding_name="cl100k_base", chunk_size=size, chunk_overlap=overlap).split_text


def chonkie_recursive(size: int | None = None) -> Splitter:
    """Chonkie's RecursiveChunker: its default (2048 characters) or `size` cl100k tokens."""
    from chonkie import RecursiveChunker

    ch = (
        RecursiveChunker()
        if size is None
        else RecursiveChunker(tokenizer=tiktoken_encoding("cl100k_base"), chunk_size=size)
    )
    return lambda text: [c.text for c in ch.chunk(text)]


def chonkie_semantic(size: int | None = None) -> Splitter:
    """Chonkie's SemanticChunker on the local MiniLM (its default model is not shipped offline)."""
    from chonkie import SemanticChunker
    from chonkie.embeddings import SentenceTransformerEmbeddings

    emb = SentenceTransformerEmbeddings(model_path())
    ch = (
        SemanticChunker(embedding_model=emb)
        if size is None
        else SemanticChunker(embedding_model=emb, chunk_size=size)
    )
    return lambda text: [c.text for c in ch.chunk(text)]


def semchunk_splitter(size: int, tokenizer: str = "cl100k") -> Splitter:
    """semchunk (it has no default size) counting cl100k tokens or the model's word pieces."""
    import semchunk

    if tokenizer == "cl100k":
        counter = tiktoken_encoding("cl100k_base")
    else:
        from pipeline.tokens import hf_tokenizer

        counter = hf_tokenizer()
    ch = semchunk.chunkerify(counter, size)
    return lambda text: list(ch(text))


def llama_sentence(size: int | None = None, overlap: int | None = None) -> Splitter:
    """LlamaIndex's SentenceSplitter: its default (1024 / 200 tokens) or the given size."""
    from llama_index.core.node_parser import SentenceSplitter

    kw = {}
    if size is not None:
        kw = {"chunk_size": size, "chunk_overlap": overlap or 0}
    return SentenceSplitter(**kw).split_text


#: chunkyard's own configurations, run through the pipeline (`chunkyard ingest`) beside the peers.
CHUNKYARD: dict[str, str] = {
    "chunkyard-default": "default",
    "chunkyard-recursive-200": "recursive:size=200,overlap=0",
    # the same, every file read as plain text (no headings): documents like contracts converted from PDF
    "chunkyard-default-text": "default:as=text",
    "chunkyard-recursive-200-text": "recursive:size=200,overlap=0,as=text",
}

#: Run only when asked for with --only (the plain-text reading of chunkyard's configurations).
OPTIONAL = {"chunkyard-default-text", "chunkyard-recursive-200-text"}

PEERS: dict[str, Callable[[], Splitter]] = {
    "langchain-recursive-cl100k-200": lambda: langchain_recursive(200),
    "chonkie-recursive-default": lambda: chonkie_recursive(),
    "chonkie-recursive-cl100k-200": lambda: chonkie_recursive(200),
    "chonkie-semantic-default": lambda: chonkie_semantic(),
    "chonkie-semantic-256": lambda: chonkie_semantic(256),
    "semchunk-cl100k-200": lambda: semchunk_splitter(200),
    "semchunk-model-254": lambda: semchunk_splitter(254, "model"),
    "llamaindex-sentence-default": lambda: llama_sentence(),
    "llamaindex-sentence-200": lambda: llama_sentence(200, 0),
}

#: Left out unless asked for with --only: Chonkie's SemanticChunker did not finish on 2 CPU cores in 25 minutes.
SLOW = {"chonkie-semantic-default", "chonkie-semantic-256"}

#: Controls: LangChain's own splitters configured as Chroma's published rows (Chroma's chunkers are copies of
#: them). They test the harness independently of chunkyard's chunkers.
CHROMA_SEPS = list(ev.CHROMA_SEPARATORS)
CONTROLS: dict[str, Callable[[], Splitter]] = {
    "Recursive 250/125": lambda: langchain_recursive(250, 125, CHROMA_SEPS),
    "TokenText 250/125": lambda: langchain_token(250, 125),
    "Recursive 250/0": lambda: langchain_recursive(250, 0, CHROMA_SEPS),
    "TokenText 250/0": lambda: langchain_token(250, 0),
    "Recursive 200/0": lambda: langchain_recursive(200, 0, CHROMA_SEPS),
    "TokenText 200/0": lambda: langchain_token(200, 0),
}


# -------------------------------------------------------------------------------- offsets from texts


def locate_chunks(text: str, chunks: list[str], *, name: str = "") -> list[ev.Span]:
    """Map chunk texts back to [start, end) ranges of `text`, in order, whitespace-tolerant."""
    out: list[ev.Span] = []
    prev_start = prev_end = 0
    for n, chunk in enumerate(chunks):
        core = chunk.strip()
        if not core:
            continue
        span = _find_exact(text, core, prev_start, prev_end, first=not out)
        if span is None:
            span = _find_fuzzy(text, core, prev_start)
        if span is None:
            raise ValueError(f"{name}: chunk {n} not found after offset {prev_start}: {core[:80]!r}")
        out.append(span)
        prev_start, prev_end = span
    return out


def _find_exact(text: str, core: str, prev_start: int, prev_end: int, *, first: bool) -> ev.Span | None:
    """A contiguous continuation (only whitespace skipped) if there is one, else the first match that overlaps."""
    after = text.find(core, prev_end)
    if after >= 0 and not text[prev_end:after].strip():
        return after, after + len(core)
    pos = text.find(core, 0 if first else prev_start + 1)
    if pos >= 0:
        return pos, pos + len(core)
    return None


_WS = re.compile(r"\s+")


def _find_fuzzy(text: str, core: str, start: int) -> ev.Span | None:
    """Whitespace changed (collapsed, stripped, re-joined) or bytes cut mid-character: match by a pattern."""
    parts = []
    for tok in _WS.split(core):
        if tok:
            parts.append(".{0,3}?".join(re.escape(p) for p in tok.split("\ufffd")))
    pat = re.compile(r"\s*".join(parts))
    m = pat.search(text, start)
    return (m.start(), m.end()) if m else None


# ---------------------------------------------------------------------------------------------- run


def run(
    names: list[str],
    table: dict[str, Callable[[], Splitter]],
    out_name: str,
    *,
    k: int,
    modes: tuple[str, ...],
    budgets: tuple[int, ...] = (),
    qset: str = "chroma",
) -> None:
    """Chunk with each peer (or chunkyard), index the spans, score; results saved after each configuration."""
    seed_tiktoken_cache()
    settings = Settings()
    corpora, questions, pub = load_set(qset)
    qvecs = ev.embed_questions(questions, settings)
    out = result_path(out_name)
    results: list[dict] = []
    for name in names:
        t0 = time.perf_counter()
        if name in CHUNKYARD:
            cfg = ev.parse_config(
                CHUNKYARD[name] + (",label=" if ":" in CHUNKYARD[name] else ":label=") + name
            )
            index, meta, t_chunk = ev.pipeline_indexer(cfg, corpora, settings), ev.config_meta(cfg), 0.0
        else:
            split = table[name]()
            spans = {
                cid: locate_chunks(c.text, split(c.text), name=f"{name}/{cid}") for cid, c in corpora.items()
            }
            t_chunk = time.perf_counter() - t0
            index = ev.spans_indexer(name, corpora, spans, settings)
            meta = {"peer": name, "chunk_seconds": round(t_chunk, 2)}
        res = ev.evaluate_index(
            name, index, corpora, questions, qvecs, settings=settings, k=k, modes=modes, meta=meta,
            budgets=budgets,
        )  # fmt: skip
        results += res
        doc = ev.report(
            results, corpora=corpora, questions=questions, k=k, settings=settings, budgets=budgets
        )
        ev.write_outputs(doc, out, reference=reference_points(pub))
        print(
            f"{name}: chunked in {t_chunk:.0f}s, total {time.perf_counter() - t0:.0f}s",
            file=sys.stderr,
            flush=True,
        )
    print_tables(results, out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="Peer name (repeatable).")
    ap.add_argument(
        "--controls", action="store_true", help="LangChain configured as Chroma's published rows."
    )
    ap.add_argument("--name", help="Results file name under bench/results/.")
    ap.add_argument("-k", type=int, default=5)
    add_search_option(ap, "hybrid and vector; with --controls: vector")
    add_budget_option(ap, f"{', '.join(map(str, BUDGETS))}; none with --controls")
    add_set_option(ap)
    a = ap.parse_args()
    table = CONTROLS if a.controls else PEERS
    known = list(table) if a.controls else [*CHUNKYARD, *table]
    names = a.only or [n for n in known if n not in SLOW and n not in OPTIONAL]
    unknown = [n for n in names if n not in known]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}; known: {', '.join(known)}")
    modes = tuple(a.search or (["vector"] if a.controls else ["hybrid", "vector"]))
    budgets = tuple(a.budget) if a.budget is not None else (() if a.controls else BUDGETS)
    name = a.name or ("controls" if a.controls else "peers") + ("" if a.qset == "chroma" else f"-{a.qset}")
    run(names, table, name, k=a.k, modes=modes, budgets=budgets, qset=a.qset)


if __name__ == "__main__":
    main()
