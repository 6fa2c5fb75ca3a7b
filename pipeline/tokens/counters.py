"""Counters: text measured in one unit (tiktoken tokens, the model's word pieces, characters, words)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Protocol, cast

from pipeline.config import DEFAULT_MODEL, Unit
from pipeline.tokens import offline
from pipeline.tokens.offline import rust_tokenizer_json, tiktoken_encoding
from pipeline.tokens.wordpiece import AsciiWordPieces

#: (start, end) character offsets of each token of a text, in order.
Offsets = list[tuple[int, int]]

#: Start offsets, end offsets and word ids of the word pieces of a text (see `ModelCounter.word_pieces`).
WordPieces = tuple[list[int], list[int], list[int | None]]


class Counter(Protocol):
    """Anything that measures text in one unit; the chunkers use nothing else of a tokenizer."""

    name: str

    def count(self, text: str) -> int:
        """Tokens of text."""
        ...

    def count_many(self, texts: Sequence[str]) -> list[int]:
        """`count` of each text, batched where the tokenizer can."""
        ...

    def encode_offsets(self, text: str) -> Offsets:
        """Character span of each token; a token holding part of a character spans that character."""
        ...


class TiktokenCounter:
    """cl100k_base / o200k_base token counts."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._enc = tiktoken_encoding(name)

    def count(self, text: str) -> int:
        return len(self._enc.encode_ordinary(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(self._enc.encode_ordinary(t)) for t in texts]

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)

    def encode_offsets(self, text: str) -> Offsets:
        """Characters each token touches: a byte-level token may start or end inside a UTF-8 character."""
        out: Offsets = []
        pos = 0  # characters begun so far (counted by their first byte)
        for tok in self._enc.decode_tokens_bytes(self._enc.encode_ordinary(text)):
            start = pos - 1 if 0x80 <= tok[0] < 0xC0 else pos  # a continuation byte: inside the last one
            pos += len(tok) if tok.isascii() else sum(1 for c in tok if not 0x80 <= c < 0xC0)
            out.append((start, pos))
        return out


class ModelCounter:
    """Word pieces of the embedding model, without the special tokens it adds."""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.name = "model"
        # Counting goes straight to a private copy of the Rust tokenizer: the transformers wrapper costs
        # ~0.2 ms a call (the chunkers count tens of thousands of spans), and a copy never inherits
        # truncation or padding that a caller of the shared tokenizer may have set.
        from tokenizers import Tokenizer

        self._fast = Tokenizer.from_str(rust_tokenizer_json(model))
        self._fast.no_truncation()
        self._fast.no_padding()
        # BERT-style: cut at whitespace and punctuation, then each word word-pieced on its own
        self._bert = (
            type(self._fast.pre_tokenizer).__name__ == "BertPreTokenizer"
            and type(self._fast.normalizer).__name__ == "BertNormalizer"
            and type(self._fast.model).__name__ == "WordPiece"
        )
        self._py = AsciiWordPieces.of(self._fast) if self._bert else None

    def count(self, text: str) -> int:
        return len(self._fast.encode(text, add_special_tokens=False))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e) for e in self._fast.encode_batch(list(texts), add_special_tokens=False)]

    def encode_offsets(self, text: str) -> Offsets:
        return list(self._fast.encode(text, add_special_tokens=False).offsets)

    def count_fast(self, text: str) -> int:
        """`count`, in Python where that is exact and faster (printable ASCII under a BERT tokenizer)."""
        py = self._py
        if py is not None and py.handles(text):
            return py.count(text)
        return len(self._fast.encode(text, add_special_tokens=False))

    def word_pieces(self, text: str) -> WordPieces | None:
        """Offsets and word ids of text's word pieces, or None where a span's count cannot be read off them.

        With a BERT-style tokenizer a span whose ends fall between words has exactly the pieces that lie
        inside it, so the chunkers count spans of a section from one tokenization; other tokenizers
        (byte-level BPE, SentencePiece) merge across such ends, so they get None and count each span.
        """
        if not self._bert:
            return None
        enc = self._fast.encode(text, add_special_tokens=False)
        return [s for s, _ in enc.offsets], [e for _, e in enc.offsets], list(enc.word_ids)


class CharCounter:
    """Characters (code points)."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(t) for t in texts]

    def encode_offsets(self, text: str) -> Offsets:
        return [(i, i + 1) for i in range(len(text))]


_WORD = re.compile(r"\S+")


class WordCounter:
    """Whitespace-separated words."""

    name = "words"

    def count(self, text: str) -> int:
        return len(_WORD.findall(text))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        return [len(_WORD.findall(t)) for t in texts]

    def encode_offsets(self, text: str) -> Offsets:
        return [m.span() for m in _WORD.finditer(text)]


@lru_cache(maxsize=8)
def counter(unit: Unit, model: str = DEFAULT_MODEL) -> Counter:
    """The counter for a unit; cached, so tokenizers load once per process (and one thread at a time)."""
    if unit in ("cl100k_base", "o200k_base"):
        with offline.LOAD_LOCK:
            return TiktokenCounter(unit)
    if unit == "model":
        with offline.LOAD_LOCK:
            return ModelCounter(model)
    if unit == "chars":
        return CharCounter()
    if unit == "words":
        return WordCounter()
    raise ValueError(f"unknown unit {unit!r}")


def model_counter(model: str = DEFAULT_MODEL) -> ModelCounter:
    """The model's word-piece counter, typed as such (its `word_pieces` is not part of `Counter`)."""
    return cast(ModelCounter, counter("model", model))
