"""Embedding: model metadata, the embedding key, backends, the export cache, loaded models, the cache lookup.

Modules, each importing only those above it: `keys` (EmbeddingKey, backend facts), `meta` (what a model's
folder declares; `pipeline.tokens` imports it), `inputs` (token ids for an exported graph), `export` (build
an OpenVINO / ONNX graph), `export_cache` (where exports live, made once), `backends` (which backend runs
here, the key under the settings), `runtime` (run an export without torch), `embedder` (torch models, one
per key, prompts, the embedding cache). torch, sentence-transformers, OpenVINO and numpy load lazily.
"""

from pipeline.embed.backends import cuda_present, installed, key_for, resolve_backend
from pipeline.embed.embedder import (
    Embedder,
    Encoder,
    cache_key,
    embed_with_cache,
    get_embedder,
    model_dim,
    query_embedder,
)
from pipeline.embed.export_cache import export_cache_dir, require_export_modules
from pipeline.embed.keys import BACKEND_TAGS, EmbeddingKey, base_model, embedding_key
from pipeline.embed.meta import (
    MODEL_SPECIAL_TOKENS,
    Prompts,
    model_languages,
    model_max_tokens,
    model_path,
    model_prompts,
    sentence_modules,
)

__all__ = [
    "BACKEND_TAGS",
    "MODEL_SPECIAL_TOKENS",
    "EmbeddingKey",
    "Embedder",
    "Encoder",
    "Prompts",
    "base_model",
    "cache_key",
    "cuda_present",
    "embed_with_cache",
    "embedding_key",
    "export_cache_dir",
    "get_embedder",
    "installed",
    "key_for",
    "model_dim",
    "model_languages",
    "model_max_tokens",
    "model_path",
    "model_prompts",
    "query_embedder",
    "require_export_modules",
    "resolve_backend",
    "sentence_modules",
]
