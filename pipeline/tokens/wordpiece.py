"""BERT's WordPiece count of printable-ASCII text, in Python, exactly as the Rust tokenizer counts it."""

from __future__ import annotations

import re
from typing import Any

#: What the Python word-piece count leaves to the tokenizer: anything but printable ASCII, tab and newlines
#: (control characters are dropped by BERT's normalizer, so they join the words around them).
_NOT_PLAIN_ASCII = re.compile(r"[^\t\n\r -~]")


class AsciiWordPieces:
    """BERT word pieces of printable-ASCII text, counted in Python exactly as the Rust tokenizer counts them.

    On such text BERT's normalizer only lowercases (accents, CJK and control characters do not occur), its
    pre-tokenizer makes each run of letters and digits a word and each other printable character a word of
    its own, and WordPiece cuts a word greedily into the longest vocabulary entries ("##" after the first),
    or gives one [UNK] for the whole word if a piece is missing or the word is too long. A text that holds
    one of the tokenizer's added tokens ("[MASK]") is left to the tokenizer, which matches those first.
    The counts of words are remembered (a word is counted once per process, up to a bound).
    """

    _MEMO_LIMIT = 1 << 18

    def __init__(
        self,
        vocab: dict[str, int],
        prefix: str,
        max_chars: int,
        lowercase: bool,
        added: list[str],
        tokenize: Any = None,
    ):
        self._vocab, self._prefix, self._max, self._lower = vocab, prefix, max_chars, lowercase
        #: the tokenizer's own WordPiece model (`tokenizers.models.WordPiece.tokenize`): the same greedy
        #: search in Rust, 2-3x faster than the Python one below on the words the chunkers meet
        self._tokenize = tokenize
        self._words = re.compile(
            r"[a-z0-9]+|[!-/:-@\[-`{-~]" if lowercase else r"[A-Za-z0-9]+|[!-/:-@\[-`{-~]"
        )
        self._added = re.compile("|".join(re.escape(a) for a in added)) if added else None
        # ASCII added tokens are found without lowercasing the text: ignoring case matches every text whose
        # lowercase holds one (and a few more, such as the Kelvin sign for "k": those go to the tokenizer)
        self._added_any_case = (
            re.compile(self._added.pattern, re.IGNORECASE)
            if self._added is not None and all(a.isascii() for a in added)
            else None
        )
        self._added_other = any(not a.startswith("[") for a in added)  # BERT's are all "[...]"
        self._memo: dict[str, int] = {}
        # no piece is longer than the longest vocabulary entry: the greedy search starts there
        self._first_len = max(map(len, vocab), default=0)
        self._next_len = max((len(k) - len(prefix) for k in vocab if k.startswith(prefix)), default=0)

    @classmethod
    def of(cls, tok) -> AsciiWordPieces | None:  # noqa: ANN001 - a tokenizers.Tokenizer
        """The counter for a BERT-style tokenizer, or None where its settings are not the ones handled."""
        import json

        cfg = json.loads(tok.to_str())
        norm, model = cfg.get("normalizer") or {}, cfg.get("model") or {}
        if norm.get("type") != "BertNormalizer" or model.get("type") != "WordPiece":
            return None
        if not isinstance(model.get("vocab"), dict) or not model.get("unk_token"):
            return None
        # added tokens are matched in the raw text (normalized=False) or the lowercased one: texts are
        # searched lowercased, for every case at once
        added = [a["content"].lower() for a in cfg.get("added_tokens") or [] if a.get("content")]
        return cls(
            dict(model["vocab"]),
            str(model.get("continuing_subword_prefix") or "##"),
            int(model.get("max_input_chars_per_word") or 100),
            bool(norm.get("lowercase", True)),
            sorted(set(added)),
            getattr(tok.model, "tokenize", None),
        )

    def handles_added(self, text: str) -> bool:
        """Whether text holds none of the tokenizer's added tokens, in any case."""
        if self._added is None or "[" not in text and not self._added_other:
            return True
        if self._added_any_case is not None:
            return self._added_any_case.search(text) is None
        return self._added.search(text.lower()) is None

    def handles(self, text: str) -> bool:
        """Whether `count` is exact for text."""
        return text.isascii() and _NOT_PLAIN_ASCII.search(text) is None and self.handles_added(text)

    def count(self, text: str) -> int:
        memo, n = self._memo, 0
        for w in self._words.findall(text.lower() if self._lower else text):
            c = memo.get(w)
            if c is None:
                if len(memo) >= self._MEMO_LIMIT:
                    memo.clear()
                c = memo[w] = self._word(w)
            n += c
        return n

    def _word(self, w: str) -> int:
        size = len(w)
        if size > self._max:
            return 1
        vocab = self._vocab
        if w in vocab:
            return 1
        if self._tokenize is not None:
            return len(self._tokenize(w))
        return self._greedy(w)

    def _greedy(self, w: str) -> int:
        """WordPiece's greedy longest-match count of a word, in Python (where the model cannot be called)."""
        size, vocab = len(w), self._vocab
        end = min(size, self._first_len)
        while end > 0 and w[:end] not in vocab:
            end -= 1
        if end == 0:
            return 1  # one [UNK] for the whole word
        prefix, longest, n, start = self._prefix, self._next_len, 1, end
        while start < size:
            end = min(size, start + longest)
            while end > start and prefix + w[start:end] not in vocab:
                end -= 1
            if end == start:
                return 1
            n += 1
            start = end
        return n
