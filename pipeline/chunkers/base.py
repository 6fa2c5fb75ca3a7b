"""The one base class every chunker shares: offsets, size enforcement and context live here, once."""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from bisect import bisect_left
from collections.abc import Callable, Sequence
from functools import lru_cache
from itertools import accumulate
from typing import Any, ClassVar, TypedDict, Unpack

from pipeline.config import DEFAULT_MODEL, DEFAULT_SEPARATORS
from pipeline.model import Chunk, Document, Section, Span
from pipeline.tokens import Counter, counter, model_max_tokens

Fits = Callable[[int, int], bool]


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


#: The embedded context (title, heading path) never takes more than this many model word pieces.
MAX_CONTEXT_TOKENS = 48

#: Word pieces of the "\n\n" that joins context and text: none (BERT pre-tokenizes on whitespace).
_JOIN_COST = 0


class Chunker(ABC):
    """Subclasses implement `split`; the base strips, enforces budgets and builds Chunk objects."""

    kind: ClassVar[str]
    #: Model word pieces the clipped context may take; subclasses with richer context raise it.
    context_tokens: ClassVar[int] = MAX_CONTEXT_TOKENS

    def __init__(self, config: Any, *, model: str = DEFAULT_MODEL) -> None:
        self.config = config
        self.model = model
        self.counter: Counter = counter(config.unit, model)
        self.model_counter = counter("model", model)
        self.model_limit = model_max_tokens(model)
        self._tls = threading.local()  # the Measure of the section being chunked, per thread

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
        try:
            for a, b in self.split(doc, section):
                for s, e in self._enforce(doc, section, a, b, m.fits):
                    out.append(
                        Chunk(
                            s,
                            e,
                            text[s:e],
                            m.unit(s, e),
                            self.context(doc, section, (s, e)),
                            self.metadata_for(doc, section, (s, e)),
                        )
                    )
        finally:
            self._tls.measure = None
        return out

    def chunk_document(self, doc: Document) -> list[tuple[int, list[Chunk]]]:
        """(section index, chunks) for every section of a document."""
        return [(i, self.chunk(doc, s)) for i, s in enumerate(doc.sections)]

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
        return self.measure(doc, section).budget(section.start, section.start)

    def _enforce(self, doc: Document, section: Section, a: int, b: int, fits: Fits) -> list[Span]:
        """Stripped spans of [a, b), re-split until each passes `fits` (a lone character always passes)."""
        text = doc.text
        out: list[Span] = []
        todo = [strip_span(text, a, b)]
        while todo:
            x, y = todo.pop()
            if y <= x:
                continue
            if y - x == 1 or fits(x, y):
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
        ucum = [0, *accumulate(m.unit(a, b) for a, b in pieces)]
        mcum = [0, *accumulate(m.model(a, b) for a, b in pieces)]
        size, mbudget = self.config.size, self.section_model_budget(doc, section)
        n = len(pieces)
        ids = list(item_ids) if item_ids is not None else list(range(n))
        group_end = {first: last for first, last in groups if last > first}

        def estimate(i: int, j: int) -> bool:
            return ucum[j + 1] - ucum[i] <= size and mcum[j + 1] - mcum[i] <= mbudget

        out: list[tuple[int, int]] = []
        i = 0
        while i < n:
            j = i
            while j + 1 < n and (max_items is None or ids[j + 1] - ids[i] < max_items) and estimate(i, j + 1):
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


# ---------------------------------------------------------------------------------- mechanics


