"""Experiment: embed each chunk with its neighbouring text, score only the chunk's own span.

    python -m bench.experiments.eval_window -s 'recursive:size=128,overlap=0,context=false' --side 0 --side 64 --fill

Chunks come from chunkyard's own chunker (normalize + router, as `run_ingest` makes them); the embedded
text of a span grows by up to N model word pieces on each side (`--fill`: as much as the model reads).
It answers one question before anything is built into the chunkers: does a small span with a larger
embedding window retrieve better than the span alone?
"""

from __future__ import annotations

import argparse
import sys
import time

from bench.common import chroma_dir, result_path
from bench.eval_chroma import published, reference_points
from pipeline import evaluate as ev
from pipeline.chunkers.router import Router
from pipeline.config import Settings
from pipeline.embed.meta import model_max_tokens
from pipeline.normalize import normalize
from pipeline.sources import SourceFile, source_uri
from pipeline.tokens import hf_tokenizer


def chunk_spans(cfg: ev.EvalConfig, corpora: dict[str, ev.Corpus]) -> dict[str, list[ev.Span]]:
    """Spans of every corpus as the pipeline cuts them (text type, the profile's sections)."""
    router = Router(cfg.profile, model_limit=cfg.model_limit)
    out = {}
    for cid, c in corpora.items():
        src = SourceFile(c.path, source_uri(c.path), "text")
        doc = normalize(src, c.path.read_bytes(), section_tokens=cfg.profile.section_tokens_for("text"))
        if doc.text != c.text:
            raise SystemExit(f"{cid}: normalization changes this corpus; the experiment needs raw offsets")
        chunker = router.chunker_for(doc.doc_type)
        out[cid] = [(ch.start, ch.end) for _, chs in chunker.chunk_document(doc) for ch in chs]
    return out


def window(text: str, s: int, e: int, side: int | None) -> str:
    """text[s:e] with up to `side` word pieces before and after (None: fill the model's input)."""
    tok = hf_tokenizer()
    own = len(tok(text[s:e], add_special_tokens=False)["input_ids"])
    room = max(model_max_tokens() - own, 0)
    per_side = room // 2 if side is None else min(side, room // 2)
    if per_side <= 0:
        return text[s:e]
    before = text[max(0, s - per_side * 8) : s]
    after = text[e : e + per_side * 8]
    ob = tok(before, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    oa = tok(after, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    a = ob[-per_side][0] if len(ob) >= per_side else 0
    b = oa[per_side - 1][1] if len(oa) >= per_side else len(after)
    return before[a:] + text[s:e] + after[:b]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-s", "--spec", required=True, help="chunker spec, as for chunkyard eval")
    ap.add_argument("--side", type=int, action="append", default=[], help="word pieces per side (repeatable)")
    ap.add_argument("--fill", action="store_true", help="also: fill the model's input")
    ap.add_argument("--name", default="window")
    ap.add_argument("-k", type=int, default=5)
    a = ap.parse_args()
    data = chroma_dir()
    settings = Settings()
    corpora = ev.load_corpora(data / "corpora")
    questions = ev.load_questions(data / "questions_df.csv", corpora)
    qvecs = ev.embed_questions(questions, settings)
    cfg = ev.parse_config(a.spec, doc_type="text")
    spans = chunk_spans(cfg, corpora)
    sides: list[int | None] = [*a.side, *([None] if a.fill else [])]
    results: list[dict] = []
    out = result_path(a.name)
    for side in sides:
        t0 = time.perf_counter()
        label = f"{cfg.label} window={'fill' if side is None else side}"

        def embed_text(cid: str, s: int, e: int, side: int | None = side) -> str:
            return window(corpora[cid].text, s, e, side)

        results += ev.evaluate_index(
            label, ev.spans_indexer(label, corpora, spans, settings, embed_text=embed_text),
            corpora, questions, qvecs, settings=settings, k=a.k, modes=("vector", "hybrid"),
            meta={"spec": a.spec, "window": side},
        )  # fmt: skip
        doc = ev.report(results, corpora=corpora, questions=questions, k=a.k, settings=settings)
        ev.write_outputs(doc, out, reference=reference_points(published(data)))
        print(f"{label}: {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    print(ev.markdown_table(results))
    print()
    print(ev.per_corpus_table(results))


if __name__ == "__main__":
    main()
