"""Any embedding model per collection, and model switches without downtime.

The second model is built here from the shipped all-MiniLM-L6-v2 (a seeded linear layer to 768 dimensions
after its pooling), never downloaded: a 384- and a 768-dimensional collection live side by side, and a
collection moves from one to the other while it is searched, or after a SIGKILL in the middle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import psycopg
import pytest

from pipeline import store
from pipeline.config import DEFAULT_MODEL, Settings
from pipeline.embed.meta import model_path
from pipeline.errors import ConfigError
from pipeline.ingest import run_ingest, run_model_switch
from pipeline.search import search

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
QUESTION = "how do I rotate the API keys?"


@pytest.fixture(scope="session")
def wide_model(tmp_path_factory) -> str:
    """all-MiniLM-L6-v2 with a seeded 384 -> 768 linear layer and normalisation: another model, 768 wide."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    base = SentenceTransformer(model_path(DEFAULT_MODEL), device="cpu")
    torch.manual_seed(0)
    dense = models.Dense(384, 768, activation_function=torch.nn.Identity())
    folder = tmp_path_factory.mktemp("models") / "minilm-wide-768"
    SentenceTransformer(modules=[*base, dense, models.Normalize()], device="cpu").save(str(folder))
    return str(folder)


def _sets(conn) -> list[tuple[str, int, str]]:
    rows = conn.execute(
        """SELECT c.name, s.dim, s.status FROM embedding_sets s JOIN collections c ON c.id = s.collection_id
           ORDER BY c.name, s.id"""
    ).fetchall()
    conn.commit()
    return rows


def test_two_dimensions_side_by_side(docs, settings, conn, wide_model):
    """A 384- and a 768-dimensional collection: each indexed for its dimension, each searched by SQL and by
    the CLI's search with its own model; a query vector of the wrong size is refused with a clear error."""
    run_ingest([docs], settings=settings, collection="small")
    run_ingest(
        [docs], settings=Settings(database_url=settings.database_url, model=wide_model), collection="wide"
    )
    assert _sets(conn) == [("small", 384, "active"), ("wide", 768, "active")]
    defs = [
        r[0]
        for r in conn.execute("SELECT indexdef FROM pg_indexes WHERE indexname LIKE 'chunk_vectors_%_hnsw'")
    ]
    assert sorted(d.split("::vector(")[1].split(")")[0] for d in defs) == ["384", "768"]
    for name in ("small", "wide"):
        hits = search(QUESTION, settings=settings, collection=name, k=3, mode="vector")
        assert hits and "operations" in hits[0].source_uri, (name, hits)
        hybrid = search(QUESTION, settings=settings, collection=name, k=3, mode="hybrid")
        assert hybrid and "operations" in hybrid[0].source_uri
    # in SQL, with each collection's own vectors
    for name, dim in (("small", 384), ("wide", 768)):
        vec = conn.execute(
            "SELECT e.embedding FROM chunk_embeddings e JOIN collections c ON c.id = e.collection_id "
            "WHERE c.name = %s LIMIT 1",
            (name,),
        ).fetchone()[0]
        assert len(store.as_array(vec)) == dim
        rows = conn.execute("SELECT chunk_id, score FROM chunkyard_search(%s, %s, 1)", (name, vec)).fetchall()
        assert rows and rows[0][1] == pytest.approx(1.0, abs=1e-4)
    conn.commit()
    with pytest.raises(psycopg.errors.DataException, match=r"is embedded with .*\(768 dimensions\); the query vector has 384"):
        conn.execute("SELECT * FROM chunkyard_search('wide', %s, 3)", (np.ones(384, dtype=np.float32),))
    conn.rollback()
    # the CLI
    out = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "search", QUESTION, "-c", "wide", "-k", "1", "--json"],
        capture_output=True, text=True, env={**os.environ, "CHUNKYARD_DATABASE_URL": settings.database_url},
        timeout=300,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "operations" in out.stdout
    # asking an existing collection for another model says how to switch, and writes nothing
    with pytest.raises(ConfigError, match="chunkyard reindex --collection small --model"):
        run_ingest(
            [docs],
            settings=Settings(database_url=settings.database_url, model=wide_model),
            collection="small",
        )
    assert _sets(conn) == [("small", 384, "active"), ("wide", 768, "active")]


