"""Which backend runs a model here: torch, or an exported OpenVINO int8 / ONNX model, told without importing
any of them; and the embedding key a run or a query uses under the settings."""

from __future__ import annotations

import os
from importlib.util import find_spec
from typing import TYPE_CHECKING

from pipeline.embed.export import exportable
from pipeline.embed.export_cache import require_export_modules
from pipeline.embed.keys import BACKEND_TAGS, EXTRAS, RUNTIME_MODULES, EmbeddingKey
from pipeline.errors import ConfigError

if TYPE_CHECKING:
    from pipeline.config import Settings


def installed(backend: str) -> bool:
    """Whether a backend's run-time modules are importable (without importing them)."""
    return all(find_spec(m) is not None for m in RUNTIME_MODULES.get(backend, ("torch",)))


def cuda_present() -> bool:
    """An NVIDIA driver and a CUDA build of torch, told without importing torch (seconds on a CPU box)."""
    from importlib.metadata import PackageNotFoundError, version

    if not os.path.exists("/proc/driver/nvidia/version"):
        return False
    try:
        return "+cpu" not in version("torch")
    except PackageNotFoundError:
        return False


def resolve_backend(backend: str = "auto", *, device: str | None = None, model: str | None = None) -> str:
    """The backend to run: `auto` is torch on a GPU, else OpenVINO int8 when installed (measured faster) and
    the model can be exported (mean or CLS pooling, nothing after it), else torch."""
    if backend == "auto":
        if (device and not device.startswith("cpu")) or (device is None and cuda_present()):
            return "torch"
        if not (installed("openvino") and find_spec("nncf") is not None):
            return "torch"
        return "openvino" if model is None or exportable(model) else "torch"
    if backend not in BACKEND_TAGS:
        raise ConfigError(f"CHUNKYARD_EMBED_BACKEND={backend!r}: expected auto, {', '.join(BACKEND_TAGS)}")
    if not installed(backend):
        raise ConfigError(
            f"CHUNKYARD_EMBED_BACKEND={backend} needs {', '.join(RUNTIME_MODULES[backend])}: "
            f"pip install 'chunkyard[{EXTRAS[backend]}]'"
        )
    if model is not None:
        require_export_modules(model, backend)
    return backend


def key_for(settings: Settings, model: str | None = None) -> EmbeddingKey:
    """The embedding key a run or a query uses under these settings (for `model`, default theirs)."""
    model = settings.model if model is None else model
    return EmbeddingKey(model, resolve_backend(settings.embed_backend, device=settings.device, model=model))
