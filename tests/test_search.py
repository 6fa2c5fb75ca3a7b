"""The SQL search functions users call: BM25 full text, hybrid fusion, and the schema upgrade they need."""

from __future__ import annotations

import json
import math

import numpy as np
import psycopg
import pytest
from conftest import ingested_folder
from typer.testing import CliRunner

from pipeline import db, store
from pipeline.cli import app
from pipeline.config import strategy_profile
from pipeline.embed import get_embedder
from pipeline.errors import ConfigError
from pipeline.ingest import run_ingest

DOCS = {
    "keys.txt": "Rotating the API keys every quarter keeps the service safe.",
    "service.txt": "The service runs every day. The service is safe. The service restarts at night.",
    "bees.txt": "Honey bee colonies raise a new queen when the old one fails.",
}


@pytest.fixture
def small(tmp_path, settings):
    return ingested_folder(tmp_path / "small", DOCS, settings)


def _bm25_by_hand(conn, query: str, k1: float = 1.2, b: float = 0.75) -> dict[int, float]:
    """Okapi BM25 of every chunk, computed here from the stored full-text vectors."""
    rows = conn.execute("SELECT id, tsv::text FROM chunks").fetchall()
    terms = {
        r[0]
        for r in conn.execute("SELECT lexeme FROM unnest(to_tsvector('english', %s))", (query,)).fetchall()
    }
    tf: dict[int, dict[str, int]] = {}
    for cid, tsv in rows:
        counts = {}
        for lex, n in conn.execute(
            "SELECT lexeme, coalesce(array_length(positions, 1), 1) FROM unnest(%s::tsvector)", (tsv,)
        ).fetchall():
            counts[lex] = n
        tf[cid] = counts
    n_docs = len(tf)
    avgdl = sum(sum(c.values()) for c in tf.values()) / n_docs
    scores = {}
    for cid, counts in tf.items():
        dl = sum(counts.values())
        s = 0.0
        for t in terms:
            df = sum(1 for c in tf.values() if t in c)
            if t in counts:
                idf = math.log(1 + (n_docs - df + 0.5) / (df + 0.5))
                f = counts[t]
                s += idf * f * (k1 + 1) / (f + k1 * (1 - b + b * dl / avgdl))
        if s > 0:
            scores[cid] = s
    return scores


def test_fulltext_is_bm25_with_english_stemming(small, conn):
    # "rotate" and "keys" match "Rotating" and "keys" only through stemming
    hits = store.search(conn, "default", None, k=3, query_text="how do I rotate a key?", mode="fulltext")
    assert [h.source_uri.rsplit("/", 1)[-1] for h in hits] == ["keys.txt"]
    # a rare word outweighs a frequent one: "quarter" (1 chunk) beats "service" said three times in another
    query = "service quarter"
    hits = store.search(conn, "default", None, k=3, query_text=query, mode="fulltext")
    assert hits[0].source_uri.endswith("keys.txt")
    assert hits[1].source_uri.endswith("service.txt")
    expected = _bm25_by_hand(conn, query)
    assert {h.chunk_id: pytest.approx(h.score, rel=1e-9) for h in hits} == expected
    # no indexed word (stop words only): nothing, not everything
    assert store.search(conn, "default", None, k=3, query_text="the and of", mode="fulltext") == []


def test_fts_statistics_are_stored_after_each_run(small, tmp_path, settings, conn):
    def stats():
        return conn.execute(
            """SELECT col.fts_chunks, col.fts_avg_len,
                      (SELECT count(*) FROM chunks c WHERE c.collection_id = col.id)
               FROM collections col WHERE name = 'default'"""
        ).fetchone()

    n, avg_len, chunks = stats()
    assert n == chunks == 3 and avg_len > 3
    (small / "more.txt").write_text("Another small file about keys and locks.\n", encoding="utf-8")
    run_ingest([small], settings=settings)
    n, _, chunks = stats()
    assert n == chunks == 4