def test_switch_under_concurrent_search_never_fails_or_comes_back_empty(docs, settings, conn, wide_model):
    """Searches loop while the collection moves to the 768-dimensional model: none errs or returns nothing;
    the chunk rows are the same before and after (only vectors are new), and the old set is gone."""
    run_ingest([docs], settings=settings)
    chunks_before = conn.execute("SELECT id, embed_hash FROM chunks ORDER BY id").fetchall()
    dry = run_model_switch("default", wide_model, settings=settings, dry_run=True)
    assert dry.stats.counts["to_embed"] == len(chunks_before) and dry.stats.counts["in_cache"] == 0
    assert _sets(conn) == [("default", 384, "active")]  # a dry run writes nothing

    stop = threading.Event()
    errors: list[BaseException] = []
    empty: list[str] = []
    dims: set[int] = set()
    done = [0]

    def loop() -> None:
        while not stop.is_set():
            for mode in ("vector", "hybrid"):
                try:
                    hits = search(QUESTION, settings=settings, k=3, mode=mode)
                except BaseException as exc:  # reported in the test's thread
                    errors.append(exc)
                    continue
                if not hits:
                    empty.append(mode)
                done[0] += 1
            with psycopg.connect(settings.database_url) as c:
                dims.add(c.execute("SELECT dim FROM collections WHERE name = 'default'").fetchone()[0])

    t = threading.Thread(target=loop)
    t.start()
    try:
        time.sleep(1.0)
        result = run_model_switch("default", wide_model, settings=settings, batch=8)
        time.sleep(1.0)
    finally:
        stop.set()
        t.join(120)
    assert result.status == "completed", result.stats.errors
    assert result.stats.counts["switched"] == 1 and result.stats.counts["chunks_embedded"] == len(
        chunks_before
    )
    assert not errors, errors[:3]
    assert not empty and done[0] >= 4
    assert dims == {384, 768}  # the loop searched both before and after the switch
    assert _sets(conn) == [("default", 768, "active")]
    assert conn.execute("SELECT id, embed_hash FROM chunks ORDER BY id").fetchall() == chunks_before
    assert (
        conn.execute("SELECT count(*) FROM pg_tables WHERE tablename LIKE 'chunk_vectors_%'").fetchone()[0]
        == 1
    )
    # an incremental run afterwards keeps every chunk and writes new ones with the new model
    (docs / "extra.md").write_text("# Keys\n\nRotate the signing keys every ninety days.\n", encoding="utf-8")
    again = run_ingest([docs], settings=settings)
    assert again.stats.counts["documents_new"] == 1 and again.stats.counts.get("sections_rechunked", 0) <= 2
    assert again.stats.counts["documents_unchanged"] == 4
    missing = "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = c.id)"
    assert conn.execute(missing).fetchone()[0] == 0


