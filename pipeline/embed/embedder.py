"""Embeddings: one loaded model per embedding key (torch, or an exported OpenVINO int8 / ONNX model), with
the model's prompts, batched, and the embedding cache's lookup-or-embed.

The key (`keys.EmbeddingKey`) names the model and the backend whose vectors it is: torch's are the model's
own (`MODEL`), an exported backend's are another model for the embedding cache (`MODEL@openvino-int8`), so
a backend switch re-embeds what it must and reuses only vectors the same backend made.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pipeline.config import DEFAULT_MODEL
from pipeline.embed.backends import installed, resolve_backend
from pipeline.embed.keys import EmbeddingKey
from pipeline.embed.meta import declared_dim, model_path, model_prompts
from pipeline.model import embed_hash

if TYPE_CHECKING:
    import numpy as np

    from pipeline.config import Settings

log = logging.getLogger(__name__)


class Encoder(Protocol):
    """What the stages need of a loaded model: its name, dimension and a batched `encode`."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Unit-norm float32 vectors, one row per text."""
        ...


def query_embedder(stored_key: str | EmbeddingKey, settings: Settings) -> Encoder:
    """The embedder for a question to a collection: the one its vectors came from (its stored key), or
    this machine's backend for the same model where that one is not installed (vectors within ~0.99),
    with the model's query prompt before each question."""
    key = EmbeddingKey.parse(stored_key)
    if not installed(key.backend):
        key = EmbeddingKey(key.model, resolve_backend(settings.embed_backend, device=settings.device))
    encoder = _loaded(key, settings.device, settings.embed_batch_size, None)
    return _prompted(encoder, model_prompts(str(key)).query)


def quiet_offline_transformers() -> None:
    """Before sentence-transformers loads a local model: nothing downloaded, no progress bars, no warnings
    of transformers' own (a model here is always a local folder)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    logging.getLogger("sentence_transformers").setLevel(logging.WARNING)


class Embedder:
    """sentence-transformers on torch; `encode` takes a batch of texts and returns unit vectors (float32)."""

    def __init__(
        self, model: str = DEFAULT_MODEL, *, device: str | None = None, batch_size: int = 64
    ) -> None:
        quiet_offline_transformers()
        from sentence_transformers import SentenceTransformer

        self.name = model
        self.batch_size = batch_size
        self.model = SentenceTransformer(model_path(model), device=device)
        dim_fn = (
            getattr(self.model, "get_embedding_dimension", None)
            or self.model.get_sentence_embedding_dimension
        )
        self.dim = int(dim_fn())

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Unit-norm float32 embeddings, batched; longest texts first so padding is minimal."""
        import numpy as np

        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        step = self.batch_size * 4
        for k in range(0, len(order), step):
            idx = order[k : k + step]
            vecs = self.model.encode(
                [texts[i] for i in idx],
                batch_size=self.batch_size,
                normalize_embeddings=True,
                convert_to_numpy=True,
                show_progress_bar=False,
            )
            out[idx] = vecs.astype(np.float32, copy=False)
            if progress:
                progress(len(idx))
        return out


_lock = threading.Lock()


@lru_cache(maxsize=4)
def _load(key: EmbeddingKey, device: str | None, batch_size: int, cache: Path | None) -> Encoder:
    if key.backend == "torch":
        return Embedder(key.model, device=device, batch_size=batch_size)
    from pipeline.embed.runtime import load_exported  # numpy and OpenVINO / ONNX Runtime, never torch

    return load_exported(key.model, key.backend, cache_dir=cache, batch_size=batch_size)


def get_embedder(
    model: str | EmbeddingKey = DEFAULT_MODEL,
    device: str | None = None,
    batch_size: int = 64,
    *,
    cache_dir: Path | None = None,
) -> Encoder:
    """One loaded model per key and process, also when several task threads ask at once; it embeds
    passages, with the model's document prompt before each (`model_prompts`).

    `model` is an embedding key: a plain model name is torch; `MODEL@openvino-int8` the exported model
    (exported from the local weights on first use, into `cache_dir`, default the per-user export cache,
    `export_cache.export_cache_dir`).
    """
    key = EmbeddingKey.parse(model)
    return _prompted(_loaded(key, device, batch_size, cache_dir), model_prompts(str(key)).document)


def _loaded(key: EmbeddingKey, device: str | None, batch_size: int, cache_dir: Path | None) -> Encoder:
    """The model of an embedding key, loaded once per process, also when several task threads ask at once."""
    with _lock:
        return _load(key, device, batch_size, cache_dir)


def cache_key(model: str) -> str:
    """The embedding cache's model for an embedding key: the key and its model's prompts."""
    return model + model_prompts(model).tag


class _Prompted:
    """An encoder that puts a prompt before every text it embeds."""

    def __init__(self, inner: Encoder, prompt: str) -> None:
        self.inner, self.prompt = inner, prompt
        self.name, self.dim = inner.name, inner.dim

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        return self.inner.encode([self.prompt + t for t in texts], progress=progress)


def _prompted(encoder: Encoder, prompt: str) -> Encoder:
    return _Prompted(encoder, prompt) if prompt else encoder


def model_dim(model: str) -> int:
    """Embedding dimension from the model's config files, else from the loaded model."""
    return declared_dim(model) or get_embedder(model).dim


def embed_with_cache(
    texts: Sequence[str],
    *,
    lookup: Callable[[list[str]], dict[str, np.ndarray]],
    embedder: Callable[[], Encoder],
    progress: Callable[[int], None] | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Vectors for texts by hash: cached ones from `lookup`, the rest embedded once each.

    Returns (hash -> vector for every text, hashes that were embedded now).
    """
    by_hash: dict[str, str] = {}
    for t in texts:
        by_hash.setdefault(embed_hash(t), t)
    found = lookup(list(by_hash)) if by_hash else {}
    missing = [h for h in by_hash if h not in found]
    if progress and found:
        progress(len(found))
    if missing:
        vecs = embedder().encode([by_hash[h] for h in missing], progress=progress)
        for h, v in zip(missing, vecs, strict=True):
            found[h] = v
    return found, missing
