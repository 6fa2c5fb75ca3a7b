"""Counts of every span of a text off ONE tiktoken pass: the unit's and the model's word pieces."""

from __future__ import annotations

from array import array
from functools import lru_cache
from typing import Any

from pipeline.config import DEFAULT_MODEL, Unit
from pipeline.tokens import offline
from pipeline.tokens.counters import ModelCounter, TiktokenCounter, counter, model_counter

#: Offsets of a text where counts add up, with the unit and model counts before each (see `SpanIndexer`),
#: and, when asked for, where each token starts (see `SpanIndexer.index`).
SpanIndex = tuple["array[int]", "array[int]", "array[int]", "TokenStarts | None"]
#: Per token of a text: the offset of the character it starts, or -1 where it starts inside one (numpy).
TokenStarts = Any


class SpanIndexer:
    """Counts of every span of a text between two "safe" offsets, from ONE tiktoken pass and no model call.

    A safe offset is a token boundary where tiktoken's pre-tokenizer (cl100k/o200k regex) and BERT's both
    cut, whatever the text around: before a space that follows a non-space (letter runs, number groups and
    punctuation runs all end there, and the space starts the next piece), after a newline that a non-space
    follows (a newline ends every piece it is in), and between an ASCII letter or digit and ASCII
    punctuation or whitespace (a letter run or number group ends; BERT cuts at both). Neither tokenizer
    then merges across the offset and nothing before or after it changes how the text between is cut, so
    the count of text[a:b] between safe offsets is a difference of prefix sums over the whole text.

    The unit count is the index of the whole-text token at the offset. The model's word pieces come from the
    same tokens: a printable-ASCII token that shares no BERT word with its neighbours counts what its text
    counts alone, from a table over the vocabulary; tokens that do share a word ("photos" + "ynthesis",
    "201" + "4"), and tokens with other characters, are counted together, their text at once. Characters
    are never classified by a Unicode table whose version could differ from the tokenizers' own: a
    non-ASCII character next to a join or an offset counts as a word character and never makes it safe.
    tests/test_chunkers.py checks the counts against the tokenizers on awkward text.
    """

    #: Joined tokens' texts counted so far (bounded): a multi-token word or a year is counted once.
    _MEMO_LIMIT = 1 << 16

    def __init__(self, tik: TiktokenCounter, model: ModelCounter) -> None:
        import numpy as np

        py = model._py
        assert py is not None
        self._tik, self._model, self._np = tik, model, np
        n = tik._enc.max_token_value + 1
        blen, first, last, wp = [0] * n, [0] * n, [0] * n, [0] * n
        lead = [0] * n  # bytes that begin a character (all but UTF-8 continuation bytes)
        plain = [False] * n  # printable ASCII (with tab and newlines): counted from the table
        words, lower, memo, word = py._words.findall, py._lower, py._memo, py._word
        for b, i in tik._enc._mergeable_ranks.items():
            if not b:
                continue
            blen[i], first[i], last[i] = len(b), b[0], b[-1]
            lead[i] = len(b) if b.isascii() else sum(1 for c in b if not 0x80 <= c < 0xC0)
            if b.isascii() and py.handles(t := b.decode("ascii")):
                plain[i] = True
                c = 0
                for w in words(t.lower() if lower else t):
                    k = memo.get(w)
                    if k is None:
                        k = memo[w] = word(w)
                    c += k
                wp[i] = c
        space = np.array([chr(c).isspace() for c in range(128)] + [False] * 128)
        surely_text = (np.arange(256) < 128) & ~space  # an ASCII character that is no whitespace
        bert_ws = np.isin(np.arange(256), [9, 10, 13, 32])
        punct = np.array([33 <= c < 127 and not chr(c).isalnum() for c in range(256)])
        run = ~bert_ws & ~punct  # letters, digits, control characters and every byte of a non-ASCII one
        alnum = np.array([c < 128 and chr(c).isalnum() for c in range(256)])
        # Flags of a token's first and last byte; a bit set in both of two neighbours means (see `index`):
        # 1: a space after a non-space, 2: a non-space after a newline, 8: punctuation or whitespace after
        # a letter or digit (each a safe offset between them); 4: both are word characters (they join).
        byte = np.arange(256)
        first_flags = (byte == 32) * 1 + surely_text * 2 + run * 4 + (bert_ws | punct) * 8
        last_flags = surely_text * 1 + (byte == 10) * 2 + run * 4 + alnum * 8
        self._first = first_flags.astype(np.uint8)[np.array(first, np.uint8)]
        self._last = last_flags.astype(np.uint8)[np.array(last, np.uint8)]
        self._lead = np.array(lead, np.int64)
        self._cont = (np.array(first, np.uint8) & 0xC0) == 0x80  # starts inside a character
        self._wp = np.where(np.array(plain), np.array(wp, np.int64), -1)  # -1: not printable ASCII
        self._memo: dict[str, int] = {}
        #: the same for groups of up to three printable-ASCII tokens, keyed by their ids (`_group_counts`)
        self._by_ids: dict[int, int] = {}

    def clear_memo(self) -> None:
        """Forget the texts counted so far (a benchmark starts each run cold)."""
        self._memo.clear()
        self._by_ids.clear()
        if self._model._py is not None:
            self._model._py._memo.clear()

    def index(self, text: str, *, token_starts: bool = False) -> SpanIndex | None:
        """Safe offsets of text (0 and len(text) included), and unit and model counts before each; None if
        the text holds one of the model's added tokens (the tokenizer matches those across words).

        With `token_starts`, also where each whole-text token starts (`TokenStarts`): the tokens between
        two safe offsets are the tokens of that span alone, so windows of whole tokens need no other pass.
        """
        np, py = self._np, self._model._py
        if py is None or not py.handles_added(text):
            return None
        ids = self._tik._enc.encode_to_numpy(text, disallowed_special=())  # encode_ordinary, as an array
        n = len(ids)
        if n == 0:
            starts = np.zeros(0, np.int64) if token_starts else None
            return array("q", [0, len(text)]), array("q", [0, 0]), array("q", [0, 0]), starts
        both = self._last[ids[:-1]] & self._first[ids[1:]]  # flags set on both sides of each join
        join = (both & 4) != 0  # token k-1 and k share a BERT word
        wp = self._wp[ids]
        plain = wp >= 0
        alone = plain.copy()
        alone[1:] &= ~join
        alone[:-1] &= ~join
        wp[~alone] = 0
        # the character offset of each token boundary (after 0..n tokens): characters begun before it, less
        # one where the next token starts inside a character (a byte-level token may)
        begun = np.concatenate(([0], np.cumsum(self._lead[ids])))
        inside = np.append(self._cont[ids], False)
        cpos = begun - inside
        todo = np.flatnonzero(~alone)
        if len(todo):
            # groups of tokens counted together: runs of consecutive ones that are joined
            cut = np.ones(len(todo), bool)
            cut[1:] = (todo[1:] != todo[:-1] + 1) | ~join[np.maximum(todo[1:] - 1, 0)]
            starts = todo[cut]
            stops = np.append(todo[np.flatnonzero(cut)[1:] - 1], todo[-1]) + 1
            lo, hi = cpos[starts], cpos[stops]
            wp[starts] = self._group_counts(text, ids, plain, starts, stops, lo, hi)
        safe = (both & 11) != 0
        k = np.concatenate(([0], np.flatnonzero(safe) + 1, [n]))
        pos = cpos[k]
        pos[0], pos[-1] = 0, len(text)
        wcum = np.concatenate(([0], np.cumsum(wp)))[k]
        starts = None
        if token_starts:
            starts = np.where(inside[:n], -1, begun[:n])
        pos, k, wcum = (array("q", x.astype(np.int64).tobytes()) for x in (pos, k, wcum))
        return pos, k, wcum, starts

    def _group_counts(self, text: str, ids, plain, starts, stops, lo, hi):  # noqa: ANN001, ANN201 - numpy
        """Word pieces of each group of joined tokens, tokens[starts[g]:stops[g]] = text[lo[g]:hi[g]].

        Most groups are two or three printable-ASCII tokens (a long word, a year), and a corpus repeats
        them: those are keyed by their token ids (a group's text is its tokens' bytes) and each distinct
        one is counted once, the others by their text (`ModelCounter.count_fast`). Both memos persist
        (bounded)."""
        np = self._np
        n_groups = len(starts)
        vals = np.empty(n_groups, np.int64)
        size = stops - starts
        not_plain = np.concatenate(([0], np.cumsum(~plain)))
        keyed = (size <= 3) & (not_plain[stops] == not_plain[starts])
        memo, by_ids = self._memo, self._by_ids
        if len(memo) > self._MEMO_LIMIT:
            memo.clear()
        if len(by_ids) > self._MEMO_LIMIT:
            by_ids.clear()
        py = self._model._py
        assert py is not None
        py_count, count_fast = py.count, self._model.count_fast
        g = np.flatnonzero(keyed)
        if len(g):
            s, z = starts[g], size[g]
            last = len(ids) - 1
            key = (ids[s].astype(np.int64) + 1) << 42
            key |= np.where(z >= 2, ids[np.minimum(s + 1, last)].astype(np.int64) + 1, 0) << 21
            key |= np.where(z >= 3, ids[np.minimum(s + 2, last)].astype(np.int64) + 1, 0)
            uniq, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            got = []
            for k, f in zip(uniq.tolist(), g[first].tolist(), strict=True):
                c = by_ids.get(k)
                if c is None:  # printable ASCII: `count_fast` less its test for added tokens (none here)
                    c = by_ids[k] = py_count(text[lo[f] : hi[f]])
                got.append(c)
            vals[g] = np.array(got, np.int64)[inverse.reshape(-1)]
        rest = np.flatnonzero(~keyed)
        for r, x, y in zip(rest.tolist(), lo[rest].tolist(), hi[rest].tolist(), strict=True):
            piece = text[x:y]
            c = memo.get(piece)
            if c is None:
                c = memo[piece] = count_fast(piece)
            vals[r] = c
        return vals


def span_indexer(unit: Unit, model: str = DEFAULT_MODEL) -> SpanIndexer | None:
    """The indexer for a tiktoken unit and a BERT-style model (cached), else None."""
    if unit not in ("cl100k_base", "o200k_base"):
        return None
    return _span_indexer(unit, model)


@lru_cache(maxsize=4)
def _span_indexer(unit: Unit, model: str) -> SpanIndexer | None:
    tik, mc = counter(unit, model), model_counter(model)
    if not isinstance(tik, TiktokenCounter) or mc._py is None:
        return None
    with offline.LOAD_LOCK:
        return SpanIndexer(tik, mc)
