"""The one base class every chunker shares: offsets, size enforcement, packing and the registry live here.

Span mechanics are in `spans`, counting in `measure`; a strategy implements `split` and registers itself
with `@register` beside its class, so the registry and the strategies cannot drift apart.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from bisect import bisect_right
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, TypedDict, TypeVar, Unpack

from pipeline.chunkers.measure import MAX_CONTEXT_TOKENS, Measure, clip_context
from pipeline.chunkers.spans import Fits, recursive_spans
from pipeline.config import DEFAULT_MODEL, DEFAULT_SEPARATORS
from pipeline.model import Chunk, Document, Section, Span, heading_context, strip_span
from pipeline.tokens import (
    Counter,
    ModelCounter,
    SpanIndex,
    SpanIndexer,
    counter,
    model_counter,
    model_max_tokens,
    span_indexer,
)

#: kind -> class: every strategy, registered by `@register` where it is defined.
REGISTRY: dict[str, type[Chunker]] = {}

_ChunkerClass = TypeVar("_ChunkerClass", bound="type[Chunker]")


def register(cls: _ChunkerClass) -> _ChunkerClass:
    """Class decorator: make a chunker selectable by its `kind` (profiles, the router, --strategy)."""
    kind = cls.__dict__.get("kind")
    if not isinstance(kind, str):
        raise TypeError(f"{cls.__qualname__} must set its own `kind` to be registered")
    known = REGISTRY.get(kind)
    if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
        raise ValueError(f"chunker kind {kind!r} is already registered by {known.__qualname__}")
    REGISTRY[kind] = cls
    return cls


class PackOptions(TypedDict, total=False):
    """How `Chunker.pack` joins pieces.

    `fits` replaces the chunker's own budget check. `overlap_units` / `overlap_items` repeat the end of a
    chunk at the start of the next, in units or in pieces. `glue[k]` asks not to end a chunk after piece k
    (a heading or a list's lead-in) when the chunk can end earlier instead. `max_items` and `overlap_items`
    count pieces, or the distinct `item_ids` of pieces (a chat turn cut into several pieces is still one
    turn). A group (first, last) of pieces (a lead-in and its list items) starts a new chunk rather than
    being cut, when it fits in one chunk but not in what is left of this one.
    """

    fits: Fits | None
    overlap_units: int
    overlap_items: int
    max_items: int | None
    item_ids: Sequence[int] | None
    glue: Sequence[bool] | None
    groups: Sequence[tuple[int, int]]


class Chunker(ABC):
    """Subclasses implement `split`; the base strips, enforces budgets and builds Chunk objects."""

    kind: ClassVar[str]
    #: Model word pieces the clipped context may take; subclasses with richer context raise it.
    context_tokens: ClassVar[int] = MAX_CONTEXT_TOKENS
    #: Whether the span index should say where each token starts (`Measure.token_starts`).
    token_starts: ClassVar[bool] = False

    def __init__(self, config: Any, *, model: str = DEFAULT_MODEL, model_limit: int | None = None) -> None:
        """`model_limit`: word pieces the model reads (context included); None = the model's own limit."""
        self.config = config
        self.model = model
        self.counter: Counter = counter(config.unit, model)
        self.model_counter: ModelCounter = model_counter(model)
        self.model_limit = model_max_tokens(model) if model_limit is None else model_limit
        # tiktoken unit + BERT-style model: spans counted off one tokenization (a table built with them)
        self.indexer: SpanIndexer | None = span_indexer(config.unit, model)
        #: short texts (a word before a cut) counted so far: (unit, model) counts, bounded
        self.fragments: dict[str, tuple[int, int]] = {}
        self._tls = threading.local()  # the Measure of the section, the index of the document, per thread

    @abstractmethod
    def split(self, doc: Document, section: Section) -> list[Span]:
        """Candidate spans (absolute offsets into doc.text) for one section, in order."""

    # ------------------------------------------------------------------------------------ shared

    def context_for(self, doc: Document, section: Section, span: Span) -> str:
        """What config.context asks to embed before the span: title, nearest heading, or both, or the path.

        Only what is named is embedded, so only its edits re-embed: with the nearest heading, a renamed
        heading higher up (a release note gaining its date) leaves the chunks below it as they were.
        """
        mode = getattr(self.config, "context", "none")
        if mode == "none":
            return ""
        if mode == "path":
            return heading_context(doc, section)
        title = doc.title if mode in ("title", "title_heading") else ""
        headings: list[str] = []
        if mode in ("heading", "title_heading"):
            near = next((h for h in reversed(section.heading_path) if h), "")
            headings = [near] if near and (mode == "heading" or near != doc.title) else []
        return " > ".join(([title] if title else []) + headings)

    def context_varies(self, doc: Document, section: Section) -> bool:
        """Whether `context_for` may differ between spans of this section (a strategy that knows better,
        with `context_by_start`, says no where it can: its model budget is then asked once)."""
        return True

    def metadata_for(self, doc: Document, section: Section, span: Span) -> dict[str, Any]:
        """Extra JSON stored with a chunk; strategies add what helps someone reading the table."""
        return {}

    def context(self, doc: Document, section: Section, span: Span) -> str:
        """The context actually embedded: `context_for`, clipped to `context_tokens` word pieces."""
        ctx = self.context_for(doc, section, span)
        return clip_context(self.model, self.context_tokens, ctx) if ctx else ctx

    def chunk(self, doc: Document, section: Section) -> list[Chunk]:
        """Chunks of one section, each within the unit budget and the model's input limit."""
        text = doc.text
        m = self.measure(doc, section)
        out: list[Chunk] = []
        same = self.context(doc, section, (section.start, section.start)) if m.same_context else None
        try:
            for a, b in self.split(doc, section):
                for s, e in self._enforce(doc, section, a, b, m.fits, accept=m.fits_whole):
                    out.append(
                        Chunk(
                            s,
                            e,
                            text[s:e],
                            m.unit(s, e),
                            self.context(doc, section, (s, e)) if same is None else same,
                            self.metadata_for(doc, section, (s, e)) | doc.page_metadata(s, e),
                        )
                    )
        finally:
            self._tls.measure = None
        return out

    def chunk_document(self, doc: Document) -> list[tuple[int, list[Chunk]]]:
        """(section index, chunks) for every section of a document."""
        return list(self.chunk_sections(doc, range(len(doc.sections))).items())

    def chunk_sections(self, doc: Document, indices: Sequence[int]) -> dict[int, list[Chunk]]:
        """Chunks of some sections of a document (the pipeline's new ones), their counts from one pass.

        The same chunks as `chunk` gives one section at a time: only the work is shared (the document's
        span index; a semantic chunker's embeddings).
        """
        secs = [doc.sections[i] for i in indices]
        if self.indexer is not None and len(secs) > 1:
            lo, hi = min(s.start for s in secs), max(s.end for s in secs)
            if hi - lo <= 2 * sum(s.end - s.start for s in secs):  # mostly contiguous: index them at once
                idx = self.indexer.index(doc.text[lo:hi], token_starts=self.token_starts)
                if idx is not None:
                    self._tls.index = (doc, lo, hi, idx)
        try:
            return {i: self.chunk(doc, doc.sections[i]) for i in indices}
        finally:
            self._tls.index = None

    @contextmanager
    def batch(self, items: Sequence[tuple[Document, Sequence[int]]]) -> Iterator[None]:
        """Chunk several documents' sections (document, section indices) with their shared work done once
        (a semantic chunker embeds all their sentences in one call); `chunk_sections` inside uses it."""
        self.prepare(items)
        try:
            yield
        finally:
            self.release()

    def prepare(self, items: Sequence[tuple[Document, Sequence[int]]]) -> None:  # noqa: B027
        """Work shared by the sections of a batch, kept for this thread (none for most strategies)."""

    def release(self) -> None:  # noqa: B027
        """Forget what `prepare` kept."""

    def span_index(self, doc: Document, section: Section) -> tuple[int, SpanIndex] | None:
        """(offset, index) of a text range holding the section (`SpanIndexer`), or None without one."""
        if self.indexer is None:
            return None
        known = getattr(self._tls, "index", None)
        if known is not None and known[0] is doc and known[1] <= section.start and section.end <= known[2]:
            return known[1], known[3]
        idx = self.indexer.index(doc.text[section.start : section.end], token_starts=self.token_starts)
        return None if idx is None else (section.start, idx)

    def chunk_text(self, text: str, *, title: str = "") -> list[Chunk]:
        """Chunks of a bare string treated as one section (for tests and `chunkyard chunk`)."""
        doc = Document(
            uri="memory:", doc_type="text", text=text, sections=[Section(0, len(text))], title=title
        )
        return self.chunk(doc, doc.sections[0])

    # ------------------------------------------------------------------------------ size checks

    def measure(self, doc: Document, section: Section) -> Measure:
        """The span counter of this section (shared by split, packing and enforcement in this thread)."""
        m = getattr(self._tls, "measure", None)
        if m is None or m.doc is not doc or m.section is not section:
            m = self._tls.measure = Measure(self, doc, section)
        return m

    def fits_for(self, doc: Document, section: Section) -> Fits:
        """A test for spans of this section: unit budget, and model limit including their context."""
        return self.measure(doc, section).fits

    def section_model_budget(self, doc: Document, section: Section) -> int:
        """Model word pieces left for text beside the section's plain context (an estimate for packing)."""
        return self.measure(doc, section).section_budget

    def _enforce(
        self, doc: Document, section: Section, a: int, b: int, fits: Fits, *, accept: Fits | None = None
    ) -> list[Span]:
        """Stripped spans of [a, b), re-split until each passes `fits` (a lone character always passes); a
        span the strategy returned whole passes `accept` instead (a paragraph kept whole, `keep_whole`)."""
        text = doc.text
        out: list[Span] = []
        whole = strip_span(text, a, b)
        todo = [whole]
        while todo:
            x, y = todo.pop()
            if y <= x:
                continue
            if y - x == 1 or ((accept or fits) if (x, y) == whole else fits)(x, y):
                out.append((x, y))
                continue
            pieces = [
                strip_span(text, p, q)
                for p, q in recursive_spans(text, x, y, fits, DEFAULT_SEPARATORS, section.atomic)
            ]
            if pieces == [(x, y)]:  # cannot be cut further: halve it
                mid = x + (y - x) // 2
                pieces = [strip_span(text, x, mid), strip_span(text, mid, y)]
            todo.extend(reversed(pieces))
        return out

    # ---------------------------------------------------------------------------------- packing

    def pieces_for(self, doc: Document, section: Section, a: int, b: int, fits: Fits) -> list[Span]:
        """Contiguous pieces of [a, b) that each fit, cut at the coarsest configured separator."""
        separators = getattr(self.config, "separators", DEFAULT_SEPARATORS)
        return recursive_spans(doc.text, a, b, fits, separators, section.atomic)

    def pack(
        self, doc: Document, section: Section, pieces: Sequence[Span], **options: Unpack[PackOptions]
    ) -> list[Span]:
        """Greedily join contiguous pieces into chunks that fit; overlap in units or in pieces (`PackOptions`)."""
        return [(pieces[i][0], pieces[j][1]) for i, j in self.pack_indices(doc, section, pieces, **options)]

    def pack_indices(
        self,
        doc: Document,
        section: Section,
        pieces: Sequence[Span],
        *,
        fits: Fits | None = None,
        overlap_units: int = 0,
        overlap_items: int = 0,
        max_items: int | None = None,
        item_ids: Sequence[int] | None = None,
        glue: Sequence[bool] | None = None,
        groups: Sequence[tuple[int, int]] = (),
    ) -> list[tuple[int, int]]:
        """`pack`, as (first, last) piece indices of each chunk; the options are `PackOptions`."""
        if not pieces:
            return []
        text = doc.text
        m = self.measure(doc, section)
        fits = fits or m.fits
        m.prefetch_model(pieces)
        counts = m.counts
        ucum, mcum, u_sum, m_sum = [0], [0], 0, 0
        for a, b in pieces:
            u, w = counts(a, b)
            u_sum += u
            m_sum += w
            ucum.append(u_sum)
            mcum.append(m_sum)
        size, mbudget = self.config.size, self.section_model_budget(doc, section)
        n = len(pieces)
        ids = list(item_ids) if item_ids is not None else list(range(n))
        group_end = {first: last for first, last in groups if last > first}

        def estimate(i: int, j: int) -> bool:
            return ucum[j + 1] - ucum[i] <= size and mcum[j + 1] - mcum[i] <= mbudget

        # without an item cap or groups the greedy extension is a search: the sums only grow
        plain = max_items is None and not group_end
        out: list[tuple[int, int]] = []
        i = 0
        while i < n:
            if plain:
                # the last j with both sums of pieces i..j within budget (at least i)
                j = min(bisect_right(ucum, ucum[i] + size), bisect_right(mcum, mcum[i] + mbudget)) - 2
                j = min(max(j, i), n - 1)
            else:
                j = i
                while (
                    j + 1 < n
                    and (max_items is None or ids[j + 1] - ids[i] < max_items)
                    and estimate(i, j + 1)
                ):
                    last = group_end.get(j + 1)
                    if last is not None and not estimate(i, last) and estimate(j + 1, last):
                        break
                    j += 1
            # the sum is an estimate; the real count of the span as it will be stored decides
            while j > i and not fits(*strip_span(text, pieces[i][0], pieces[j][1])):
                j -= 1
            if glue and j + 1 < n and glue[j]:
                k = j
                while k > i and glue[k]:
                    k -= 1
                if not glue[k]:
                    j = k
            out.append((i, j))
            if j + 1 >= n:
                break
            nxt = j + 1
            if overlap_items > 0:
                first = ids[j] - overlap_items + 1  # the first item repeated in the next chunk
                nxt = max(i + 1, next(k for k in range(i, j + 2) if ids[k] >= first))
            elif overlap_units > 0:
                k = j + 1
                while k - 1 > i and ucum[j + 1] - ucum[k - 1] <= overlap_units:
                    k -= 1
                nxt = k
            # the overlap must leave room for the next new piece, or the next chunk adds nothing
            while nxt <= j and not estimate(nxt, j + 1):
                nxt += 1
            i = nxt
        return out
