"""Embeddings with sentence-transformers: offline, batched, normalized, cached by model + text hash."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache

import numpy as np

from pipeline.config import DEFAULT_MODEL
from pipeline.model import embed_hash
from pipeline.tokens import model_path

log = logging.getLogger(__name__)


class Embedder:
    """A loaded model; `encode` takes a batch of texts and returns unit vectors (float32)."""

    def __init__(
        self, model: str = DEFAULT_MODEL, *, device: str | None = None, batch_size: int = 64
    ) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        import transformers
        from sentence_transformers import SentenceTransformer

        transformers.utils.logging.disable_progress_bar()
        transformers.utils.logging.set_verbosity_error()

        logging.getLogger("sentence_transformers").setLevel(logging.WARNING)
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


@lru_cache(maxsize=2)
def _load(model: str, device: str | None, batch_size: int) -> Embedder:
    return Embedder(model, device=device, batch_size=batch_size)


def get_embedder(model: str = DEFAULT_MODEL, device: str | None = None, batch_size: int = 64) -> Embedder:
    """One loaded model per process, also when several task threads ask at once."""
    with _lock:
        return _load(model, device, batch_size)


def model_dim(model: str) -> int:
    """Embedding dimension from the model's config files, without loading the weights."""
    import json
    from pathlib import Path

    p = Path(model_path(model))
    for name in ("1_Pooling/config.json", "config.json"):
        f = p / name
        if f.exists():
            cfg = json.loads(f.read_text())
            for key in ("word_embedding_dimension", "hidden_size", "dim"):
                if key in cfg:
                    return int(cfg[key])
    return get_embedder(model).dim


def embed_with_cache(
    texts: Sequence[str],
    *,
    lookup: Callable[[list[str]], dict[str, np.ndarray]],
    embedder: Callable[[], Embedder],
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
