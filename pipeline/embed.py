"""Embeddings: one backend per key (torch, or an exported OpenVINO int8 / ONNX model), batched, cached.

The key (`embedding_key`) names the model and the backend whose vectors it is: torch's are the model's own
(`MODEL`), an exported backend's are another model for the embedding cache (`MODEL@openvino-int8`), so a
backend switch re-embeds what it must and reuses only vectors the same backend made.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from importlib.util import find_spec
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np

from pipeline.config import BACKEND_TAGS, DEFAULT_MODEL, base_model
from pipeline.errors import ConfigError
from pipeline.model import embed_hash
from pipeline.tokens import model_path, sentence_modules

if TYPE_CHECKING:
    from pipeline.config import Settings

log = logging.getLogger(__name__)

#: The modules each exported backend needs at run time, and the extra that installs them.
RUNTIME_MODULES = {"openvino": ("openvino",), "onnx": ("onnxruntime",)}
EXTRAS = {"openvino": "fast", "onnx": "onnx"}
#: What exporting a model for a backend needs besides its run-time modules (torch.onnx writes with `onnx`).
EXPORT_MODULES = {"openvino": ("nncf", "torch"), "onnx": ("onnx", "torch")}


class Encoder(Protocol):
    """What the stages need of a loaded model: its name, dimension and a batched `encode`."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Unit-norm float32 vectors, one row per text."""
        ...


def embedding_key(model: str, backend: str) -> str:
    """The embedding cache's model key: the model alone for torch, `MODEL@TAG` for an exported backend."""
    if backend not in BACKEND_TAGS:
        raise ConfigError(f"embedding backend {backend!r}: expected one of {', '.join(BACKEND_TAGS)}")
    tag = BACKEND_TAGS[backend]
    return f"{base_model(model)}@{tag}" if tag else base_model(model)


def split_key(key: str) -> tuple[str, str]:
    """(model, backend) of an embedding key."""
    model = base_model(key)
    tag = key[len(model) + 1 :]
    return model, next(b for b, t in BACKEND_TAGS.items() if t == tag)


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
        from pipeline.embed_export import exportable

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


def require_export_modules(model: str, backend: str, *, cache_dir: Path | None = None) -> None:
    """Refuse up front, before a run creates anything, a backend whose model must still be exported when the
    export's modules are missing (the export subprocess failed with a traceback, after an empty set was made)."""
    need = EXPORT_MODULES.get(backend, ())
    missing = [m for m in need if find_spec(m) is None]
    if not missing:
        return
    from pipeline.embed_export import export_dir, is_current

    if is_current(export_dir(model, backend, cache_dir or models_dir()), model):
        return  # exported already: running it needs only the run-time modules
    raise ConfigError(
        f"CHUNKYARD_EMBED_BACKEND={backend} exports {base_model(model)} once first, which needs "
        f"{', '.join(missing)}: pip install 'chunkyard[{EXTRAS[backend]}]'"
    )


def key_for(settings: Settings) -> str:
    """The embedding key a run or a query uses under these settings."""
    backend = resolve_backend(settings.embed_backend, device=settings.device, model=settings.model)
    return embedding_key(settings.model, backend)


def query_embedder(stored_key: str, settings: Settings) -> Encoder:
    """The embedder for a question to a collection: the one its vectors came from (its stored key), or
    this machine's backend for the same model where that one is not installed (vectors within ~0.99),
    with the model's query prompt before each question."""
    model, backend = split_key(stored_key)
    if not installed(backend):
        backend = resolve_backend(settings.embed_backend, device=settings.device)
    key = embedding_key(model, backend)
    return _prompted(_loaded(key, settings.device, settings.embed_batch_size, None), model_prompts(key).query)


def models_dir() -> Path:
    """Where exported models are kept: CHUNKYARD_DATA_DIR/models (next to the embedded Postgres)."""
    from pipeline.config import Settings

    return Settings().data_dir / "models"


class Embedder:
    """sentence-transformers on torch; `encode` takes a batch of texts and returns unit vectors (float32)."""

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


@lru_cache(maxsize=4)
def _load(key: str, device: str | None, batch_size: int, cache: Path | None) -> Encoder:
    model, backend = split_key(key)
    if backend == "torch":
        return Embedder(model, device=device, batch_size=batch_size)
    from pipeline.embed_runtime import load_exported

    return load_exported(model, backend, cache_dir=cache or models_dir(), batch_size=batch_size)


def get_embedder(
    model: str = DEFAULT_MODEL,
    device: str | None = None,
    batch_size: int = 64,
    *,
    cache_dir: Path | None = None,
) -> Encoder:
    """One loaded model per key and process, also when several task threads ask at once; it embeds
    passages, with the model's document prompt before each (`model_prompts`).

    `model` is an embedding key: a plain model name is torch; `MODEL@openvino-int8` the exported model
    (exported from the local weights on first use, into `cache_dir`, default CHUNKYARD_DATA_DIR/models).
    """
    return _prompted(_loaded(model, device, batch_size, cache_dir), model_prompts(model).document)


def _loaded(key: str, device: str | None, batch_size: int, cache_dir: Path | None) -> Encoder:
    """The model of an embedding key, loaded once per process, also when several task threads ask at once."""
    with _lock:
        return _load(key, device, batch_size, cache_dir)


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
    import json

    cfg = Path(model_path(base_model(model))) / "config_sentence_transformers.json"
    try:
        prompts = json.loads(cfg.read_text(encoding="utf-8")).get("prompts") or {}
    except (OSError, ValueError, AttributeError):
        return Prompts()

    def first(names: tuple[str, ...]) -> str:
        return next((str(prompts[n]) for n in names if prompts.get(n)), "")

    return Prompts(first(_QUERY_PROMPTS), first(_DOCUMENT_PROMPTS))


def cache_key(model: str) -> str:
    """The embedding cache's model for an embedding key: the key and its model's prompts."""
    return model + model_prompts(model).tag


class _Prompted:
    """An encoder that puts a prompt before every text it embeds."""

    def __init__(self, inner: Encoder, prompt: str) -> None:
        self.inner, self.prompt = inner, prompt
        self.name, self.dim = inner.name, inner.dim

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        return self.inner.encode([self.prompt + t for t in texts], progress=progress)


def _prompted(encoder: Encoder, prompt: str) -> Encoder:
    return _Prompted(encoder, prompt) if prompt else encoder


def model_languages(model: str) -> list[str] | None:
    """The languages a model was trained on, as its model card declares them (README.md front matter
    `language:`, one code or a list): what hybrid search weighs its vector half by. None when the card says
    nothing or "multilingual" (no language rule)."""
    import re

    readme = Path(model_path(base_model(model))) / "README.md"
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


def model_dim(model: str) -> int:
    """Embedding dimension from the model's config files, without loading the weights."""
    import json

    p = Path(model_path(model))
    dim = _modules_dim(model)
    if dim:
        return dim
    for name in ("1_Pooling/config.json", "config.json"):
        f = p / name
        if f.exists():
            cfg = json.loads(f.read_text())
            for key in ("word_embedding_dimension", "hidden_size", "dim"):
                if key in cfg:
                    return int(cfg[key])
    return get_embedder(model).dim


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


def embed_with_cache(
    texts: Sequence[str],
    *,
    lookup: Callable[[list[str]], dict[str, np.ndarray]],
    embedder: Callable[[], Encoder],
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
