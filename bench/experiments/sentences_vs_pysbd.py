"""How far chunkyard's English sentence splitter agrees with pysbd on the Chroma corpora.

    python -m bench.experiments.sentences_vs_pysbd                  # counts per corpus and 10 disagreements
    python -m bench.experiments.sentences_vs_pysbd --examples 40 --seed 3

Every corpus is normalized as bench/chunkers.py does (sections of at most 1024 cl100k tokens); both
splitters see one section at a time. A boundary is where a sentence starts, whitespace (and escaped line
breaks) skipped, so two splitters that keep the spaces between sentences on different sides agree; the
section's start is not counted. The reference is pysbd as chunkyard used it before (English rules, `clean=False`, its sentences
mapped back to offsets, a sentence that starts in lower case joined to the one before); "raw" counts
pysbd's own sentence starts without that join. Reproduced: pysbd's boundaries ours has too; missed: the
rest of them; extra: ours where pysbd has none. Times are CPU seconds of the splitting alone.
"""

from __future__ import annotations

import argparse
import random
import re
import time
from pathlib import Path

from bench.common import CORPORA, chroma_dir, load_corpus, table
from pipeline.chunkers import sentence
from pipeline.tokens import seed_tiktoken_cache

#: What may lie between two boundaries that count as one: whitespace and escaped line breaks ("\\n" in a
#: chat log's dump), which either side may keep with the sentence before.
_GAP = re.compile(r"(?:\s|\\[nrt])*")


def pysbd_starts(text: str, a: int, b: int, *, join_lower: bool) -> list[int]:
    """Where pysbd's sentences of [a, b) start (a excluded)."""
    out, cursor = [], a
    for s in sentence._pysbd(text[a:b], "en"):
        probe = s.strip()
        pos = text.find(probe, cursor, b) if probe else -1
        if pos < 0:
            continue
        if pos > (out[-1] if out else a) and not (join_lower and probe[0].islower()):
            out.append(pos)
        cursor = pos + len(probe)
    return out


def show(text: str, at: int, width: int = 70) -> str:
    """The text around a boundary, the boundary marked with ⟂, on one line."""
    left = text[max(0, at - width) : at].replace("\n", "⏎")
    right = text[at : at + width // 2].replace("\n", "⏎")
    return f"…{left}⟂{right}…"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=chroma_dir())
    ap.add_argument(
        "--examples", type=int, default=10, help="Disagreements to print (half missed, half extra)."
    )
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    seed_tiktoken_cache()
    rows, missed, extra = [], [], []
    totals = dict.fromkeys(("raw", "ref", "ours", "same", "ours_s", "pysbd_s", "mb"), 0.0)
    for corpus in CORPORA:
        doc = load_corpus(args.data / "corpora" / f"{corpus}.md", 1024)
        text = doc.text
        ours_s = pysbd_s = 0.0
        n = {"raw": 0, "ref": 0, "ours": 0, "same": 0}
        for sec in doc.sections:
            c0 = time.process_time()
            got = {x for x, _ in sentence.sentence_spans(text, sec.start, sec.end)}
            c1 = time.process_time()
            ref = set(pysbd_starts(text, sec.start, sec.end, join_lower=True))
            pysbd_s += time.process_time() - c1
            first = _GAP.match(text, sec.start).end()
            got = {_GAP.match(text, x).end() for x in got} - {first}
            ref = {_GAP.match(text, x).end() for x in ref} - {first}
            ours_s += c1 - c0
            n["raw"] += len(pysbd_starts(text, sec.start, sec.end, join_lower=False))
            n["ref"] += len(ref)
            n["ours"] += len(got)
            n["same"] += len(ref & got)
            missed += [(corpus, text, x) for x in sorted(ref - got)]
            extra += [(corpus, text, x) for x in sorted(got - ref)]
        mb = len(text.encode("utf-8")) / 1e6
        for k, v in n.items():
            totals[k] += v
        totals["ours_s"] += ours_s
        totals["pysbd_s"] += pysbd_s
        totals["mb"] += mb
        rows.append(_row(corpus, n, ours_s, pysbd_s, mb))
    n = {k: int(totals[k]) for k in ("raw", "ref", "ours", "same")}
    rows.append(_row("all", n, totals["ours_s"], totals["pysbd_s"], totals["mb"]))
    print(
        table(
            [
                "corpus",
                "pysbd raw",
                "pysbd",
                "ours",
                "reproduced",
                "missed",
                "extra",
                "ours MB/s",
                "pysbd MB/s",
            ],
            rows,
        )
    )
    rng = random.Random(args.seed)
    for name, found in (
        ("missed (pysbd cuts, ours does not)", missed),
        ("extra (ours cuts, pysbd does not)", extra),
    ):
        print(f"\n{name}: {len(found)}")
        for corpus, text, at in sorted(
            rng.sample(found, min(len(found), args.examples // 2)), key=lambda t: t[0]
        ):
            print(f"  {corpus:>18}  {show(text, at)}")


def _row(name: str, n: dict[str, int], ours_s: float, pysbd_s: float, mb: float) -> list[str]:
    same, ref = n["same"], n["ref"]
    return [
        name,
        str(n["raw"]),
        str(ref),
        str(n["ours"]),
        f"{same} ({100 * same / max(ref, 1):.1f}%)",
        str(ref - same),
        str(n["ours"] - same),
        f"{mb / max(ours_s, 1e-9):.3g}",
        f"{mb / max(pysbd_s, 1e-9):.3g}",
    ]


if __name__ == "__main__":
    main()
