"""Do the chunkers still cut the Chroma corpora as before? Snapshot every chunk, then compare.

    python -m bench.chunkers_same snapshot /tmp/before.json     # on the code before a change
    python -m bench.chunkers_same compare /tmp/before.json      # on the code after it: exit 1 on a change

Every chunk of every registered strategy (semantic excepted: it embeds) on the Chroma corpora at 128, 256
and 512 cl100k tokens, as (start, end, token count, context, metadata), and the sentences of the sentence
splitter over every section. A speed-up must leave all of it as it was.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.common import CORPORA, chroma_dir, load_corpus
from pipeline.chunkers import REGISTRY
from pipeline.config import _ADAPTER

BUDGETS = (128, 256, 512)


def snapshot(data: Path, kinds: list[str]) -> dict[str, list]:
    docs = {c: load_corpus(data / "corpora" / f"{c}.md", 1024) for c in CORPORA}
    out: dict[str, list] = {}
    for kind in kinds:
        for size in BUDGETS:
            chunker = REGISTRY[kind](_ADAPTER.validate_python({"kind": kind, "size": size}))
            for corpus, doc in docs.items():
                out[f"{kind}/{size}/{corpus}"] = [
                    [i, c.start, c.end, c.token_count, c.context, c.metadata]
                    for i, cs in chunker.chunk_document(doc)
                    for c in cs
                ]
    if "sentence" in kinds:
        from pipeline.chunkers.sentence import sentence_spans

        for corpus, doc in docs.items():
            out[f"sentences/{corpus}"] = [
                list(s) for sec in doc.sections for s in sentence_spans(doc.text, sec.start, sec.end)
            ]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("action", choices=["snapshot", "compare"])
    ap.add_argument("file", type=Path)
    ap.add_argument("--data", type=Path, default=chroma_dir())
    ap.add_argument("--only", action="append", help="Strategies (repeatable); default all but semantic.")
    args = ap.parse_args()
    kinds = args.only or [k for k in REGISTRY if k != "semantic"]
    now = snapshot(args.data, kinds)
    if args.action == "snapshot":
        args.file.write_text(json.dumps(now))
        print(f"{sum(map(len, now.values()))} chunks and sentences in {len(now)} runs -> {args.file}")
        return
    before = json.loads(args.file.read_text())
    bad = 0
    for key, items in now.items():
        old = before.get(key)
        if old is None:
            print(f"{key}: not in the snapshot")
            continue
        if old != items:
            bad += 1
            diff = next((k for k, (x, y) in enumerate(zip(old, items, strict=False)) if x != y), None)
            print(f"{key}: {len(old)} -> {len(items)} items, first difference at {diff}")
    total = sum(map(len, now.values()))
    print(f"{len(now) - bad} of {len(now)} runs the same ({total} chunks and sentences)")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