def test_sigkill_mid_switch_leaves_the_old_model_serving_and_the_next_run_resumes(
    docs, settings, conn, wide_model
):
    """A switch killed with SIGKILL halfway: the old set still answers, the new one is 'building' with what
    was written; the next switch to the same model goes on from there and completes."""
    for i in range(12):  # enough chunks for many small batches
        (docs / f"notes-{i:02}.md").write_text(
            "\n\n".join(
                f"# Part {j}\n\nNote {i}.{j}: keys, tokens, certificates and their rotation."
                for j in range(8)
            ),
            encoding="utf-8",
        )
    run_ingest([docs], settings=settings)
    n_chunks = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    conn.commit()
    code = (
        "import sys; from pipeline.ingest import run_model_switch; "
        "run_model_switch('default', sys.argv[1], batch=2)"
    )
    env = {**os.environ, "CHUNKYARD_DATABASE_URL": settings.database_url}
    proc = subprocess.Popen([sys.executable, "-c", code, wide_model], env=env, cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        written = 0
        while time.monotonic() < deadline and proc.poll() is None:
            row = conn.execute("SELECT s.id FROM embedding_sets s WHERE s.status = 'building'").fetchone()
            conn.commit()
            if row:
                written = conn.execute(f"SELECT count(*) FROM chunk_vectors_{row[0]}").fetchone()[0]
                conn.commit()
                if written >= 10:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the switch ended before it could be killed"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert 10 <= written < n_chunks
    assert _sets(conn) == [("default", 384, "active"), ("default", 768, "building")]
    hits = search(QUESTION, settings=settings, k=3, mode="hybrid")  # the old model answers
    assert (
        hits
        and len(store.as_array(conn.execute("SELECT embedding FROM chunk_embeddings LIMIT 1").fetchone()[0]))
        == 384
    )
    conn.commit()
    status = store.status(conn)["runs"][0]
    assert status["kind"] == "reindex" and status["status"] == "crashed"
    done = status["counts"].get("chunks_embedded", 0) + status["counts"].get("chunks_cached", 0)
    assert done >= written - 2  # the ledger showed the progress, batch by batch

    result = run_model_switch("default", wide_model, settings=settings)
    c = result.stats.counts
    assert result.status == "completed" and c["resumed"] == 1 and c["switched"] == 1
    assert (
        c["vectors_kept"] >= 10 and c["vectors_kept"] + c["chunks_embedded"] + c["chunks_cached"] == n_chunks
    )
    assert _sets(conn) == [("default", 768, "active")]
    hits = search(QUESTION, settings=settings, k=3, mode="vector")
    assert hits and "operations" in hits[0].source_uri


def test_auto_backend_keeps_a_model_the_exporter_cannot_reproduce_on_torch(wide_model):
    """The exported graph is transformer + pooling (+ normalisation): a model with a Dense layer after the
    pooling would come out 384 wide, so `auto` runs it on torch, and the dimension is the Dense layer's."""
    from pipeline.embed import model_dim, resolve_backend
    from pipeline.embed.export import exportable

    assert exportable(DEFAULT_MODEL) and not exportable(wide_model)
    assert resolve_backend("auto", device="cpu", model=wide_model) == "torch"
    assert model_dim(wide_model) == 768 and model_dim(DEFAULT_MODEL) == 384


@pytest.fixture
def prompted_model(tmp_path) -> Path:
    """all-MiniLM-L6-v2 saved with e5-style prompts in its config_sentence_transformers.json."""
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "minilm-prompted"
    SentenceTransformer(model_path(DEFAULT_MODEL), device="cpu", prompts={"query": "query: ", "passage": "passage: "}).save(
        str(folder)
    )
    return folder


def test_a_models_prompts_reach_it_for_passages_and_queries_and_never_mix(docs, settings, conn, prompted_model):
    """A model that declares prompts gets its passage prompt before every chunk it embeds and its query
    prompt before every question; the prompts are part of the chunks' fingerprints and of the cache key, so
    changing them re-embeds the collection instead of mixing vectors."""
    import json

    from sentence_transformers import SentenceTransformer

    from pipeline import embed
    from pipeline.embed import model_prompts, query_embedder

    key = str(prompted_model)
    assert model_prompts(key) == embed.Prompts("query: ", "passage: ")
    prompted = Settings(database_url=settings.database_url, model=key)
    run_ingest([docs], settings=prompted, collection="p")
    raw = SentenceTransformer(key, device="cpu")
    text, vec = conn.execute(
        """SELECT CASE WHEN c.context = '' THEN c.text ELSE c.context || E'\n\n' || c.text END, e.embedding
           FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id ORDER BY c.id LIMIT 1"""
    ).fetchone()
    plain, with_prompt = raw.encode([text, "passage: " + text], normalize_embeddings=True)
    got = np.asarray(vec.to_numpy(), dtype=np.float32)
    assert np.allclose(got, with_prompt, atol=1e-4) and not np.allclose(got, plain, atol=1e-3)
    q = query_embedder(key, prompted).encode([QUESTION])[0]
    assert np.allclose(q, raw.encode(["query: " + QUESTION], normalize_embeddings=True)[0], atol=1e-4)
    assert [h.text for h in search(QUESTION, settings=prompted, collection="p", k=1)]
    # new prompts: every chunk is embedded again with them, none is taken from the cache
    cfg = prompted_model / "config_sentence_transformers.json"
    data = json.loads(cfg.read_text())
    data["prompts"] = {"query": "Query: ", "passage": "Passage: "}
    cfg.write_text(json.dumps(data))
    model_prompts.cache_clear()
    stats = run_ingest([docs], settings=prompted, collection="p").stats
    n = conn.execute("SELECT count(*) FROM chunks c JOIN collections l ON l.id = c.collection_id WHERE l.name = 'p'").fetchone()[0]
    assert stats.counts["chunks_embedded"] == n and stats.counts.get("chunks_cached", 0) == 0
    text, vec = conn.execute(
        """SELECT CASE WHEN c.context = '' THEN c.text ELSE c.context || E'\n\n' || c.text END, e.embedding
           FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id ORDER BY c.id LIMIT 1"""
    ).fetchone()
    assert np.allclose(np.asarray(vec.to_numpy(), dtype=np.float32), raw.encode(["Passage: " + text], normalize_embeddings=True)[0], atol=1e-4)
