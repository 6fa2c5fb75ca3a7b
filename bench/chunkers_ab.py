"""Chunker speed of the working tree against a git revision and Chonkie, in one process, alternating.

    python -m bench.chunkers_ab --base HEAD --only recursive --only markdown --only fixed --rounds 9

On a shared machine two runs of bench/chunkers.py minutes apart can differ by a third; alternating the two
versions of the code and Chonkie corpus by corpus, in one process, lets a load change hit all three alike.
The revision's `pipeline` package is extracted (`git archive`) into a temporary folder as `pipeline_base`,
so both versions are imported side by side; each run starts cold (a fresh chunker, the span index's memos
cleared), as in bench/chunkers.py. Figures: the sum over the Chroma corpora of each one's median CPU time.
Needs the bench extra (Chonkie). The data is read in place, never copied.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import io
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from types import ModuleType

from bench.common import CORPORA, ROOT, chroma_dir


def base_package(rev: str, dest: Path) -> None:
    """`pipeline` at `rev`, importable as `pipeline_base` from `dest`."""
    data = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "pipeline"], check=True, capture_output=True
    )
    with tarfile.open(fileobj=io.BytesIO(data.stdout)) as tar:
        tar.extractall(dest, filter="data")
    (dest / "pipeline").rename(dest / "pipeline_base")
    for path in (dest / "pipeline_base").rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        path.write_text(re.sub(r"\b(from|import) pipeline\b", r"\1 pipeline_base", text), encoding="utf-8")


def load_base(dest: Path) -> None:
    """Import the extracted `pipeline_base` from `dest` by its location (sys.path stays as it is)."""
    pkg = dest / "pipeline_base"
    spec = importlib.util.spec_from_file_location(
        "pipeline_base", pkg / "__init__.py", submodule_search_locations=[str(pkg)]
    )
    assert spec is not None and spec.loader is not None, pkg
    module = importlib.util.module_from_spec(spec)
    sys.modules["pipeline_base"] = module
    spec.loader.exec_module(module)


def modules(name: str) -> tuple[ModuleType, ModuleType, ModuleType, ModuleType]:
    """The chunker registry, config, normalize and sources modules of one package."""
    return tuple(
        importlib.import_module(f"{name}.{m}") for m in ("chunkers", "config", "normalize", "sources")
    )  # type: ignore[return-value]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", default="HEAD", help="The git revision to compare the working tree with.")
    ap.add_argument("--only", action="append", help="Chunker kinds (repeatable); default recursive.")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--data", type=Path, default=chroma_dir())
    args = ap.parse_args()
    kinds = args.only or ["recursive"]

    tmp = Path(tempfile.mkdtemp(prefix="chunkyard-ab-"))
    base_package(args.base, tmp)
    load_base(tmp)
    from chonkie import RecursiveChunker

    from pipeline.tokens import seed_tiktoken_cache, tiktoken_encoding

    seed_tiktoken_cache()
    paths = [args.data / "corpora" / f"{c}.md" for c in CORPORA]
    texts = [p.read_text(encoding="utf-8") for p in paths]
    versions = {}
    for tag, pkg in (("base", "pipeline_base"), ("tree", "pipeline")):
        chunkers, config, normalize, sources = modules(pkg)
        docs = []
        for p in paths:
            kind = sources.detect(p)
            src = sources.SourceFile(p, sources.source_uri(p), kind[0], kind[1])
            docs.append(normalize.normalize(src, p.read_bytes(), section_tokens=1024))
        versions[tag] = (chunkers.REGISTRY, config._ADAPTER, docs)
    enc = tiktoken_encoding("cl100k_base")

    def once(tag: str, kind: str, i: int) -> float:
        if tag == "chonkie":
            ch = RecursiveChunker(tokenizer=enc, chunk_size=args.size)
            t0 = time.process_time()
            ch.chunk(texts[i])
            return time.process_time() - t0
        registry, adapter, docs = versions[tag]
        chunker = registry[kind](adapter.validate_python({"kind": kind, "size": args.size}))
        if chunker.indexer is not None:
            chunker.indexer.clear_memo()
        t0 = time.process_time()
        chunker.chunk_document(docs[i])
        return time.process_time() - t0

    tags = ("base", "tree", "chonkie")
    times: dict[tuple[str, str, int], list[float]] = {}
    for r in range(args.rounds):
        for i in range(len(CORPORA)):
            for kind in kinds:
                for tag in tags if r % 2 == 0 else tags[::-1]:
                    times.setdefault((kind, tag, i), []).append(once(tag, kind, i))
        print(f"  round {r + 1} of {args.rounds} done", file=sys.stderr, flush=True)
    print(
        f"CPU seconds over the Chroma corpora (sum of per-corpus medians of {args.rounds} rounds), {args.size} cl100k"
    )
    print("| chunker | base | tree | Chonkie | base x Chonkie | tree x Chonkie | tree time / base |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind in kinds:
        t = {tag: sum(statistics.median(times[(kind, tag, i)]) for i in range(len(CORPORA))) for tag in tags}
        print(f"| {kind} | {t['base']:.3f} | {t['tree']:.3f} | {t['chonkie']:.3f} | {t['chonkie'] / t['base']:.2f} "
              f"| {t['chonkie'] / t['tree']:.2f} | {t['tree'] / t['base']:.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
