"""A model's inputs as the exported graph takes them: token ids and attention masks, from `tokenizers` alone."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from pipeline.embed.meta import MODEL_SPECIAL_TOKENS, model_max_tokens, model_path


@lru_cache(maxsize=4)
def load_tokenizer(model: str) -> Any:
    """The model's fast tokenizer from its tokenizer.json, truncating where the model would."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(Path(model_path(model)) / "tokenizer.json"))
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
