"""Indexing for evaluation: each configuration's chunks go into a throwaway collection through the run API.

Chunks from chunkyard's own chunkers go through `run_ingest` (as `chunkyard ingest` makes them); chunks
made elsewhere (a peer library) go through `stages.index_prepared`, the same embed and store stages. Both
are ledger runs of kind `eval`, so nothing here writes to the store on its own.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline import language
from pipeline.config import Profile, Settings
from pipeline.evaluate.configs import DocTypeChoice, EvalConfig
from pipeline.evaluate.data import Corpus, EvalError
from pipeline.model import Chunk, Document, RunKind, Section, SectionPlan, Span, sha256

if TYPE_CHECKING:
    from pipeline.model import Stats
    from pipeline.stages import Work

_SUFFIX = {"text": ".txt", "markdown": ".md"}


@dataclass
class Indexed:
    """What indexing left behind: which source uri is which corpus, counts and timings."""

    uri_to_corpus: dict[str, str]
    info: dict = field(default_factory=dict)


@dataclass(frozen=True)
class SpanChunk(Chunk):
    """A chunk whose embedded text is given explicitly: bench experiments embed context around a span."""

    embedded: str = ""

    @property
    def embed_text(self) -> str:
        """The given text, or the chunk's own when none was given."""
        return self.embedded or super().embed_text


def stage_corpora(corpora: dict[str, Corpus], dest: Path, doc_type: DocTypeChoice) -> dict[str, str]:
    """Copy corpora into dest, renamed so the pipeline types them as asked; returns uri -> corpus id."""
    from pipeline.sources import source_uri

    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for c in corpora.values():
        name = c.path.name if doc_type == "auto" else c.id + _SUFFIX[doc_type]
        target = dest / name
        shutil.copyfile(c.path, target)
        out[source_uri(target)] = c.id
    return out


def pipeline_indexer(
    cfg: EvalConfig, corpora: dict[str, Corpus], settings: Settings
) -> Callable[[str], Indexed]:
    """Index through `run_ingest`, exactly as `chunkyard ingest` would (without Prefect)."""
    from pipeline.ingest import run_ingest

    def index(collection: str) -> Indexed:
        with tempfile.TemporaryDirectory(prefix="chunkyard-eval-") as tmp:
            folder = Path(tmp) / "corpora"
            uris = stage_corpora(corpora, folder, cfg.doc_type)
            stats = run_ingest(
                [folder], settings=settings, collection=collection, profile=cfg.profile, prune=False,
                model_limit=cfg.model_limit, kind=RunKind.EVAL,
            ).stats  # fmt: skip
        return _indexed(stats, uris)

    return index


def spans_indexer(
    label: str,
    corpora: dict[str, Corpus],
    spans: dict[str, list[Span]],
    settings: Settings,
    *,
    embed_text: Callable[[str, int, int], str] | None = None,
) -> Callable[[str], Indexed]:
    """Index chunks made elsewhere (a peer library) the same way: same embedding, cache, tables, search.

    `embed_text(corpus_id, start, end)` may say what to embed for a span (experiments with context
    around a span); the span itself stays what is scored.
    """
    from pipeline.requests import RunRequest
    from pipeline.run import Run
    from pipeline.stages import index_prepared

    def index(collection: str) -> Indexed:
        uris = {f"eval://{cid}": cid for cid in corpora}
        work = [
            _peer_work(label, uri, corpora[cid], spans.get(cid, []), embed_text) for uri, cid in uris.items()
        ]
        request = RunRequest(collection=collection, profile=Profile(), kind=RunKind.EVAL, note={"peer": label})
        with Run.begin(request, settings=settings) as run:
            run.add(index_prepared(run.ctx, work, run.progress))
            stats = run.finish().stats
        return _indexed(stats, uris)

    return index


def _peer_work(
    label: str,
    uri: str,
    corpus: Corpus,
    spans: list[Span],
    embed_text: Callable[[str, int, int], str] | None,
) -> Work:
    """One corpus as one section whose chunks are the given spans (a peer's chunks are never re-cut)."""
    from pipeline.stages import Work
    from pipeline.tokens import counter

    text, cl100k = corpus.text, counter("cl100k_base")
    doc = Document(uri, "text", text, [Section(0, len(text))], title=corpus.id, raw_hash=sha256(text))
    language.assign(doc)  # a peer's chunks get the full text of their language, as chunkyard's do
    chunks = [
        SpanChunk(s, e, text[s:e], cl100k.count(text[s:e]), embedded=embed_text(corpus.id, s, e))
        if embed_text
        else Chunk(s, e, text[s:e], cl100k.count(text[s:e]))
        for s, e in spans
        if e > s
    ]
    return Work(doc, f"peer:{label}", ["peer"], SectionPlan(new=[0]), [], True, {0: chunks})


def _indexed(stats: Stats, uris: dict[str, str]) -> Indexed:
    """An indexing run's result, or an EvalError: a corpus that failed or was skipped cannot be scored."""
    if stats.errors:
        raise EvalError(
            "ingest failed: " + "; ".join(f"{uris.get(u, u)}: {msg} ({st})" for u, st, msg in stats.errors)
        )
    if stats.skipped:
        raise EvalError("ingest skipped: " + "; ".join(f"{uris.get(u, u)}: {m}" for u, m in stats.skipped))
    return Indexed(uris, {"counts": dict(stats.counts), "timings": stats.timings})
