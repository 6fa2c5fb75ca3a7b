"""The embedding key: which model, and which backend's vectors of it (one parse, one format).

Stored in the database as text (`embedding_sets.model`, `embedding_cache.model`, run parameters):
torch's vectors are the model's own, keyed by the model alone (`MODEL`); an exported backend's are another
model for the cache (`MODEL@openvino-int8`). A tag this module does not know is part of the model's name
(`/models/a@b` is a folder).
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import ConfigError

#: Embedding backends and the tag their vectors carry in the embedding key (torch: the model's own vectors).
BACKEND_TAGS = {"torch": "", "openvino": "openvino-int8", "onnx": "onnx-fp32"}
_BACKEND_OF_TAG = {tag: backend for backend, tag in BACKEND_TAGS.items() if tag}

#: The modules each exported backend needs at run time, and the extra that installs them.
RUNTIME_MODULES = {"openvino": ("openvino",), "onnx": ("onnxruntime",)}
EXTRAS = {"openvino": "fast", "onnx": "onnx"}
#: What exporting a model for a backend needs besides its run-time modules (torch.onnx writes with `onnx`).
EXPORT_MODULES = {"openvino": ("nncf", "torch"), "onnx": ("onnx", "torch")}


def _split(text: str) -> tuple[str, str]:
    """(model, backend) of a key's text: the only place the `@` is read."""
    name, sep, tag = text.rpartition("@")
    if sep and tag in _BACKEND_OF_TAG:
        return name, _BACKEND_OF_TAG[tag]
    return text, "torch"


@dataclass(frozen=True)
class EmbeddingKey:
    """A model and the backend whose vectors of it these are; `str(key)` is the stored text."""

    model: str
    backend: str = "torch"

    def __post_init__(self) -> None:
        if self.backend not in BACKEND_TAGS:
            raise ConfigError(
                f"embedding backend {self.backend!r}: expected one of {', '.join(BACKEND_TAGS)}"
            )
        model, _ = _split(self.model)  # another key given as the model: its model (tags never stack)
        object.__setattr__(self, "model", model)

    @classmethod
    def parse(cls, key: str | EmbeddingKey) -> EmbeddingKey:
        """The key of a stored text (a plain model name is torch's); a key as it is."""
        return key if isinstance(key, EmbeddingKey) else cls(*_split(key))

    @property
    def tag(self) -> str:
        """What the key's text carries after `@`: '' for torch."""
        return BACKEND_TAGS[self.backend]

    def __str__(self) -> str:
        return f"{self.model}@{self.tag}" if self.tag else self.model


def embedding_key(model: str, backend: str) -> str:
    """The stored text of a model's key on a backend: the model alone for torch, `MODEL@TAG` otherwise."""
    return str(EmbeddingKey(model, backend))


def base_model(key: str | EmbeddingKey) -> str:
    """The model of an embedding key (`MODEL@openvino-int8` -> `MODEL`); a plain model name as it is."""
    return EmbeddingKey.parse(key).model
