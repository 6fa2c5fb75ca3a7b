"""Question sets written here over public documents in ../shared, for checks beside Chroma's benchmark.

    python bench/eval_chroma.py target --set fastapi      # any harness run, on the FastAPI dev set

`bench/data/fastapi-spans.jsonl`: questions written for this repository over the FastAPI tutorial (release
0.140.0, top-level pages of docs/en/docs/tutorial; 41 files with real heading structure). Each answer is a
character span `[start, end, sha256 prefix]` of one page: the pages are never copied into the repository,
so the set is materialized at run time from ../shared (or $CHUNKYARD_FASTAPI_DIR), each span checked against
its hash. Some questions are short facts, some ask for whole lists or paragraphs (long, clause-like answers),
and some use a fixed template ("Highlight the parts (if any) of this documentation related to ...") whose
common words dominate a full-text ranking.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SETS = {
    "fastapi": ("fastapi-docs", "0.140.0/tutorial", ROOT / "bench" / "data" / "fastapi-spans.jsonl"),
}


def source_dir(name: str) -> Path:
    """The public documents a set is written over (never inside the repository)."""
    folder, sub, _ = SETS[name]
    env = os.environ.get(f"CHUNKYARD_{name.upper()}_DIR")
    return (Path(env) if env else ROOT.parent / "shared" / "bench" / folder) / sub


def materialize(name: str, dest: Path | None = None) -> tuple[Path, Path]:
    """A corpora folder and a questions JSONL (Chroma's fields) for `name`, built in a temporary folder."""
    src = source_dir(name)
    dest = dest or Path(tempfile.mkdtemp(prefix=f"chunkyard-{name}-"))
    corpora = dest / "corpora"
    corpora.mkdir(parents=True, exist_ok=True)
    rows = []
    for line in SETS[name][2].read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        text = (src / f"{rec['corpus_id']}.md").read_text(encoding="utf-8")
        refs = []
        for s, e, digest in rec["spans"]:
            content = text[s:e]
            if hashlib.sha256(content.encode()).hexdigest()[: len(digest)] != digest:
                raise SystemExit(f"{name}: {rec['corpus_id']}[{s}:{e}] changed; the set is for {src}")
            refs.append({"content": content, "start_index": s, "end_index": e})
        rows.append({"question": rec["question"], "references": refs, "corpus_id": rec["corpus_id"]})
    for p in sorted(src.glob("*.md")):
        shutil.copyfile(p, corpora / p.name)
    questions = dest / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return corpora, questions
