"""Optional reranking: a local sentence-transformers CrossEncoder reorders a search's top candidates.

No model is shipped, so it is off unless CHUNKYARD_RERANK_MODEL names a local CrossEncoder folder (never
downloaded). `search`, `context` and `eval` then ask the store for max(k, CHUNKYARD_RERANK_CANDIDATES)
candidates, score each (question, chunk) pair, the chunk as the embedder saw it (its context, a blank
line, its text), and keep the best (docs/reranking.md). The model loads once per process.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.errors import ConfigError
from pipeline.model import embedded_text
from pipeline.store import Scorer

_lock = threading.Lock()


def scorer(query: str, settings: Settings) -> Scorer | None:
    """The configured reranker bound to one question, or None when CHUNKYARD_RERANK_MODEL is unset (off)."""
    if not settings.rerank_model:
        return None
    model = cross_encoder(settings.rerank_model, device=settings.device)
    batch = settings.embed_batch_size

    def score(chunks: Sequence[tuple[str, str]]) -> Sequence[float]:
        if not chunks:
            return []
        pairs = [(query, embedded_text(ctx, text)) for ctx, text in chunks]
        out = model.predict(pairs, batch_size=batch, show_progress_bar=False, convert_to_numpy=True)
        return [float(x) for x in out.reshape(len(pairs), -1)[:, 0]]

    return score


def cross_encoder(path: str, *, device: str | None = None) -> Any:
    """The CrossEncoder in a local folder, loaded once per process, also when several threads ask at once."""
    with _lock:
        return _load(str(path), device)


def label(settings: Settings) -> str | None:
    """What a run records of its reranker (the folder's name), or None when off."""
    return Path(settings.rerank_model).name if settings.rerank_model else None


@lru_cache(maxsize=2)
def _load(path: str, device: str | None) -> Any:
    folder = Path(path).expanduser()
    where = f"CHUNKYARD_RERANK_MODEL={path}"
    if not folder.is_dir():
        raise ConfigError(
            f"{where}: no such folder; give the path of a local sentence-transformers CrossEncoder folder "
            "(nothing is downloaded), or unset CHUNKYARD_RERANK_MODEL to search without reranking"
        )
    _check_cross_encoder(folder, where)
    from pipeline.embed.embedder import quiet_offline_transformers

    quiet_offline_transformers()
    from sentence_transformers import CrossEncoder

    try:
        return CrossEncoder(str(folder), device=device, local_files_only=True)
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise ConfigError(
            f"{where}: not a loadable CrossEncoder ({type(exc).__name__}: {str(exc).splitlines()[0][:300]}); "
            "give a folder saved by CrossEncoder.save or a *ForSequenceClassification model, or unset it"
        ) from exc


def _check_cross_encoder(folder: Path, where: str) -> None:
    """Refuse a folder that is not a cross-encoder (an embedding model loads with a random scoring head)."""
    st_cfg, hf_cfg = folder / "config_sentence_transformers.json", folder / "config.json"
    if _json(st_cfg).get("model_type") == "CrossEncoder":
        return
    if not hf_cfg.exists():
        raise ConfigError(f"{where}: no config.json in the folder; give a local CrossEncoder folder, or unset it")
    arch = _json(hf_cfg).get("architectures") or []
    if not any("ForSequenceClassification" in a for a in arch):
        raise ConfigError(
            f"{where}: not a cross-encoder (config.json architectures: {', '.join(arch) or 'none'}; an embedding "
            "model?): give a CrossEncoder folder (a *ForSequenceClassification model), or unset it"
        )


def _json(path: Path) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
