"""Semantic chunking: cut where the meaning of neighbouring sentence windows drifts apart.

All windows of a section (or of a whole document, via `chunk_document`) are embedded in ONE `encode`
call; distances are rounded so that batch composition cannot flip a breakpoint (determinism).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from pipeline.chunkers.base import register
from pipeline.chunkers.sentence import SentenceChunker
from pipeline.chunkers.spans import Fits
from pipeline.config import DEFAULT_MODEL
from pipeline.model import Chunk, Document, Section, Span

#: Decimals kept of a cosine distance: float noise between batch shapes stays below this.
_DECIMALS = 4


@register
class SemanticChunker(SentenceChunker):
    """Sentences embedded in batches; breakpoints at large distances; packed within the budget."""

    kind = "semantic"

    def __init__(self, config: Any, *, model: str = DEFAULT_MODEL, model_limit: int | None = None) -> None:
        super().__init__(config, model=model, model_limit=model_limit)
        self._local = threading.local()  # sentences and vectors precomputed by chunk_document, per thread

    # ------------------------------------------------------------------------------ embeddings

    def _embed(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        """Vectors for distinct texts: precomputed ones, the rest in one encode call."""
        from pipeline.embed import get_embedder

        known: dict[str, np.ndarray] = getattr(self._local, "vectors", None) or {}
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        found = {t: known[t] for t in texts if t in known}
        if missing:
            vecs = get_embedder(self.model).encode(missing)
            found.update(zip(missing, vecs, strict=True))
        return found

    def _window_ranges(self, n: int) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """(left, right) sentence-index ranges compared at each of the n - 1 gaps."""
        w = self.config.window
        left = [(max(0, i - w + 1), i + 1) for i in range(n - 1)]
        right = [(i + 1, min(n, i + 1 + w)) for i in range(n - 1)]
        return left, right

    def _window_texts(self, text: str, sents: Sequence[Span]) -> tuple[list[str], list[str]]:
        left, right = self._window_ranges(len(sents))

        def t(r: tuple[int, int]) -> str:
            return text[sents[r[0]][0] : sents[r[1] - 1][1]]

        return [t(r) for r in left], [t(r) for r in right]

    def distances(self, text: str, sents: Sequence[Span]) -> np.ndarray:
        """Cosine distance across each gap between neighbouring sentences (rounded)."""
        if len(sents) < 2:
            return np.zeros(0)
        lt, rt = self._window_texts(text, sents)
        vec = self._embed([*lt, *rt])
        a = np.stack([vec[x] for x in lt])
        b = np.stack([vec[x] for x in rt])
        return np.round(1.0 - np.sum(a * b, axis=1), _DECIMALS)

    def breakpoints(self, dist: np.ndarray) -> list[int]:
        """Gap indices where the distance exceeds the configured threshold."""
        if dist.size == 0:
            return []
        mode, thr = self.config.mode, self.config.threshold
        if mode == "percentile":
            cut = float(np.percentile(dist, min(max(thr, 0.0), 100.0)))
        elif mode == "stddev":
            cut = float(dist.mean() + thr * dist.std())
        else:
            cut = thr
        return [int(i) for i in np.flatnonzero(dist > round(cut, _DECIMALS))]

    # ---------------------------------------------------------------------------------- split

    def split(self, doc: Document, section: Section) -> list[Span]:
        text = doc.text
        fits = self.fits_for(doc, section)
        sents = self.sentences(doc, section, fits)
        if not sents:
            return []
        dist = self.distances(text, sents)
        cuts = self.breakpoints(dist)
        groups: list[tuple[int, int]] = []  # sentence index ranges [i, j]
        for lo, hi in zip([0, *(c + 1 for c in cuts)], [*cuts, len(sents) - 1], strict=True):
            groups += [
                (lo + i, lo + j) for i, j in self.pack_indices(doc, section, sents[lo : hi + 1], fits=fits)
            ]
        groups = self._merge_small(text, sents, groups, dist, fits)
        return [(sents[i][0], sents[j][1]) for i, j in groups]

    def _merge_small(
        self,
        text: str,
        sents: Sequence[Span],
        groups: list[tuple[int, int]],
        dist: np.ndarray,
        fits: Fits,
    ) -> list[tuple[int, int]]:
        """Merge groups under min_size into the more similar neighbour that still fits."""
        min_size = self.config.min_size
        k = 0
        while k < len(groups) and len(groups) > 1:
            i, j = groups[k]
            if self.counter.count(text[sents[i][0] : sents[j][1]]) >= min_size:
                k += 1
                continue
            options = []
            if k > 0:
                options.append((float(dist[i - 1]), k - 1))
            if k + 1 < len(groups):
                options.append((float(dist[j]), k + 1))
            for _, other in sorted(options):
                lo, hi = min(groups[other][0], i), max(groups[other][1], j)
                if fits(sents[lo][0], sents[hi][1]):
                    groups[min(k, other)] = (lo, hi)
                    del groups[max(k, other)]
                    k = max(min(k, other) - 1, 0)  # the merged group may itself be small
                    break
            else:
                k += 1
        return groups

    def prepare(self, items: Sequence[tuple[Document, Sequence[int]]]) -> None:
        """Sentences of every section of the batch, and their windows embedded in ONE call."""
        texts: list[str] = []
        sentences: dict[tuple[int, int, int], list[Span]] = {}
        for doc, indices in items:
            for i in indices:
                s = doc.sections[i]
                sents = super().sentences(doc, s, self.fits_for(doc, s))
                sentences[(id(doc), s.start, s.end)] = sents
                lt, rt = self._window_texts(doc.text, sents) if len(sents) > 1 else ([], [])
                texts += lt + rt
        self._local.vectors = self._embed(texts)
        self._local.sentences = sentences

    def release(self) -> None:
        self._local.vectors = self._local.sentences = None

    def chunk_sections(self, doc: Document, indices: Sequence[int]) -> dict[int, list[Chunk]]:
        """Inside `batch` the batch's embeddings serve; otherwise this document's, embedded in one call."""
        if getattr(self._local, "sentences", None) is not None:
            return super().chunk_sections(doc, indices)
        with self.batch([(doc, indices)]):
            return super().chunk_sections(doc, indices)

    def sentences(self, doc: Document, section: Section, fits: Fits) -> list[Span]:
        """Sentence pieces, reused when `prepare` already computed them."""
        known = getattr(self._local, "sentences", None)
        key = (id(doc), section.start, section.end)
        if known and key in known:
            return known[key]
        return super().sentences(doc, section, fits)
