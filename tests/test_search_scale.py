"""What keeps search fast on large collections: BM25 statistics kept by triggers, the bounded candidate set
(exact scores for what it returns), index scans inside the search functions' plans, the bulk-load path."""

from __future__ import annotations

import numpy as np
import psycopg
import pytest

from pipeline import db, store
from pipeline.ingest import run_ingest
from tests.test_search import _bm25_by_hand

pytestmark = pytest.mark.slow  # `many` ingests and embeds 200 files for each test that takes it

WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november oscar papa".split()  # noqa: SIM905


def _stats(conn) -> tuple[list, tuple]:
    terms = conn.execute("SELECT collection_id, lexeme, df FROM fts_terms ORDER BY 1, 2").fetchall()
    coll = conn.execute(
        "SELECT fts_chunks, fts_len_total, fts_lexemes_total, fts_avg_len FROM collections WHERE name = 'default'"
    ).fetchone()
    return terms, coll


def test_statistics_follow_every_write(docs, settings, conn):
    """Inserts, re-chunked sections, pruned files: the kept statistics equal a recount from the rows."""
    run_ingest([docs], settings=settings)
    (docs / "faq.txt").write_text("Completely new words: zebra quokka axolotl.\n\nAnd a second paragraph.\n")
    (docs / "getting-started.md").unlink()
    run_ingest([docs], settings=settings)
    kept = _stats(conn)
    assert kept[0] and kept[1][0] == conn.execute("SELECT count(*) FROM chunks WHERE tsv <> ''").fetchone()[0]
    coll_id = store.get_collection(conn, "default").id
    store.recount_fts_stats(conn, coll_id)
    recount = _stats(conn)
    assert kept[0] == recount[0]
    assert kept[1][:3] == recount[1][:3] and kept[1][3] == pytest.approx(recount[1][3])
    # a collection's statistics go with it, and chunks deleted with it touch no other collection's
    store.drop_collection(conn, "default")
    assert conn.execute("SELECT count(*) FROM fts_terms").fetchone()[0] == 0


@pytest.fixture
def many(tmp_path, settings):
    """200 one-chunk files of 6 words drawn from 16: every word is frequent, as in a large collection."""
    rng = np.random.default_rng(3)
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(200):
        (folder / f"f{i:03}.txt").write_text(" ".join(rng.choice(WORDS, 6)) + ".\n", encoding="utf-8")
    run_ingest([folder], settings=settings)
    return folder


def test_bounded_candidates_return_exact_scores(many, conn):
    """With a candidate budget far below the matches, the returned chunks carry their exact BM25 scores, and
    the best chunk (the one holding most of the rare words) is still found."""
    query = "alpha bravo charlie delta echo"
    exact = _bm25_by_hand(conn, query)
    full = conn.execute("SELECT chunk_id, score FROM chunkyard_fulltext_search('default', %s, 10)", (query,))
    full = full.fetchall()
    assert [c for c, _ in full] == sorted(exact, key=lambda c: (-exact[c], c))[:10]
    tight = conn.execute(
        "SELECT chunk_id, score FROM chunkyard_fulltext_search('default', %s, 10, p_max_candidates => 5)",
        (query,),
    ).fetchall()
    assert tight and len(tight) <= 10
    for chunk_id, score in tight:
        assert score == pytest.approx(exact[chunk_id], rel=1e-9)
    assert tight[0][1] == pytest.approx(max(exact.values()), rel=1e-9)


def _plans(conn: psycopg.Connection, statement: str, params: tuple, *, sort: bool = True) -> str:
    """The plans of every statement a call runs (auto_explain), as generic plans of prepared statements; on a
    tiny table a sequential scan or a sort would win, so those are priced out: the question is whether the
    indexes can drive the plan with the functions' joins and filters in it."""
    notices: list[str] = []
    conn.add_notice_handler(lambda d: notices.append(d.message_primary or ""))
    try:
        conn.execute("LOAD 'auto_explain'")
    except psycopg.errors.InsufficientPrivilege:
        pytest.skip("auto_explain needs a superuser")
    for setting in ("auto_explain.log_min_duration = 0", "auto_explain.log_nested_statements = on",
                    "auto_explain.log_level = notice", "plan_cache_mode = force_generic_plan",
                    "enable_seqscan = off", f"enable_sort = {'on' if sort else 'off'}"):  # fmt: skip
        conn.execute(f"SET {setting}")
    conn.execute(statement, params, prepare=True)
    conn.execute(statement, params, prepare=True)
    return "\n".join(notices)