def test_hybrid_fusions(small, settings, conn):
    emb = get_embedder(settings.model)
    off_topic = emb.encode(["honey bee colonies and their queens"])[0]
    assert store.search(conn, "default", off_topic, k=1)[0].source_uri.endswith("bees.txt")
    for mode in ("hybrid", "rrf"):
        hits = store.search(conn, "default", off_topic, k=3, query_text="rotating keys quarterly", mode=mode)
        assert len(hits) == 3
        uris = [h.source_uri.rsplit("/", 1)[-1] for h in hits]
        assert "keys.txt" in uris[:2], (mode, uris)  # lifted by its words, though far in vector space
        assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
        assert all(isinstance(h.metadata, dict) for h in hits), hits  # the chunk's metadata, last column
    kinds = conn.execute("SELECT DISTINCT jsonb_typeof(metadata) FROM chunks").fetchall()
    assert kinds == [("object",)]  # stored as a JSON object, not a JSON string holding one
    # full-text matches nothing: hybrid is the vector ranking
    hits = store.search(conn, "default", off_topic, k=3, query_text="zzzz", mode="hybrid")
    assert [h.chunk_id for h in hits] == [h.chunk_id for h in store.search(conn, "default", off_topic, k=3)]
    with pytest.raises(psycopg.errors.InvalidParameterValue, match="p_fusion must be"):
        conn.execute(
            "SELECT * FROM chunkyard_hybrid_search('default', %s, 'keys', 5, false, p_fusion => 'max')",
            (off_topic,),
        )


def test_search_cli_modes(small):
    runner = CliRunner()
    res = runner.invoke(app, ["search", "rotate keys", "-k", "1"])  # hybrid by default
    assert res.exit_code == 0, res.output
    assert "keys.txt" in res.output
    res = runner.invoke(app, ["search", "rotate keys", "-k", "1", "--mode", "fulltext"])
    assert res.exit_code == 0 and "keys.txt" in res.output
    # a context of a budget of tokens: the first chunk spends it (the last one read may go past it)
    res = runner.invoke(app, ["search", "rotate keys", "--budget", "3", "--json"])
    assert res.exit_code == 0, res.output
    (only,) = json.loads(res.output)
    assert only["source_uri"].endswith("keys.txt") and only["tokens_before"] == 0 and only["tokens"] > 3
    res = runner.invoke(app, ["search", "rotate keys", "--budget", "1000"])
    assert res.exit_code == 0 and res.output.count(" tokens  ") == len(DOCS), res.output
    res = runner.invoke(app, ["search", "rotate keys", "--mode", "bm99"])
    assert isinstance(res.exception, ConfigError) and "--mode 'bm99'" in str(
        res.exception
    )  # exit 2 in main()


def test_search_embeds_with_the_collections_model_not_the_settings(small, tmp_path):
    """The question is embedded with the model the collection's vectors came from (its stored key): a
    CHUNKYARD_MODEL meant for another collection, here a folder that is not there, is never loaded."""
    env = {"CHUNKYARD_MODEL": str(tmp_path / "no-such-model")}
    res = CliRunner().invoke(app, ["search", "rotate keys", "-k", "1", "--mode", "vector", "--json"], env=env)
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)[0]["source_uri"].endswith("keys.txt")


