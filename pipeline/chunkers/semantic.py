"""Semantic chunking: cut where the meaning of neighbouring sentence windows drifts apart.

All windows of a section (or of a whole document, via `chunk_document`) are embedded in ONE `encode`
call; distances are rounded so that batch composition cannot flip a breakpoint (determinism).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pipeline.chunkers.base import register
from pipeline.chunkers.pack import pack_indices
from pipeline.chunkers.sentence import SentenceChunker
from pipeline.chunkers.spans import Fits
from pipeline.chunkers.view import SectionView
from pipeline.model import Document, Span

#: Decimals kept of a cosine distance: float noise between batch shapes stays below this.
_DECIMALS = 4


@dataclass(frozen=True, slots=True)
class Prepared:
    """A batch's shared work (`SemanticChunker.prepare`): every section's sentences, keyed by (document
    id, start, end), and the vectors of all their windows, embedded in one call."""

    vectors: dict[str, np.ndarray]
    sentences: dict[tuple[int, int, int], list[Span]]


@register
class SemanticChunker(SentenceChunker):
    """Sentences embedded in batches; breakpoints at large distances; packed within the budget."""

    kind = "semantic"

    # ------------------------------------------------------------------------------ embeddings

    def _embed(
        self, texts: Sequence[str], known: dict[str, np.ndarray] | None = None
    ) -> dict[str, np.ndarray]:
        """Vectors for distinct texts: those `known` already, the rest in one encode call."""
        from pipeline.embed import get_embedder

        known = known or {}
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

    def distances(
        self, text: str, sents: Sequence[Span], known: dict[str, np.ndarray] | None = None
    ) -> np.ndarray:
        """Cosine distance across each gap between neighbouring sentences (rounded); `known`: vectors
        embedded already (a batch's)."""
        if len(sents) < 2:
            return np.zeros(0)
        lt, rt = self._window_texts(text, sents)
        vec = self._embed([*lt, *rt], known)
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

    def split(self, view: SectionView) -> list[Span]:
        text, fits = view.text, view.fits
        batch: Prepared | None = view.shared
        known = batch.sentences if batch is not None else None
        key = (id(view.doc), view.start, view.end)
        sents = known[key] if known and key in known else self.sentences(view.doc, view.section, fits)
        if not sents:
            return []
        dist = self.distances(text, sents, batch.vectors if batch is not None else None)
        cuts = self.breakpoints(dist)
        groups: list[tuple[int, int]] = []  # sentence index ranges [i, j]
        for lo, hi in zip([0, *(c + 1 for c in cuts)], [*cuts, len(sents) - 1], strict=True):
            groups += [(lo + i, lo + j) for i, j in pack_indices(view, sents[lo : hi + 1], fits=fits)]
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

    def prepare(self, items: Sequence[tuple[Document, Sequence[int]]]) -> Prepared:
        """Sentences of every section of the batch, and their windows embedded in ONE call."""
        texts: list[str] = []
        sentences: dict[tuple[int, int, int], list[Span]] = {}
        for doc, indices in items:
            for i in indices:
                s = doc.sections[i]
                sents = self.sentences(doc, s, self.fits_for(doc, s))
                sentences[(id(doc), s.start, s.end)] = sents
                lt, rt = self._window_texts(doc.text, sents) if len(sents) > 1 else ([], [])
                texts += lt + rt
        return Prepared(self._embed(texts), sentences)
