"""The optional reranking stage: off unless CHUNKYARD_RERANK_MODEL names a local CrossEncoder; then its scores
order `search`, `context` and `eval`. The cross-encoder is a tiny BERT built here (never downloaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import ingested_folder
from typer.testing import CliRunner

from pipeline import rerank, store
from pipeline.cli import app
from pipeline.embed.meta import model_path
from pipeline.errors import ConfigError
from pipeline.evaluate.live import run_live_eval
from pipeline.model import embedded_text
from pipeline.search import search

DOCS = {
    "keys.txt": "Rotating the API keys every quarter keeps the service safe.",
    "service.txt": "The service runs every day. The service is safe. The service restarts at night.",
    "bees.txt": "Honey bee colonies raise a new queen when the old one fails.",
    "guide.md": "# Guide\n\n## Keys\n\nCreate the new key first, deploy it, then revoke the old key.\n\n"
    "## Bees\n\nA hive needs a queen.\n",
}
QUERY = "how do I rotate the API keys?"
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def tiny_cross_encoder(tmp_path_factory) -> str:
    """A 1-layer BERT (hidden size 16) with a one-logit head and a vocabulary of the words used here, saved
    as a CrossEncoder folder: a real forward pass, in milliseconds."""
    import torch
    from sentence_transformers import CrossEncoder
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("models") / "tiny-cross-encoder"
    raw = folder.parent / "tiny-bert"
    raw.mkdir()
    words = sorted({w.strip(".,?#!").lower() for t in [*DOCS.values(), QUERY, *DOCS] for w in t.split()} - {""})
    (raw / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(raw / "vocab.txt"), do_lower_case=True)
    torch.manual_seed(0)
    config = BertConfig(
        vocab_size=tokenizer.vocab_size, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=128, num_labels=1, initializer_range=0.5,
    )  # fmt: skip
    BertForSequenceClassification(config).save_pretrained(raw)
    tokenizer.save_pretrained(raw)
    CrossEncoder(str(raw), device="cpu", local_files_only=True).save(str(folder))
    return str(folder)


@pytest.fixture
def small(tmp_path, settings):
    return ingested_folder(tmp_path / "small", DOCS, settings)


@pytest.fixture
def bees_first(monkeypatch, tiny_cross_encoder):
    """The tiny model's real predict, with 100 added for the chunk about honey bees: the reranker's choice is known."""
    model = rerank.cross_encoder(tiny_cross_encoder)
    real = model.predict
    calls: list[list] = []

    def predict(pairs, **kw):
        calls.append(list(pairs))
        out = np.asarray(real(pairs, **kw), dtype=np.float32)
        return out + np.array([100.0 if "honey" in p.lower() else 0.0 for _, p in pairs], dtype=np.float32)

    monkeypatch.setattr(model, "predict", predict)
    return calls


def _with(settings, **kw):
    return settings.model_copy(update=kw)


def test_off_by_default(settings, conn, small):
    """Unset: no model is loaded and search and context return what the store's SQL search returns."""
    rerank._load.cache_clear()
    assert settings.rerank_model is None and rerank.scorer(QUERY, settings) is None
    got = search(QUERY, settings=settings, k=3)
    from pipeline.embed import query_embedder

    coll = store.get_collection(conn, "default")
    vec = query_embedder(coll.embed_model, settings).encode([QUERY])[0]
    assert got == store.search(conn, "default", vec, k=3, query_text=QUERY, mode="hybrid")
    ctx = search(QUERY, settings=settings, budget=40)
    assert ctx == store.context(conn, "default", vec, budget=40, query_text=QUERY, mode="hybrid")
    assert rerank._load.cache_info().currsize == 0


def test_order_comes_from_the_cross_encoder(settings, small, tiny_cross_encoder, bees_first):
    """The chunk the cross-encoder scores highest comes first in search and context, with its score; the
    search's own first hit does not; the reranker saw the chunk as embedded (context, blank line, text)."""
    plain = search(QUERY, settings=settings, k=2, whole_sections=None)
    assert not plain[0].text.startswith("Honey")
    on = _with(settings, rerank_model=tiny_cross_encoder, rerank_candidates=50)
    got = search(QUERY, settings=on, k=2, whole_sections=None)
    assert got[0].text.startswith("Honey") and got[0].score > 100 > got[1].score
    assert len(bees_first) == 1 and len(bees_first[0]) > 2  # every candidate in one call, not only the top k
    assert all(q == QUERY for q, _ in bees_first[0])
    assert any(p.startswith("Guide") and "\n\n" in p for _, p in bees_first[0])  # the chunk's context first
    # --no-rerank (rerank=False) is the search's own order
    assert search(QUERY, settings=on, k=2, whole_sections=None, rerank=False) == plain
    ctx = search(QUERY, settings=on, budget=30, whole_sections=None)
    assert ctx[0].text.startswith("Honey") and ctx[0].score > 100