def test_upgrade_from_schema_version_1(pg_server, monkeypatch):
    """A database made by version 1 (ts_rank RRF, 'simple' full text) upgrades in place, rows kept."""
    from psycopg import sql

    from tests.conftest import _with_db

    name = "upgrade_v1"
    with psycopg.connect(pg_server, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = _with_db(pg_server, name)
    first = [p for p in db.migration_files() if p.name.startswith("001_")]
    with monkeypatch.context() as m:
        m.setattr(db, "migration_files", lambda: first)
        m.setattr(db, "function_files", lambda: [])
        with psycopg.connect(url) as c:
            db.migrate(c)
            # version 1's hybrid function signature, and one stored chunk
            c.execute(
                """CREATE FUNCTION chunkyard_hybrid_search(text, vector, text, integer DEFAULT 5,
                       boolean DEFAULT false, integer DEFAULT 60, integer DEFAULT 50)
                   RETURNS TABLE (chunk_id bigint) LANGUAGE sql AS $$ SELECT 1::bigint $$"""
            )
            c.execute(
                """WITH col AS (INSERT INTO collections (name, profile, model, dim)
                                VALUES ('old', '{}', 'm', 384) RETURNING id),
                        doc AS (INSERT INTO documents (collection_id, source_uri, content_hash, text_hash,
                                    doc_type, chunk_key, mime, normalized_text, title)
                                SELECT id, 'file:///a.txt', 'h', 'h', 'text', 'k', 'text/plain',
                                       'Rotating keys', 'Handbook' FROM col RETURNING id, collection_id),
                        sec AS (INSERT INTO sections (document_id, ordinal, content_hash, fingerprint,
                                    char_start, char_end, heading_path)
                                SELECT id, 0, 'h', 'f', 0, 13, '{Handbook,Security}' FROM doc
                                RETURNING id, document_id)
                   INSERT INTO chunks (section_id, document_id, collection_id, ordinal, text, content_hash,
                                       embed_hash, char_start, char_end, token_count, model, embedding)
                   SELECT sec.id, doc.id, doc.collection_id, 0, 'Rotating keys', 'h', 'h', 0, 13, 2, 'm',
                          array_fill(0.1, ARRAY[384])::vector
                   FROM sec JOIN doc ON doc.id = sec.document_id"""
            )
            c.commit()
    with psycopg.connect(url) as c:
        applied = db.migrate(c)
        assert applied[:6] == [
            "002_bm25.sql",
            "003_typed_ledger.sql",
            "004_fts_terms.sql",
            "005_roles.sql",
            "006_rls_fts_terms.sql",
            "007_embedding_sets.sql",
        ]
        assert applied == [p.name for p in db.migration_files()[1:]]
        c.commit()
    with db.connection(url) as c:
        # version 10: full text reads the title and heading path (the title once) before the chunk's text
        assert c.execute("SELECT search_context, tsv::text FROM chunks").fetchone() == (
            "Handbook > Security", "'handbook':1 'key':4 'rotat':3 'secur':2"
        )
        assert c.execute("SELECT fts_chunks, fts_len_total FROM collections").fetchone() == (1, 4)
        # version 12: stored chunks were analysed as English, and stay so (recounted after the migration)
        assert c.execute("SELECT k.language, c.languages FROM chunks k, collections c").fetchone() == ("en", ["en"])
        (hit,) = store.search(c, "old", None, k=1, query_text="security", mode="fulltext")
        assert hit.text == "Rotating keys"
        n = c.execute("SELECT count(*) FROM pg_proc WHERE proname = 'chunkyard_hybrid_search'").fetchone()[0]
        assert n == 1  # the old signature is gone: calls are not ambiguous
        hits = store.search(
            c, "old", np.full(384, 0.1, dtype=np.float32), k=1, query_text="rotate", mode="hybrid"
        )
        assert [h.text for h in hits] == ["Rotating keys"]
        # version 7 moved the vectors into the collection's embedding set, indexed for their dimension
        sets = c.execute("SELECT model, dim, status FROM embedding_sets").fetchall()
        assert sets == [("m", 384, "active")]
        assert c.execute("SELECT count(*) FROM chunk_embeddings").fetchone()[0] == 1
    with psycopg.connect(pg_server, autocommit=True) as c:
        c.execute(sql.SQL("DROP DATABASE {} WITH (FORCE)").format(sql.Identifier(name)))


# ------------------------------------------------------------------------------------ whole sections


def test_a_section_mostly_retrieved_comes_back_whole_in_every_mode(tmp_path, settings):
    """A section cut into three chunks: asked for its words, every search returns it once, whole (its text
    and offsets, stripped, marked whole_section, at the rank of its best chunk) instead of its chunks; a
    section that is just its one chunk comes back as that chunk; p_whole_section NULL returns the chunks;
    a share outside (0, 1] is an error naming the parameter."""
    folder = tmp_path / "w"
    folder.mkdir()
    paras = [" ".join(f"Rotate the signing key {w} every quarter." for w in words)
             for words in (("alpha", "beta", "gamma"), ("delta", "epsilon", "zeta"), ("eta", "theta", "iota"))]  # fmt: skip
    (folder / "keys.md").write_text("# Keys\n\n" + "\n\n".join(paras) + "\n", encoding="utf-8")
    run_ingest([folder], settings=settings, profile=strategy_profile("recursive", size=24, context="none"))
    other = tmp_path / "bees"
    other.mkdir()
    (other / "bees.txt").write_text("Honey bees raise a new queen.\n", encoding="utf-8")  # one chunk, all of it
    run_ingest([other], settings=settings, collection="bees")
    vec = get_embedder(settings.model).encode(["rotate the signing key every quarter"])[0]
    with db.connection(settings.database_url) as conn:
        doc = conn.execute("SELECT normalized_text FROM documents WHERE source_uri LIKE '%keys.md'").fetchone()[0]
        n_chunks = conn.execute("SELECT count(*) FROM chunks c JOIN collections l ON l.id = c.collection_id "
                                "WHERE l.name = 'default'").fetchone()[0]  # fmt: skip
        assert n_chunks >= 3
        sec = conn.execute("SELECT char_start, char_end FROM sections s WHERE (SELECT count(*) FROM chunks c "
                           "WHERE c.section_id = s.id) >= 3").fetchone()  # fmt: skip
        for mode in ("vector", "fulltext", "hybrid", "rrf"):
            chunks = store.search(conn, "default", vec, k=n_chunks, query_text="rotate signing key quarter",
                                  mode=mode, whole_sections=None)  # fmt: skip
            assert len(chunks) == n_chunks and not any(h.metadata.get("whole_section") for h in chunks)
            hits = store.search(conn, "default", vec, k=n_chunks, query_text="rotate signing key quarter", mode=mode)
            whole = [h for h in hits if h.metadata.get("whole_section")]
            assert len(whole) == 1 and len(hits) < n_chunks, mode
            w = whole[0]
            assert w.text == doc[w.char_start : w.char_end] == doc[sec[0] : sec[1]].strip()
            assert w.chunk_id == next(h.chunk_id for h in chunks if h.section_id == w.section_id)  # its best
        # every search's rows (chunkyard_hit) say what they cost: a whole section the tokens of its chunks
        rows = conn.execute("SELECT section_id, metadata, tokens, tokens_before FROM chunkyard_search('default', %s, %s)",
                            (vec, n_chunks)).fetchall()  # fmt: skip
        assert [r[3] for r in rows] == [sum(r[2] for r in rows[:i]) for i in range(len(rows))]
        (whole_row,) = [r for r in rows if r[1].get("whole_section")]
        assert whole_row[2] == conn.execute("SELECT sum(token_count) FROM chunks WHERE section_id = %s",
                                            (whole_row[0],)).fetchone()[0]  # fmt: skip
        # a section that is just its one chunk comes back as that chunk, unmarked
        (bees,) = store.search(conn, "bees", None, k=1, query_text="queen", mode="fulltext")
        assert bees.text == "Honey bees raise a new queen." and "whole_section" not in bees.metadata
        with pytest.raises(psycopg.errors.InvalidParameterValue, match="p_whole_section"):
            conn.execute("SELECT * FROM chunkyard_search('default', %s, 3, false, 1.5)", (vec,))


# ------------------------------------------------------------------------------------------ context


def test_a_context_reads_chunks_in_rank_order_and_completes_a_section_half_read(tmp_path, settings):
    """`chunkyard_context` over any search's ranking: chunks in rank order with their tokens and the tokens
    read before them; once the chunks read cover half of a section, its other chunks follow at once in
    document order (score NULL, "completes_section"); reading stops once the budget is spent; bad budgets
    and shares are errors naming the parameter."""
    folder = tmp_path / "ctx"
    folder.mkdir()
    paras = [
        "Alpha wolves guard the northern valley during the long winter storms.",
        "Beta rivers carry melted snow toward the southern farms every spring.",
        "Gamma lanterns light the old harbour when the fishing ships return late.",
    ]
    text = "# Places\n\n" + "\n\n".join(paras) + "\n\n# Bees\n\nHoney bees raise a new queen when the old one fails.\n"
    (folder / "places.md").write_text(text, encoding="utf-8")
    run_ingest([folder], settings=settings, profile=strategy_profile("recursive", size=14, context="none"))
    with db.connection(settings.database_url) as conn:
        rows = conn.execute(
            """SELECT c.id, c.text, c.token_count, c.section_id FROM chunks c
               JOIN sections s ON s.id = c.section_id ORDER BY c.char_start"""
        ).fetchall()
        by_text = {r[1]: r for r in rows}
        places = [r for r in rows if r[3] == by_text[paras[0]][3]]
        assert [r[1] for r in places] == ["# Places", *paras]  # one chunk per heading or paragraph
        # chunks only: exactly the search's ranking, tokens summed as read
        query = "alpha wolves gamma lanterns"
        ranked = store.search(conn, "default", None, k=10, query_text=query, mode="fulltext", whole_sections=None)
        plain = store.context(conn, "default", None, budget=None, k=10, query_text=query, mode="fulltext",
                              whole_sections=None)  # fmt: skip
        assert [h.chunk_id for h in plain] == [h.chunk_id for h in ranked] and len(plain) == 2
        assert [h.score for h in plain] == [h.score for h in ranked]
        assert [h.tokens_before for h in plain] == [0, plain[0].tokens]
        assert plain[0].tokens == by_text[plain[0].text][2]
        # half of the section read (two of its three paragraphs): the rest follows, in document order
        got = store.context(conn, "default", None, budget=None, k=10, query_text=query, mode="fulltext")
        assert [h.chunk_id for h in got[:2]] == [h.chunk_id for h in ranked]
        assert [h.text for h in got[2:]] == ["# Places", paras[1]]
        assert all(h.score is None and h.metadata.get("completes_section") for h in got[2:])
        assert not any(h.metadata.get("completes_section") for h in got[:2])
        assert [h.tokens_before for h in got] == [sum(h.tokens for h in got[:i]) for i in range(len(got))]
        # one paragraph of three is not half: nothing completed
        one = store.context(conn, "default", None, budget=None, k=10, query_text="beta rivers", mode="fulltext")
        assert [h.text for h in one] == [paras[1]]
        # the budget: reading stops once it is spent (the last chunk read may go past it)
        first = got[0].tokens
        assert [h.chunk_id for h in store.context(conn, "default", None, budget=first, query_text=query,
                                                  mode="fulltext")] == [got[0].chunk_id]  # fmt: skip
        assert len(store.context(conn, "default", None, budget=first + 1, query_text=query, mode="fulltext")) == 2
        # every search mode reads the same way: each chunk once, the completed section whole
        vec = get_embedder(settings.model).encode([query])[0]
        for mode in ("vector", "hybrid", "rrf"):
            hits = store.context(conn, "default", vec, budget=None, k=10, query_text=query, mode=mode)
            ids = [h.chunk_id for h in hits]
            assert len(ids) == len(set(ids)) and {r[0] for r in places} <= set(ids), mode
        for bad, name in (("0, 0.5", "p_budget"), ("100, 0", "p_whole_section")):
            with pytest.raises(psycopg.errors.InvalidParameterValue, match=name):
                conn.execute(f"SELECT * FROM chunkyard_context(ARRAY[{places[0][0]}]::bigint[], NULL, {bad})")
            conn.rollback()
        with pytest.raises(ValueError, match="budget"):
            store.context(conn, "default", None, budget=None, query_text=query, mode="fulltext")


def test_full_text_reads_the_title_and_heading_path_with_each_chunk(tmp_path, settings):
    """A chunk whose own words miss the question's is found by the headings above it (search_context), the
    embedded context unchanged; a renamed heading rewrites the chunks below it, so their context follows."""
    folder = tmp_path / "docs"
    folder.mkdir()
    body = " ".join(f"Run one worker process per container, step {i}, and let the cluster replicate it." for i in range(12))
    page = folder / "deploy.md"
    page.write_text(f"# Deployment guide\n\n## Kubernetes\n\n{body}\n", encoding="utf-8")
    run_ingest([folder], settings=settings, profile=strategy_profile("recursive", size=48, context="none"))
    with db.connection(settings.database_url) as conn:
        rows = conn.execute("SELECT text, context, search_context FROM chunks ORDER BY char_start").fetchall()
        below = [r for r in rows if r[0].startswith("Run")]  # the body's chunks, below "## Kubernetes"
        assert below and {r[2] for r in below} == {"Deployment guide > Kubernetes"}
        assert {r[1] for r in below} == {""}  # what is embedded is the profile's business (none here)
        hits = store.search(conn, "default", None, k=20, query_text="kubernetes", mode="fulltext", whole_sections=None)
        assert {h.text for h in hits} >= {r[0] for r in below}
        page.write_text(f"# Deployment guide\n\n## Nomad\n\n{body}\n", encoding="utf-8")
    run_ingest([folder], settings=settings, profile=strategy_profile("recursive", size=48, context="none"))
    with db.connection(settings.database_url) as conn:
        contexts = {r[0] for r in conn.execute("SELECT search_context FROM chunks").fetchall()}
        assert "Deployment guide > Nomad" in contexts and "Deployment guide > Kubernetes" not in contexts
        assert store.search(conn, "default", None, k=5, query_text="kubernetes", mode="fulltext") == []
        (n,) = conn.execute("SELECT fts_chunks FROM collections").fetchone()
        assert n == conn.execute("SELECT count(*) FROM chunks").fetchone()[0]  # statistics kept current