class Measure:
    """Unit and model counts of spans of one section, each span counted once.

    Splitting, packing and enforcement ask about the same spans again and again; the model's word-piece
    tokenizer is the slowest thing in chunking (see bench/chunkers.py --profile), so nothing is counted
    twice.
    """

    def __init__(self, chunker: Chunker, doc: Document, section: Section) -> None:
        self.chunker, self.doc, self.section, self.text = chunker, doc, section, doc.text
        self.size = chunker.config.size
        self._unit_counter, self._model_counter = chunker.counter, chunker.model_counter
        self._same = chunker.counter.name == "model"
        # No token of either tokenizer averages 16 characters over a whole span of real text, so a span
        # longer than this is rejected uncounted (a rejection can only make pieces smaller, never wrong).
        per_token = 1 if chunker.counter.name == "chars" else 16 if chunker.counter.name != "words" else 64
        self._reject_chars = max(self.size, chunker.model_limit) * per_token
        self._unit: dict[Span, int] = {}
        self._model: dict[Span, int] = {}
        self._ctx: dict[str, int] = {}
        self._pieces: tuple[list[int], list[int], list[int | None]] | None | bool = None

    def unit(self, a: int, b: int) -> int:
        """Size of text[a:b] in the configured unit."""
        if self._same:
            return self.model(a, b)
        n = self._unit.get((a, b))
        if n is None:
            n = self._unit[(a, b)] = self._unit_counter.count(self.text[a:b])
        return n

    def model(self, a: int, b: int) -> int:
        """Word pieces of text[a:b] (without the model's special tokens)."""
        n = self._model.get((a, b))
        if n is None:
            n = self._from_section(a, b)
            if n is None:
                n = self._model_counter.count(self.text[a:b])
            self._model[(a, b)] = n
        return n

    def _from_section(self, a: int, b: int) -> int | None:
        """The count read off the section's own tokenization, where that is exact; else None.

        A BERT tokenizer cuts words at whitespace and punctuation and word-pieces each word on its own,
        so a span whose ends do not fall inside a word has exactly the pieces of the section that lie
        inside it. Spans that cut a word (a hard split) are counted for real.
        """
        if self._pieces is None:
            self._pieces = _section_pieces(
                self._model_counter, self.text, self.section.start, self.section.end
            )
        if not self._pieces or a < self.section.start or b > self.section.end:
            return None
        starts, ends, words = self._pieces  # type: ignore[misc]
        i, j = bisect_left(starts, a), bisect_left(starts, b)
        if (i and ends[i - 1] > a) or (j and ends[j - 1] > b):
            return None  # a word piece straddles an end
        n = len(starts)
        if (0 < i < n and words[i - 1] == words[i]) or (0 < j < n and words[j - 1] == words[j]):
            return None  # an end falls between two pieces of one word
        return j - i

    def prefetch_model(self, spans: Sequence[Span]) -> None:
        """Count the spans not counted yet in one batch call."""
        todo = [s for s in dict.fromkeys(spans) if s not in self._model]
        for a, b in todo:
            n = self._from_section(a, b)
            if n is not None:
                self._model[(a, b)] = n
        todo = [s for s in todo if s not in self._model]
        if len(todo) > 1:
            counts = self._model_counter.count_many([self.text[a:b] for a, b in todo])  # type: ignore[attr-defined]
            self._model.update(zip(todo, counts, strict=True))

    def budget(self, a: int, b: int) -> int:
        """Word pieces left for the text of span [a, b) once its context is embedded with it."""
        ctx = self.chunker.context(self.doc, self.section, (a, b))
        cost = self._ctx.get(ctx)
        if cost is None:
            cost = self._ctx[ctx] = self._model_counter.count(ctx) + _JOIN_COST if ctx else 0
        return self.chunker.model_limit - cost

    def fits(self, a: int, b: int) -> bool:
        """Within the unit budget, and within the model's limit together with its context."""
        if b - a > self._reject_chars:  # far too long to fit: not worth tokenizing (rejecting is safe)
            return False
        return self.unit(a, b) <= self.size and self.model(a, b) <= self.budget(a, b)


def _section_pieces(
    cnt: Counter, text: str, a: int, b: int
) -> tuple[list[int], list[int], list[int | None]] | bool:
    """Start and end offsets and word ids of the word pieces of text[a:b], for BERT-style tokenizers."""
    fast = getattr(cnt, "_fast", None)
    if fast is None or type(fast.pre_tokenizer).__name__ != "BertPreTokenizer":
        return False
    if type(fast.normalizer).__name__ != "BertNormalizer" or type(fast.model).__name__ != "WordPiece":
        return False
    enc = fast.encode(text[a:b], add_special_tokens=False)
    return [a + s for s, _ in enc.offsets], [a + e for _, e in enc.offsets], list(enc.word_ids)


@lru_cache(maxsize=8192)
def clip_context(model: str, limit: int, ctx: str) -> str:
    """A context cut to at most `limit` word pieces (at a word-piece boundary)."""
    if counter("model", model).count(ctx) <= limit:
        return ctx
    from pipeline.tokens import hf_tokenizer

    enc = hf_tokenizer(model)(ctx, add_special_tokens=False, return_offsets_mapping=True)
    return ctx[: enc["offset_mapping"][limit - 1][1]].rstrip()


def strip_span(text: str, a: int, b: int) -> Span:
    """Shrink a span to exclude leading and trailing whitespace."""
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


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
    fits: Fits,
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


def _hard_split(text: str, a: int, b: int, fits: Fits) -> list[Span]:
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
