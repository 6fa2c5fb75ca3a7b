"""The one base class every chunker shares: offsets, size enforcement and context live here, once."""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pipeline.config import DEFAULT_MODEL, DEFAULT_SEPARATORS
from pipeline.normalize import Document, Section, strip_span
from pipeline.tokens import Counter, counter, model_max_tokens

Span = tuple[int, int]

#: The embedded context (title, heading path) never takes more than this many model word pieces.
MAX_CONTEXT_TOKENS = 48


@dataclass(frozen=True)
class Chunk:
    """A child: an exact span of the document's normalized text, plus what is embedded with it."""

    start: int
    end: int
    text: str
    token_count: int
    context: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def embed_text(self) -> str:
        """What the model sees: the context (if any) and the span text."""
        return f"{self.context}\n\n{self.text}" if self.context else self.text


class Chunker(ABC):
    """Subclasses implement `split`; the base strips, enforces budgets and builds Chunk objects."""

    kind: ClassVar[str]

    def __init__(self, config: Any, *, model: str = DEFAULT_MODEL) -> None:
        self.config = config
        self.model = model
        self.counter: Counter = counter(config.unit, model)
        self.model_counter = counter("model", model)
        self.model_limit = model_max_tokens(model)

    @abstractmethod
    def split(self, doc: Document, section: Section) -> list[Span]:
        """Candidate spans (absolute offsets into doc.text) for one section, in order."""

    # ------------------------------------------------------------------------------------ shared

    def context_for(self, doc: Document, section: Section, span: Span) -> str:
        """Title and heading path, prepended to the embedded text when config.context is set."""
        if not getattr(self.config, "context", False):
            return ""
        parts = [doc.title] if doc.title else []
        parts += [h for h in section.heading_path if h and h != doc.title]
        return " > ".join(parts)

    def chunk(self, doc: Document, section: Section) -> list[Chunk]:
        """Chunks of one section, each within the unit budget and the model's input limit."""
        spans = self.split(doc, section)
        text = doc.text
        out: list[Chunk] = []
        for a, b in spans:
            for s, e in self._enforce(doc, section, *strip_span(text, a, b)):
                ctx = self._clip_context(self.context_for(doc, section, (s, e)))
                out.append(Chunk(s, e, text[s:e], self.counter.count(text[s:e]), ctx))
        return out

    def chunk_document(self, doc: Document) -> list[tuple[int, list[Chunk]]]:
        """(section index, chunks) for every section of a document."""
        return [(i, self.chunk(doc, s)) for i, s in enumerate(doc.sections)]

    def _clip_context(self, ctx: str) -> str:
        if not ctx or self.model_counter.count(ctx) <= MAX_CONTEXT_TOKENS:
            return ctx
        tok = self.model_counter._tok  # type: ignore[attr-defined]
        enc = tok(ctx, add_special_tokens=False, return_offsets_mapping=True)
        cut = enc["offset_mapping"][MAX_CONTEXT_TOKENS - 1][1]
        return ctx[:cut]

    def _enforce(self, doc: Document, section: Section, a: int, b: int) -> list[Span]:
        """Re-split a span that is over budget, in the unit or in model word pieces with context."""
        if b <= a:
            return []
        text = doc.text
        ctx = self._clip_context(self.context_for(doc, section, (a, b)))
        ctx_cost = self.model_counter.count(ctx) + 2 if ctx else 0  # "\n\n" joins context and text
        model_budget = self.model_limit - ctx_cost
        size = self.config.size
        piece = text[a:b]
        if self.counter.count(piece) <= size and self.model_counter.count(piece) <= model_budget:
            return [(a, b)]
        if self.counter.name == "model":
            fits = _budget_fits(text, self.model_counter, min(size, model_budget))
        else:
            unit_fits = _budget_fits(text, self.counter, size)
            model_fits = _budget_fits(text, self.model_counter, model_budget)

            def fits(x: int, y: int) -> bool:
                return unit_fits(x, y) and model_fits(x, y)

        return [
            strip_span(text, x, y)
            for x, y in recursive_spans(text, a, b, fits, DEFAULT_SEPARATORS, section.atomic)
        ]

    def chunk_text(self, text: str, *, title: str = "") -> list[Chunk]:
        """Chunks of a bare string treated as one section (for tests and `chunkyard chunk`)."""
        doc = Document(
            uri="memory:", doc_type="text", text=text, sections=[Section(0, len(text))], title=title
        )
        return self.chunk(doc, doc.sections[0])


