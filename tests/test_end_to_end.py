"""The walking skeleton, end to end against a real Postgres: ingest, offsets, search, idempotence."""

from __future__ import annotations

import numpy as np

from pipeline import store
from pipeline.embed import get_embedder
from pipeline.ingest import run_ingest


def _counts(conn) -> dict[str, int]:
    return {
        t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # noqa: S608 - fixed table names
        for t in ("documents", "sections", "chunks", "embedding_cache")
    }


def test_ingest_sample_folder(docs, settings, conn):
    stats, run_id, status = run_ingest([docs], settings=settings)
    assert status == "completed", stats.errors
    assert stats.counts["documents_seen"] == 4
    assert stats.counts["documents_new"] == 4
    counts = _counts(conn)
    assert counts["documents"] == 4
    assert counts["sections"] >= 10
    assert counts["chunks"] == stats.counts["chunks_written"] > 0
    # every embedding set and unit length
    missing = "SELECT count(*) FROM chunks c WHERE NOT EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = c.id)"
    assert conn.execute(missing).fetchone()[0] == 0
    norms = [
        float(np.linalg.norm(store.as_array(v)))
        for (v,) in conn.execute("SELECT embedding FROM chunk_embeddings")
    ]
    assert np.allclose(norms, 1.0, atol=1e-3)
    # the offset contract, checked in SQL
    bad = conn.execute(
        """SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id
           WHERE substr(d.normalized_text, c.char_start + 1, c.char_end - c.char_start) <> c.text"""
    ).fetchone()[0]
    assert bad == 0
    # chunks lie inside their section
    outside = conn.execute(
        """SELECT count(*) FROM chunks c JOIN sections s ON s.id = c.section_id
           WHERE c.char_start < s.char_start OR c.char_end > s.char_end"""
    ).fetchone()[0]
    assert outside == 0
    # ledger
    run = conn.execute("SELECT status, counts FROM runs WHERE id = %s", (run_id,)).fetchone()
    assert run[0] == "completed" and run[1]["documents_new"] == 4


def test_search_finds_the_obvious_chunk(docs, settings, conn):
    run_ingest([docs], settings=settings)
    vec = get_embedder(settings.model).encode(["how do I rotate the API keys?"])[0]
    hits = store.search(conn, "default", vec, k=3, with_parent=True)
    assert hits[0].source_uri.endswith("operations.html")
    assert "rotate the API keys" in hits[0].text
    assert hits[0].heading_path[-1] == "Rotating API keys"
    assert "revoke" in hits[0].parent_text
    hybrid = store.search(conn, "default", vec, k=3, query_text="rotate API keys", mode="hybrid")
    assert hybrid[0].source_uri.endswith("operations.html")


def test_second_ingest_adds_nothing(docs, settings, conn):
    run_ingest([docs], settings=settings)
    before = _counts(conn)
    ids_before = conn.execute("SELECT array_agg(id ORDER BY id) FROM chunks").fetchone()[0]
    stats, _, status = run_ingest([docs], settings=settings)
    assert status == "completed"
    assert stats.counts["documents_unchanged"] == 4
    assert stats.counts["chunks_embedded"] == 0
    assert _counts(conn) == before
    assert conn.execute("SELECT array_agg(id ORDER BY id) FROM chunks").fetchone()[0] == ids_before
