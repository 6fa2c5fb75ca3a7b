"""How big a span is: unit and model counts of one section's spans, each counted once.

Splitting, packing and enforcement ask about the same spans again and again, and the model's word-piece
tokenizer is the slowest thing in chunking (see bench/chunkers.py --profile); this module is where that
cost is paid once. A `Measure` knows its section's text, counters, budgets and span index, and asks for
nothing else: the context of a span comes from the function it is given.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Sequence
from functools import cached_property

from pipeline.chunkers.context import ContextScope
from pipeline.model import Section, Span
from pipeline.tokens import Counter, ModelCounter, SpanIndex, TokenStarts, WordPieces

#: Word pieces of the "\n\n" that joins context and text: none (BERT pre-tokenizes on whitespace).
_JOIN_COST = 0


class Measure:
    """Unit and model counts of spans of one section, each span counted once.

    With a tiktoken unit and a BERT-style model (the defaults) the section is tokenized once by tiktoken
    and both counts of a span are read off that (`tokens.SpanIndexer`): exact between the index's safe
    offsets (before a space after a word, after a newline), and for the few characters from a span's end
    to the nearest safe offset inside it, counted on their own. Otherwise each span is counted once.
    """

    def __init__(
        self,
        text: str,
        section: Section,
        *,
        unit: Counter,
        model: ModelCounter,
        size: int,
        keep_whole: int,
        model_limit: int,
        index: tuple[int, SpanIndex] | None,
        fragments: dict[str, tuple[int, int]],
        context: Callable[[int, int], str],
        scope: ContextScope,
        varies: bool = True,
    ) -> None:
        """`index`: (offset, span index) of a text range holding the section, or None without one.
        `fragments`: short texts counted so far (shared between sections). `context(a, b)`: the context
        embedded with span [a, b); `scope` says how far it can differ within the section, and `varies`
        whether it differs at all in this one (a "start" scope without a table, say)."""
        self.text, self.section, self.size, self.model_limit = text, section, size, model_limit
        self._unit_counter, self._model_counter = unit, model
        self._same = unit.name == "model"
        # No token of either tokenizer averages 16 characters over a whole span of real text, so a span
        # longer than this is rejected uncounted (a rejection can only make pieces smaller, never wrong).
        per_token = 1 if unit.name == "chars" else 16 if unit.name != "words" else 64
        self._reject_chars = max(size, model_limit) * per_token
        #: the budget of a paragraph kept whole (`keep_whole`), at least `size`
        self.whole = max(size, keep_whole)
        self._reject_whole = max(self.whole, model_limit) * per_token
        self._unit: dict[Span, int] = {}
        self._model: dict[Span, int] = {}
        self._ctx: dict[str, int] = {}
        self._both: dict[Span, tuple[int, int]] = {}
        self._fragments = fragments
        self._context = context
        #: whether every span of the section gets the same context (so the same model budget)
        self.same_context = scope == "section" or (scope == "start" and not varies)
        self._fixed_budget = self.budget(section.start, section.start) if self.same_context else None
        # a context that depends only on where a span starts: one budget per start
        self._budget_at: dict[int, int] | None = {} if scope == "start" else None
        self._index: SpanIndex | None = None
        if index is not None:
            self._base = base = index[0]
            # the safe offsets of the section: where every search of a span's ends starts (a document's
            # index holds every section's)
            pos = index[1][0]
            self._lo = max(bisect_left(pos, section.start - base) - 1, 0)
            self._hi = min(bisect_right(pos, section.end - base) + 1, len(pos))
            self._index = index[1]

    def counts(self, a: int, b: int) -> tuple[int, int]:
        """(unit, model) counts of text[a:b]."""
        both = self._both.get((a, b))
        return both if both is not None else self._count(a, b)

    def _count(self, a: int, b: int) -> tuple[int, int]:
        """`counts`, not looked up in the cache first (then stored there)."""
        idx = self._index
        sec = self.section
        if idx is None or a < sec.start or b > sec.end:
            both = self._unit_alone(a, b), self._model_alone(a, b)
        else:
            s, lo, hi = self._base, self._lo, self._hi
            pos, units, pieces, _ = idx
            x, y = a - s, b - s
            i, j = bisect_left(pos, x, lo, hi), bisect_right(pos, y, lo, hi) - 1
            if i > j:  # no safe offset inside: the span on its own
                both = self._direct(a, b)
            else:
                u, m = units[j] - units[i], pieces[j] - pieces[i]
                frags = self._fragments
                if x < pos[i]:  # the few characters before the first safe offset (a fragment seen before?)
                    d = frags.get(self.text[a : s + pos[i]]) if pos[i] - x <= 32 else None
                    du, dm = d if d is not None else self._direct(a, s + pos[i])
                    u, m = u + du, m + dm
                if pos[j] < y:
                    d = frags.get(self.text[s + pos[j] : b]) if y - pos[j] <= 32 else None
                    du, dm = d if d is not None else self._direct(s + pos[j], b)
                    u, m = u + du, m + dm
                both = u, m
        self._both[(a, b)] = both
        return both

    def token_starts(self, a: int, b: int) -> TokenStarts | None:
        """Where each token of text[a:b] alone starts (`tokens.TokenStarts`, absolute offsets), or None
        without an index that holds them (the chunker's `token_starts`) or a safe offset inside [a, b].

        Between the first and the last safe offset inside the span the tokens are the index's; the few
        characters outside them are tokenized on their own (no token crosses a safe offset)."""
        import numpy as np

        idx = self._index
        if idx is None or idx[3] is None or a < self.section.start or b > self.section.end:
            return None
        pos, units, _, starts = idx
        s = self._base
        i, j = bisect_left(pos, a - s, self._lo, self._hi), bisect_right(pos, b - s, self._lo, self._hi) - 1
        if i > j:
            return None
        mid = starts[units[i] : units[j]]
        parts = [mid if s == 0 else np.where(mid >= 0, mid + s, mid)]
        if a < s + pos[i]:
            parts.insert(0, self._starts_alone(a, s + pos[i]))
        if s + pos[j] < b:
            parts.append(self._starts_alone(s + pos[j], b))
        return parts[0] if len(parts) == 1 else np.concatenate(parts)

    def _starts_alone(self, a: int, b: int) -> TokenStarts:
        """`token_starts` of text[a:b] from the unit's tokenizer itself (a word or two)."""
        import numpy as np

        out, prev = [], a
        for s, e in self._unit_counter.encode_offsets(self.text[a:b]):
            out.append(a + s if a + s >= prev else -1)  # a token that starts inside a character: -1
            prev = a + e
        return np.array(out, np.int64)

    def _direct(self, a: int, b: int) -> tuple[int, int]:
        """Counts of text[a:b] by the tokenizers themselves."""
        if b - a > 32:
            return self._unit_alone(a, b), self._model_alone(a, b)
        # a word or two before a cut: the same few texts come back again and again
        frag = self.text[a:b]
        found = self._fragments.get(frag)
        if found is None:
            if len(self._fragments) >= 1 << 16:
                self._fragments.clear()
            found = self._fragments[frag] = (
                self._unit_counter.count(frag),
                self._model_counter.count_fast(frag),
            )
        return found

    def unit(self, a: int, b: int) -> int:
        """Size of text[a:b] in the configured unit."""
        return self.counts(a, b)[0] if self._index is not None else self._unit_alone(a, b)

    def model(self, a: int, b: int) -> int:
        """Word pieces of text[a:b] (without the model's special tokens)."""
        return self.counts(a, b)[1] if self._index is not None else self._model_alone(a, b)

    def _unit_alone(self, a: int, b: int) -> int:
        if self._same:
            return self._model_alone(a, b)
        n = self._unit.get((a, b))
        if n is None:
            n = self._unit[(a, b)] = self._unit_counter.count(self.text[a:b])
        return n

    def _model_alone(self, a: int, b: int) -> int:
        n = self._model.get((a, b))
        if n is None:
            n = self._from_section(a, b)
            if n is None:
                n = self._model_counter.count_fast(self.text[a:b])
            self._model[(a, b)] = n
        return n

    @cached_property
    def _section_pieces(self) -> WordPieces | None:
        """The section's word pieces (absolute offsets), tokenized once; None if spans cannot use them."""
        a, b = self.section.start, self.section.end
        pieces = self._model_counter.word_pieces(self.text[a:b])
        if pieces is None:
            return None
        starts, ends, words = pieces
        return [a + s for s in starts], [a + e for e in ends], words

    def _from_section(self, a: int, b: int) -> int | None:
        """The count read off the section's own tokenization, where that is exact; else None.

        A BERT tokenizer cuts words at whitespace and punctuation and word-pieces each word on its own,
        so a span whose ends do not fall inside a word has exactly the pieces of the section that lie
        inside it. Spans that cut a word (a hard split) are counted for real.
        """
        pieces = self._section_pieces
        if pieces is None or a < self.section.start or b > self.section.end:
            return None
        starts, ends, words = pieces
        i, j = bisect_left(starts, a), bisect_left(starts, b)
        if (i and ends[i - 1] > a) or (j and ends[j - 1] > b):
            return None  # a word piece straddles an end
        n = len(starts)
        if (0 < i < n and words[i - 1] == words[i]) or (0 < j < n and words[j - 1] == words[j]):
            return None  # an end falls between two pieces of one word
        return j - i

    def prefetch_model(self, spans: Sequence[Span]) -> None:
        """Count the spans not counted yet in one batch call."""
        if self._index is not None:
            return  # read off the index
        todo = [s for s in dict.fromkeys(spans) if s not in self._model]
        for a, b in todo:
            n = self._from_section(a, b)
            if n is not None:
                self._model[(a, b)] = n
        todo = [s for s in todo if s not in self._model]
        if len(todo) > 1:
            counts = self._model_counter.count_many([self.text[a:b] for a, b in todo])
            self._model.update(zip(todo, counts, strict=True))

    def budget(self, a: int, b: int) -> int:
        """Word pieces left for the text of span [a, b) once its context is embedded with it."""
        ctx = self._context(a, b)
        cost = self._ctx.get(ctx)
        if cost is None:
            cost = self._ctx[ctx] = self._model_counter.count(ctx) + _JOIN_COST if ctx else 0
        return self.model_limit - cost

    @property
    def section_budget(self) -> int:
        """`budget` of a span at the section's start: the section's plain context (packing's estimate)."""
        return self._model_budget(self.section.start, self.section.start)

    def fits_whole(self, a: int, b: int) -> bool:
        """`fits` with the budget of a paragraph kept whole (`keep_whole`) instead of `size`."""
        if self.whole <= self.size:
            return self.fits(a, b)
        if b - a > self._reject_whole:
            return False
        u, m = self.counts(a, b) if self._index is not None else (self.unit(a, b), None)
        if u > self.whole:
            return False
        if m is None:
            m = self.model(a, b)
        return m <= self._model_budget(a, b)

    def _model_budget(self, a: int, b: int) -> int:
        """`budget` of [a, b), from what is known: the section's, or the one per span start."""
        if self._fixed_budget is not None:
            return self._fixed_budget
        at = self._budget_at
        if at is None:
            return self.budget(a, b)
        found = at.get(a)
        if found is None:
            found = at[a] = self.budget(a, b)
        return found

    def fits(self, a: int, b: int) -> bool:
        """Within the unit budget, and within the model's limit together with its context."""
        if b - a > self._reject_chars:  # far too long to fit: not worth tokenizing (rejecting is safe)
            return False
        both = self._both.get((a, b))
        if both is not None:
            u, m = both
        elif self._index is not None:
            u, m = self._count(a, b)
        else:
            u = self.unit(a, b)
            if u > self.size:
                return False
            m = self.model(a, b)
        if u > self.size:
            return False
        budget = self._fixed_budget  # inline of `_model_budget` for the common case: this is hot
        return m <= (budget if budget is not None else self._model_budget(a, b))