def test_real_forward_pass_through_search_and_context(settings, conn, small, tiny_cross_encoder):
    """The tiny model unpatched: search's top k are the candidates by its scores (computed here again with a
    CrossEncoder of our own); context reads the reranked order, its offsets still the document's text."""
    from sentence_transformers import CrossEncoder

    on = _with(settings, rerank_model=tiny_cross_encoder, rerank_candidates=50)
    got = search(QUERY, settings=on, k=3, whole_sections=None)
    rows = conn.execute("SELECT id, context, text FROM chunks").fetchall()
    own = CrossEncoder(tiny_cross_encoder, device="cpu", local_files_only=True)
    scores = own.predict([(QUERY, embedded_text(c, t)) for _, c, t in rows], show_progress_bar=False)
    best = sorted(zip(scores.tolist(), [r[0] for r in rows], strict=True), key=lambda x: -x[0])[:3]
    assert [h.chunk_id for h in got] == [i for _, i in best]
    assert [h.score for h in got] == pytest.approx([s for s, _ in best], abs=1e-5)
    texts = store.collection_texts(conn, "default")
    for budget in (20, 1000):
        ctx = search(QUERY, settings=on, budget=budget)
        ranked = [h for h in ctx if not h.metadata.get("completes_section")]
        assert ranked[0].chunk_id == best[0][1]
        assert [h.score for h in ranked] == sorted((h.score for h in ranked), reverse=True)
        for h in ctx:
            assert texts[h.source_uri][h.char_start : h.char_end] == h.text
        assert ctx[-1].tokens_before < budget
    # a section most of which is retrieved still comes back whole from a reranked top k
    whole = search(QUERY, settings=on, k=50)
    assert any(h.metadata.get("whole_section") for h in whole) or len(whole) == len(rows)


def test_bad_path_is_a_config_error(settings, small, tmp_path):
    """A missing folder, an embedding model's folder, an empty folder: a ConfigError naming the setting, and
    from the CLI a one-line error, never a traceback; --rerank with nothing set says what to set."""
    for path, says in [
        (tmp_path / "nowhere", "no such folder"),
        (model_path(), "not a cross-encoder"),
        (tmp_path, "no config.json"),
    ]:
        with pytest.raises(ConfigError, match="CHUNKYARD_RERANK_MODEL") as e:
            search(QUERY, settings=_with(settings, rerank_model=str(path)), k=2)
        assert says in str(e.value)
    with pytest.raises(ConfigError, match="CHUNKYARD_RERANK_MODEL"):
        search(QUERY, settings=settings, k=2, rerank=True)
    env = dict(os.environ, CHUNKYARD_DATABASE_URL=settings.database_url, CHUNKYARD_RERANK_MODEL=str(tmp_path / "no"),
               PYTHONPATH=str(ROOT))  # this checkout's pipeline, whichever one is installed  # fmt: skip
    res = subprocess.run([sys.executable, "-m", "pipeline.cli", "search", QUERY], capture_output=True, text=True,
                         env=env, cwd=tmp_path, timeout=300)  # fmt: skip
    assert res.returncode == 2 and "Traceback" not in res.stderr + res.stdout, res.stderr
    assert "CHUNKYARD_RERANK_MODEL" in res.stderr and "no such folder" in res.stderr
    ok = CliRunner().invoke(
        app, ["search", QUERY, "--no-rerank", "--json"], env={"CHUNKYARD_RERANK_MODEL": str(tmp_path / "no")}
    )
    assert ok.exit_code == 0, ok.output


def test_eval_passes_it_through(settings, conn, small, tiny_cross_encoder, bees_first, tmp_path):
    """`chunkyard eval --collection` searches with the reranker: its retrieved order is the reranker's, the run
    records it, and it gets a baseline of its own (never judged against the run without reranking)."""
    qs = tmp_path / "qa.jsonl"
    qs.write_text(json.dumps({"question": QUERY, "document": "keys.txt", "answers": ["Rotating the API keys"]}))
    plain = run_live_eval("default", qs, k=1, mode="hybrid", settings=settings)
    assert plain["rerank"] is None and plain["is_baseline"]
    on = _with(settings, rerank_model=tiny_cross_encoder)
    got = run_live_eval("default", qs, k=1, mode="hybrid", settings=on)
    assert got["rerank"] == Path(tiny_cross_encoder).name and got["is_baseline"] and bees_first
    assert got["recall"] < plain["recall"]  # the reranker put the bees first
    per_q = conn.execute("SELECT per_question FROM eval_results WHERE run_id = %s", (got["run_id"],)).fetchone()[0]
    assert per_q[0]["retrieved"][0][0].endswith("bees.txt")
    again = run_live_eval("default", qs, k=1, mode="hybrid", settings=on)
    assert again["baseline_run_id"] == got["run_id"] and again["passed"]