# ---------------------------------------------------------------------------------- mechanics


def _budget_fits(text: str, cnt: Counter, size: int) -> Callable[[int, int], bool]:
    def fits(a: int, b: int) -> bool:
        return cnt.count(text[a:b]) <= size

    return fits


def _inside(pos: int, atomic: Sequence[Span]) -> bool:
    return any(x < pos < y for x, y in atomic)


def split_points(text: str, a: int, b: int, sep: str, atomic: Sequence[Span]) -> list[int]:
    """Offsets just after each occurrence of sep in [a, b), outside atomic blocks."""
    if sep == "":
        return []
    pts = []
    i = text.find(sep, a, b)
    while i >= 0:
        p = i + len(sep)
        if p < b and not _inside(p, atomic):
            pts.append(p)
        i = text.find(sep, p, b)
    return pts


def recursive_spans(
    text: str,
    a: int,
    b: int,
    fits: Callable[[int, int], bool],
    separators: Sequence[str],
    atomic: Sequence[Span] = (),
) -> list[Span]:
    """Contiguous pieces of [a, b) that each fit, cut at the coarsest separator that works."""
    if b <= a:
        return []
    if fits(a, b):
        return [(a, b)]
    # Inside a single atomic block that is too big by itself, its boundaries no longer bind.
    inner_atomic = [] if any(x <= a and b <= y for x, y in atomic) else atomic
    for k, sep in enumerate(separators):
        if sep == "":
            return _hard_split(text, a, b, fits)
        pts = split_points(text, a, b, sep, inner_atomic)
        if not pts:
            continue
        bounds = [a, *pts, b]
        out: list[Span] = []
        for x, y in zip(bounds, bounds[1:], strict=False):
            out.extend(recursive_spans(text, x, y, fits, separators[k + 1 :], inner_atomic))
        return out
    if inner_atomic:  # only atomic-protected separators were left: split the block itself
        return recursive_spans(text, a, b, fits, separators, [])
    return _hard_split(text, a, b, fits)


def _hard_split(text: str, a: int, b: int, fits: Callable[[int, int], bool]) -> list[Span]:
    """Largest prefixes that fit (binary search), for text with no separator left."""
    out = []
    while a < b:
        lo, hi = a + 1, b
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if fits(a, mid):
                lo = mid
            else:
                hi = mid - 1
        out.append((a, lo))
        a = lo
    return out


def merge_spans(
    text: str,
    pieces: Sequence[Span],
    cnt: Counter,
    size: int,
    overlap: int = 0,
) -> list[Span]:
    """Greedily merge contiguous pieces up to size, sharing about `overlap` units between neighbours."""
    if not pieces:
        return []
    counts = [cnt.count(text[a:b]) for a, b in pieces]
    out: list[Span] = []
    i = 0
    n = len(pieces)
    while i < n:
        j = i
        total = counts[i]
        while j + 1 < n and total + counts[j + 1] <= size:
            j += 1
            total += counts[j]
        # the sum is an estimate; the real count decides (BPE can merge across a boundary)
        while j > i and cnt.count(text[pieces[i][0] : pieces[j][1]]) > size:
            j -= 1
        out.append((pieces[i][0], pieces[j][1]))
        if j + 1 >= n:
            break
        nxt = j + 1
        if overlap > 0:
            back, k = 0, j
            while k > i and back + counts[k] <= overlap:
                back += counts[k]
                k -= 1
            nxt = max(k + 1, i + 1)
            # the overlap must leave room for at least one new piece, or the next chunk adds nothing
            while nxt <= j and back + counts[j + 1] > size:
                back -= counts[nxt]
                nxt += 1
        i = nxt
    return out


_WS = re.compile(r"\s+")
