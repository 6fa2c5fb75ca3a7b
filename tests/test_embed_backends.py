"""Embedding backends: keys, export once from local weights, vectors close to torch's, cache separation.

A tiny BERT (random weights, the real tokenizer, 384 dimensions) makes export and quantisation take seconds;
one slow test checks the shipped all-MiniLM-L6-v2 (exported once per machine into the per-user export cache).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from pipeline.config import DEFAULT_MODEL, Settings
from pipeline.embed import (
    Embedder,
    EmbeddingKey,
    base_model,
    embedding_key,
    get_embedder,
    key_for,
    resolve_backend,
)
from pipeline.embed.meta import model_path
from pipeline.errors import ConfigError
from pipeline.ingest import run_ingest, run_model_switch

TEXTS = [
    "how do I rotate the API keys?",
    "Postgres stores the chunks, their offsets and their embeddings in one table. " * 6,
    "short",
]


def test_keys_round_trip_and_resolve_to_the_model():
    assert embedding_key(DEFAULT_MODEL, "torch") == DEFAULT_MODEL
    key = embedding_key(DEFAULT_MODEL, "openvino")
    assert key == f"{DEFAULT_MODEL}@openvino-int8"
    assert EmbeddingKey.parse(key) == EmbeddingKey(DEFAULT_MODEL, "openvino")
    assert EmbeddingKey.parse(DEFAULT_MODEL) == EmbeddingKey(DEFAULT_MODEL, "torch")
    assert embedding_key(key, "onnx") == f"{DEFAULT_MODEL}@onnx-fp32"  # never stacked
    assert base_model("/models/a@b") == "/models/a@b"  # an unknown tag is part of the name
    assert model_path(key) == model_path(DEFAULT_MODEL)
    assert str(key_for(Settings(embed_backend="torch"))) == DEFAULT_MODEL
    with pytest.raises(ConfigError, match="backend"):
        embedding_key(DEFAULT_MODEL, "tpu")


@pytest.mark.parametrize(
    ("text", "model", "backend"),
    [
        (DEFAULT_MODEL, DEFAULT_MODEL, "torch"),
        (f"{DEFAULT_MODEL}@openvino-int8", DEFAULT_MODEL, "openvino"),
        ("/m/e5@onnx-fp32", "/m/e5", "onnx"),
        ("/models/a@b", "/models/a@b", "torch"),  # an unknown tag: a folder's name
        ("x@", "x@", "torch"),
        ("/models/a@b@openvino-int8", "/models/a@b", "openvino"),
    ],
)
def test_a_stored_key_parses_and_formats_back_byte_for_byte(text, model, backend):
    """Keys are stored in the database: parsing one and writing it back gives the same text."""
    key = EmbeddingKey.parse(text)
    assert (key.model, key.backend) == (model, backend)
    assert str(key) == text == str(EmbeddingKey(model, backend))
    assert EmbeddingKey.parse(key) is key and {key, EmbeddingKey(model, backend)} == {key}


def test_auto_is_torch_on_a_gpu_device():
    assert resolve_backend("auto", device="cuda") == "torch"
    assert resolve_backend("torch") == "torch"


# ------------------------------------------------------------------------------------- tiny model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> str:
    """A sentence-transformers folder: 1-layer BERT with random weights, the shipped model's tokenizer."""
    from transformers import BertConfig, BertModel

    src = Path(model_path(DEFAULT_MODEL))
    dst = tmp_path_factory.mktemp("tiny") / "tiny-bert"
    cfg = BertConfig(hidden_size=384, num_hidden_layers=1, num_attention_heads=4, intermediate_size=128)
    BertModel(cfg).save_pretrained(dst)
    names = (
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.txt",
        "special_tokens_map.json",
        "modules.json",
    )
    for name in (*names, "sentence_bert_config.json", "config_sentence_transformers.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / name)
    shutil.copytree(src / "1_Pooling", dst / "1_Pooling")
    return str(dst)


@pytest.fixture(scope="session")
def models_cache(tmp_path_factory) -> Path:
    """A throwaway export cache (CHUNKYARD_EXPORT_CACHE): the tests' exports go there."""
    return tmp_path_factory.mktemp("data") / "models"


def _cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1)


@pytest.mark.slow
def test_openvino_int8_export_is_close_to_torch_and_made_once(tiny_model, models_cache):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    from pipeline.embed.export_cache import export_dir

    ov = get_embedder(embedding_key(tiny_model, "openvino"), cache_dir=models_cache)
    vecs = ov.encode(TEXTS)
    ref = Embedder(tiny_model).encode(TEXTS)
    assert vecs.shape == (3, 384) and vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-3)
    assert _cosines(vecs, ref).min() > 0.95  # random weights quantise worse than trained ones
    folder = export_dir(tiny_model, "openvino", models_cache)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["tag"] == "openvino-int8" and (folder / "model.xml").exists()
    assert "FakeQuantize" in (folder / "model.xml").read_text()  # int8: NNCF quantised it
    stamp = (folder / "meta.json").stat().st_mtime_ns
    from pipeline.embed.runtime import load_exported

    again = load_exported(tiny_model, "openvino", cache_dir=models_cache, batch_size=2)
    assert (folder / "meta.json").stat().st_mtime_ns == stamp  # loaded, not exported again
    assert np.allclose(again.encode(TEXTS), vecs, atol=2e-2)  # other batch size, same vectors
    assert again.encode([]).shape == (0, 384)


