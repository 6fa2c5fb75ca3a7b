"""The one base class every chunker shares, and the registry of strategies.

A strategy implements `split`, its one abstract method, over a `SectionView` (the section's text,
offsets, budgets and span counts) and registers itself with `@register` beside its class, so the
registry and the strategies cannot drift apart. The base builds the view, enforces budgets on what
`split` returns (`pack.enforce`) and builds the chunks; packing is in `pack`, counting in `measure`,
contexts in `context`.

The offset contract: every chunk's `text == source[start:end]` of the document's normalized text, every
chunk within its unit budget and, with its context, within the model's input limit, and no chunk empty.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from pipeline.chunkers.context import MAX_CONTEXT_TOKENS, ContextScope, clip_context, plain_context
from pipeline.chunkers.measure import Measure
from pipeline.chunkers.pack import enforce
from pipeline.chunkers.spans import Fits
from pipeline.chunkers.view import SectionView
from pipeline.config import DEFAULT_MODEL, DEFAULT_SEPARATORS
from pipeline.embed.meta import model_max_tokens
from pipeline.model import Chunk, Document, Section, Span
from pipeline.tokens import (
    Counter,
    ModelCounter,
    SpanIndex,
    SpanIndexer,
    counter,
    model_counter,
    span_indexer,
)

#: kind -> class: every strategy, registered by `@register` where it is defined.
REGISTRY: dict[str, type[Chunker]] = {}

_ChunkerClass = TypeVar("_ChunkerClass", bound="type[Chunker]")

#: A document's span index shared by its sections: (document, start, end, index of text[start:end]).
_DocIndex = tuple[Document, int, int, SpanIndex]


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


class Chunker(ABC):
    """Subclasses implement `split`; the base strips, enforces budgets and builds Chunk objects.

    A chunker holds only what every call may share (config, counters, bounded memos), so one instance
    serves every document and thread; everything about one section lives in that call's `SectionView`.
    """

    kind: ClassVar[str]
    #: Model word pieces the clipped context may take; subclasses with richer context raise it.
    context_tokens: ClassVar[int] = MAX_CONTEXT_TOKENS
    #: How far `context_for` can differ between the spans of one section (`context.ContextScope`): a
    #: strategy that overrides `context_for` says so here, and `context_varies` per section.
    context_scope: ClassVar[ContextScope] = "section"
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

    @abstractmethod
    def split(self, view: SectionView) -> list[Span]:
        """Candidate spans (absolute offsets into the document's text) of the view's section, in order."""

    # ------------------------------------------------------------------------------------ hooks

    def context_for(self, doc: Document, section: Section, span: Span) -> str:
        """What config.context asks to embed before the span (`context.plain_context`)."""
        return plain_context(getattr(self.config, "context", "none"), doc, section)

    def context_varies(self, doc: Document, section: Section) -> bool:
        """Whether, with a "start" `context_scope`, `context_for` differs between spans of this section
        (where it says no, the model budget is asked once)."""
        return True

    def metadata_for(self, doc: Document, section: Section, span: Span) -> dict[str, Any]:
        """Extra JSON stored with a chunk; strategies add what helps someone reading the table."""
        return {}

    def prepare(self, items: Sequence[tuple[Document, Sequence[int]]]) -> Any:
        """Work shared by the sections of a batch (document, section indices), given back to
        `chunk_sections(..., shared=)`: none for most strategies (a semantic chunker embeds there)."""
        return None

    # ---------------------------------------------------------------------------------- chunking

    def context(self, doc: Document, section: Section, span: Span) -> str:
        """The context actually embedded: `context_for`, clipped to `context_tokens` word pieces."""
        ctx = self.context_for(doc, section, span)
        return clip_context(self.model, self.context_tokens, ctx) if ctx else ctx

    def view(
        self, doc: Document, section: Section, *, shared: Any = None, doc_index: _DocIndex | None = None
    ) -> SectionView:
        """The view `split` sees of one section; `doc_index` a span index of the document that may hold it."""
        index: tuple[int, SpanIndex] | None = None
        if self.indexer is not None:
            if (
                doc_index is not None
                and doc_index[0] is doc
                and doc_index[1] <= section.start <= section.end <= doc_index[2]
            ):
                index = doc_index[1], doc_index[3]
            else:
                found = self.indexer.index(
                    doc.text[section.start : section.end], token_starts=self.token_starts
                )
                index = None if found is None else (section.start, found)

        def context_at(a: int, b: int) -> str:
            return self.context(doc, section, (a, b))

        scope = self.context_scope
        measure = Measure(
            doc.text,
            section,
            unit=self.counter,
            model=self.model_counter,
            size=self.config.size,
            keep_whole=getattr(self.config, "keep_whole", 0) or 0,
            model_limit=self.model_limit,
            index=index,
            fragments=self.fragments,
            context=context_at,
            scope=scope,
            varies=scope != "start" or self.context_varies(doc, section),
        )
        separators = getattr(self.config, "separators", DEFAULT_SEPARATORS)
        return SectionView(
            doc,
            section,
            doc.text,
            section.start,
            section.end,
            section.atomic,
            measure,
            measure.fits,
            measure.fits_whole,
            separators,
            shared,
        )

    def fits_for(self, doc: Document, section: Section) -> Fits:
        """A test for spans of this section: unit budget, and model limit including their context."""
        return self.view(doc, section).fits

    def chunk(self, doc: Document, section: Section, *, shared: Any = None) -> list[Chunk]:
        """Chunks of one section, each within the unit budget and the model's input limit."""
        return self.chunk_view(self.view(doc, section, shared=shared))

    def chunk_view(self, view: SectionView) -> list[Chunk]:
        """`chunk`, of a section's view: `split`, then each span enforced, stripped and made a Chunk."""
        doc, section, text, m = view.doc, view.section, view.text, view.measure
        same = self.context(doc, section, (section.start, section.start)) if m.same_context else None
        out: list[Chunk] = []
        for a, b in self.split(view):
            for s, e in enforce(view, a, b, m.fits, accept=m.fits_whole):
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
        return out

    def chunk_document(self, doc: Document) -> list[tuple[int, list[Chunk]]]:
        """(section index, chunks) for every section of a document."""
        return list(self.chunk_sections(doc, range(len(doc.sections))).items())

    def chunk_sections(
        self, doc: Document, indices: Sequence[int], *, shared: Any = None
    ) -> dict[int, list[Chunk]]:
        """Chunks of some sections of a document (the pipeline's new ones), their counts from one pass.

        The same chunks as `chunk` gives one section at a time: only the work is shared (the document's
        span index; `prepare`'s work, done here for this document unless a batch's is given as `shared`).
        """
        if shared is None:
            shared = self.prepare([(doc, indices)])
        secs = [doc.sections[i] for i in indices]
        doc_index: _DocIndex | None = None
        if self.indexer is not None and len(secs) > 1:
            lo, hi = min(s.start for s in secs), max(s.end for s in secs)
            if hi - lo <= 2 * sum(s.end - s.start for s in secs):  # mostly contiguous: index them at once
                idx = self.indexer.index(doc.text[lo:hi], token_starts=self.token_starts)
                if idx is not None:
                    doc_index = doc, lo, hi, idx
        return {
            i: self.chunk_view(self.view(doc, doc.sections[i], shared=shared, doc_index=doc_index))
            for i in indices
        }

    def chunk_text(self, text: str, *, title: str = "") -> list[Chunk]:
        """Chunks of a bare string treated as one section (for tests and `chunkyard chunk`)."""
        doc = Document(
            uri="memory:", doc_type="text", text=text, sections=[Section(0, len(text))], title=title
        )
        return self.chunk(doc, doc.sections[0])