def test_search_functions_use_their_indexes_in_generic_plans(many, database_url):
    """HNSW drives the vector searches with the collection and soft-delete filters inside its scan; the GIN
    index finds the BM25 candidates, through server-side prepared statements with generic plans."""
    q = np.random.default_rng(1).standard_normal(384).astype(np.float32)
    with db.connection(database_url) as conn:
        plans = _plans(conn, "SELECT * FROM chunkyard_search(%s, %s, %s)", ("default", q, 5), sort=False)
        hnsw = f"Index Scan using chunk_vectors_{store.get_collection(conn, 'default').vectors.id}_hnsw"
        assert hnsw in plans, plans
        assert "Filter: ((SubPlan 1) IS NULL)" in plans, plans  # soft-deleted documents, inside the scan
    with db.connection(database_url) as conn:
        plans = _plans(
            conn, "SELECT * FROM chunkyard_fulltext_search(%s, %s, %s)", ("default", "alpha kilo", 5)
        )
        assert "Bitmap Index Scan on chunks_tsv_idx" in plans, plans
    with db.connection(database_url) as conn:
        plans = _plans(
            conn,
            "SELECT * FROM chunkyard_hybrid_search(%s, %s, %s, %s)",
            ("default", q, "alpha kilo", 5),
            sort=False,
        )
        assert hnsw in plans, plans


def test_bulk_load_builds_indexes_after(docs, settings, conn, monkeypatch):
    """A first load large enough drops the search indexes, writes each batch's new documents in one
    transaction, and builds the indexes when the run finishes: the same rows as the per-document path."""
    written: list[int] = []
    real = store.write_documents

    def spy(*a, **kw):
        out = real(*a, **kw)
        written.append(len(out))
        return out

    monkeypatch.setattr(store, "bulk_load_pays", lambda conn, n: True)
    monkeypatch.setattr(store, "write_documents", spy)
    run_ingest([docs], settings=settings)
    assert sum(written) == 4  # every file of the folder, in bulk
    assert store.bulk_mode(conn, store.get_collection(conn, "default").vectors.id) is False  # HNSW is back
    assert conn.execute("SELECT to_regclass('chunks_tsv_idx') IS NOT NULL").fetchone()[0]
    bad = conn.execute(
        """SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id
           WHERE substr(d.normalized_text, c.char_start + 1, c.char_end - c.char_start) <> c.text"""
    ).fetchone()[0]
    assert bad == 0
    n_bulk = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
    hits = store.search(conn, "default", None, k=3, query_text="rotate the keys", mode="fulltext")
    assert hits and n_bulk > 0
    # a second run over the same folder finds everything stored unchanged
    result = run_ingest([docs], settings=settings)
    assert result.stats.counts["documents_unchanged"] == 4


def test_concurrent_rewrites_of_one_collection_queue_instead_of_deadlocking(many, database_url):
    """Two transactions that each delete a chunk and insert one (a document rewritten) update the same
    statistics rows twice; they wait for each other instead of deadlocking, and the counts stay exact."""
    import threading

    copy = """INSERT INTO chunks (section_id, document_id, collection_id, ordinal, text, content_hash, embed_hash,
                                  char_start, char_end, token_count)
              SELECT section_id, document_id, collection_id, ordinal + 1000, text, content_hash, embed_hash,
                     char_start, char_end, token_count FROM chunks WHERE id = %s"""
    with psycopg.connect(database_url) as a, psycopg.connect(database_url) as b:
        first, second = (r[0] for r in a.execute("SELECT id FROM chunks ORDER BY id LIMIT 2").fetchall())
        a.commit()
        errors: list[BaseException] = []

        def other() -> None:
            try:
                b.execute("DELETE FROM chunks WHERE id = %s", (second,))
                b.execute(copy, (first,))
                b.commit()
            except BaseException as exc:  # reported below, in the test's thread
                errors.append(exc)

        a.execute("DELETE FROM chunks WHERE id = %s", (first,))
        t = threading.Thread(target=other)
        t.start()
        t.join(0.5)
        a.execute(copy, (second,))
        a.commit()
        t.join(30)
        assert not t.is_alive() and not errors, errors
    with db.connection(database_url) as conn:
        kept = _stats(conn)
        store.recount_fts_stats(conn, store.get_collection(conn, "default").id)
        assert kept[0] == _stats(conn)[0]
