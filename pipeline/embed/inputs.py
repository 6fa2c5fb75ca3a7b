"""A model's inputs as the exported graph takes them: token ids and attention masks, from `tokenizers` alone."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from typing import Any

import numpy as np

from pipeline.embed.meta import MODEL_SPECIAL_TOKENS, model_max_tokens


@lru_cache(maxsize=4)
def load_tokenizer(model: str) -> Any:
    """The model's fast tokenizer, truncating where the model would: the same one the token counters use
    (`tokens.rust_tokenizer_json`: its tokenizer.json where transformers would load it unchanged, else what
    transformers makes of the folder), so a chunk sized by the counter is what the model reads."""
    from tokenizers import Tokenizer

    from pipeline.tokens.offline import rust_tokenizer_json

    tok = Tokenizer.from_str(rust_tokenizer_json(model))
    tok.no_padding()
    tok.enable_truncation(max_length=model_max_tokens(model) + MODEL_SPECIAL_TOKENS)
    return tok


def pad(encodings: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask of a batch, right-padded with zeros to its longest member."""
    width = max(len(e.ids) for e in encodings)
    ids = np.zeros((len(encodings), width), dtype=np.int64)
    mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, e in enumerate(encodings):
        ids[row, : len(e.ids)] = e.ids
        mask[row, : len(e.ids)] = 1
    return ids, mask