def test_onnx_export_matches_torch(tiny_model, models_cache):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    vecs = get_embedder(embedding_key(tiny_model, "onnx"), cache_dir=models_cache).encode(TEXTS)
    assert _cosines(vecs, Embedder(tiny_model).encode(TEXTS)).min() > 0.9999


@pytest.mark.slow
def test_a_backend_switch_re_embeds_once_and_reuses_only_its_own_vectors(
    docs, database_url, conn, tiny_model, models_cache, monkeypatch
):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    monkeypatch.setenv("CHUNKYARD_EXPORT_CACHE", str(models_cache))

    def settings(backend: str) -> Settings:
        return Settings(database_url=database_url, model=tiny_model, embed_backend=backend)

    first = run_ingest([docs], settings=settings("torch")).stats.counts
    n = first["chunks_embedded"]
    assert n > 0
    # another backend's vectors are another model's: an ingest does not mix them in, it says how to switch
    with pytest.raises(ConfigError, match="chunkyard reindex --collection default --model"):
        run_ingest([docs], settings=settings("openvino"))
    switched = run_model_switch("default", tiny_model, settings=settings("openvino")).stats.counts
    assert switched["chunks_embedded"] == n and switched["chunks_cached"] == 0  # none reused
    key = embedding_key(tiny_model, "openvino")
    assert conn.execute("SELECT model FROM embedding_sets WHERE status = 'active'").fetchone()[0] == key
    cached = dict(conn.execute("SELECT model, count(*) FROM embedding_cache GROUP BY model").fetchall())
    assert cached == {tiny_model: n, key: n}
    back = run_model_switch("default", tiny_model, settings=settings("torch")).stats.counts
    assert back["chunks_embedded"] == 0 and back["chunks_cached"] == n  # torch's own vectors, from the cache
    assert run_ingest([docs], settings=settings("torch")).stats.counts["documents_unchanged"] == 4


@pytest.mark.slow
def test_shipped_model_int8_is_close_to_torch():
    """all-MiniLM-L6-v2 through OpenVINO int8 (exported once per machine into the per-user export cache)."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    ov = get_embedder(embedding_key(DEFAULT_MODEL, "openvino"))
    cos = _cosines(ov.encode(TEXTS), get_embedder(DEFAULT_MODEL).encode(TEXTS))
    assert cos.mean() > 0.99 and cos.min() > 0.98


# ---------------------------------------------------------------------------------- start-up, lazily

_CLI = """
import sys
from pipeline.cli import main
sys.argv = ["chunkyard", *sys.argv[1:]]
try:
    main()
except SystemExit as e:
    assert e.code in (0, None), e.code
heavy = sorted(m for m in ("torch", "transformers", "sentence_transformers", "prefect") if m in sys.modules)
print("HEAVY:", ",".join(heavy) or "none")
"""


def _cli(*args: str, env: dict | None = None) -> str:
    """Run the CLI in a fresh interpreter; its output ends with the heavy modules it imported."""
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _CLI, *args], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **(env or {})})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.subprocess
def test_importing_the_cli_loads_nothing_heavy():
    import subprocess
    import sys

    code = "import sys, pipeline.cli; print(sorted(m for m in ('torch', 'pydantic_settings', 'psycopg', "
    code += "'prefect', 'transformers', 'openvino', 'numpy') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    assert _cli("--help").rstrip().endswith("HEAVY: none")


@pytest.mark.subprocess
def test_search_imports_no_torch(docs, database_url, tiny_model, models_cache, monkeypatch):
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    env = {"CHUNKYARD_EXPORT_CACHE": str(models_cache), "CHUNKYARD_MODEL": tiny_model,
           "CHUNKYARD_EMBED_BACKEND": "openvino", "CHUNKYARD_DATABASE_URL": database_url}  # fmt: skip
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    run_ingest([docs], settings=Settings())  # exports the tiny model (once per session) and embeds
    fulltext = _cli("search", "rotate API keys", "-k", "1", "--mode", "fulltext", env=env)
    assert "operations.html" in fulltext.replace("\n", "") and fulltext.rstrip().endswith("HEAVY: none")
    vector = _cli("search", "rotate API keys", "-k", "2", env=env)  # hybrid: embeds the question
    assert "operations.html" in vector.replace("\n", "") and vector.rstrip().endswith("HEAVY: none")


def test_exported_models_tokenize_as_the_counters_do(tmp_path):
    """The exported runtime's tokenizer is the token counters' one: where tokenizer.json's normalizer
    disagrees with tokenizer_config.json (a model saved by another tool), both follow what transformers
    loads, so a chunk sized by the counter is exactly what the model reads."""
    from pipeline import tokens
    from pipeline.embed.inputs import load_tokenizer

    src = Path(model_path(DEFAULT_MODEL))
    folder = tmp_path / "cased-json"
    shutil.copytree(src, folder, ignore=shutil.ignore_patterns("*.safetensors", "*.bin", "onnx", "openvino"))
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    spec["normalizer"]["lowercase"] = False  # the config still says do_lower_case: true
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    text = "Rotate The API Keys in Straße"
    try:
        expected = tokens.hf_tokenizer(str(folder))(text, add_special_tokens=False)["input_ids"]
        got = load_tokenizer(str(folder)).encode(text, add_special_tokens=False).ids
        assert got == expected
        assert got == load_tokenizer(DEFAULT_MODEL).encode(text.lower(), add_special_tokens=False).ids
    finally:
        load_tokenizer.cache_clear()
        tokens.rust_tokenizer_json.cache_clear()
        tokens.hf_tokenizer.cache_clear()
