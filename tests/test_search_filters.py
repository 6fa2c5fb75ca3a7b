"""Filters on every search (p_filter, store.search_filter, `chunkyard search --source/--document/...`): each
key narrows every search function and the context, a filter that matches nothing returns no rows, a bad one is
an error naming the key, filtered vector search stays on its HNSW index, and row-level security still holds."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import unquote

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_roles import as_role, login  # noqa: F401  (fixture)
from typer.testing import CliRunner

from pipeline import db, store
from pipeline.cli import app
from pipeline.embed import get_embedder
from pipeline.errors import ConfigError
from pipeline.ingest import run_ingest
from tests.test_search_scale import _plans

#: Every file speaks of keys, so an unfiltered search finds them all.
FILES = {
    "docs/keys.md": "# Keys\n\nRotate the API keys every quarter and keep the old keys for a day.\n",
    "docs/guide/setup.md": "# Setup\n\nInstall the service, then create the first API keys.\n",
    "notes/keys.txt": "Keys are rotated by the operations team; ask them for new keys.\n",
    "notes/schlüssel.txt": "Die Schlüssel (keys) der Schnittstelle werden jedes Quartal erneuert, und die alten "
    "Schlüssel bleiben einen Tag lang gültig. Neue Schlüssel gibt es beim Betriebsteam.\n",
}
QUERY = "rotate the api keys"


@pytest.fixture
def corpus(tmp_path, settings) -> Path:
    root = tmp_path / "corpus"
    for name, text in FILES.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    assert not run_ingest([root], settings=settings).stats.errors
    return root


def _name(uri: str) -> str:
    return Path(unquote(uri)).name


def _names(hits) -> set[str]:
    return {_name(h.source_uri) for h in hits}


def _every_search(conn, vec, filters) -> dict[str, set[str]]:
    """The files each search mode and the context return under a filter."""
    found = {
        mode: _names(store.search(conn, "default", vec, k=10, query_text=QUERY, mode=mode, filters=filters))
        for mode in store.SEARCH_MODES
    }
    found["context"] = _names(store.context(conn, "default", vec, budget=1000, query_text=QUERY, mode="hybrid",
                                            filters=filters))  # fmt: skip
    return found


def test_each_filter_narrows_every_search(corpus, settings, conn):
    vec = get_embedder(settings.model).encode([QUERY])[0]
    ids = dict(conn.execute("SELECT source_uri, id FROM documents").fetchall())
    by_name = {_name(u): i for u, i in ids.items()}
    everything = set(by_name)
    assert _every_search(conn, vec, None)["vector"] == everything
    cases = [
        (store.search_filter(source=["docs/**"]), {"keys.md", "setup.md"}),
        (store.search_filter(source=["docs/*.md"]), {"keys.md"}),  # directly in a folder named docs
        (store.search_filter(source=["*.txt"]), {"keys.txt", "schlüssel.txt"}),
        (store.search_filter(source=["guide", "notes/keys.txt"]), {"setup.md", "keys.txt"}),
        (store.search_filter(documents=[by_name["setup.md"]]), {"setup.md"}),
        (store.search_filter(doc_type=["markdown"]), {"keys.md", "setup.md"}),
        (store.search_filter(language=["de"]), {"schlüssel.txt"}),
        (store.search_filter(metadata={"heading_path": ["Keys"]}), {"keys.md"}),  # the chunk's metadata
        (store.search_filter(metadata={"warnings": []}), everything),  # or its document's
        (store.search_filter(source=["*.txt"], language=["en"]), {"keys.txt"}),  # keys together: AND
        (store.search_filter(updated_since="2000-01-01"), everything),
    ]
    for filters, expected in cases:
        for what, got in _every_search(conn, vec, filters).items():
            assert got == expected, (filters, what, got)
    # a filter that matches nothing: no rows, no error, in every search and the context
    for filters in (store.search_filter(source=["nowhere/*"]), store.search_filter(documents=[10**9]),
                    store.search_filter(language=["xx"]), store.search_filter(updated_since="2999-01-01")):  # fmt: skip
        assert all(got == set() for got in _every_search(conn, vec, filters).values()), filters


def test_filters_in_sql_and_their_errors(corpus, settings, conn):
    vec = get_embedder(settings.model).encode([QUERY])[0]
    one = Jsonb({"source": "notes/keys.txt"})
    for call, args in (("chunkyard_search('default', %s, 5, p_filter => %s)", (vec, one)),
                       ("chunkyard_fulltext_search('default', 'keys', 5, p_filter => %s)", (one,)),
                       ("chunkyard_hybrid_search('default', %s, 'keys', 5, p_filter => %s)", (vec, one))):  # fmt: skip
        rows = conn.execute(f"SELECT source_uri, tokens, tokens_before FROM {call}", args).fetchall()
        assert [_name(r[0]) for r in rows] == ["keys.txt"] and rows[0][1] > 0 and rows[0][2] == 0, call
    # NULL and '{}' filter nothing
    for nothing in (None, Jsonb({})):
        n = conn.execute("SELECT count(*) FROM chunkyard_search('default', %s, 10, p_filter => %s)", (vec, nothing))
        assert n.fetchone()[0] == len(FILES)
    for bad, words in ((Jsonb({"sauce": "x"}), "unknown key \"sauce\""), (Jsonb({"documents": ["one"]}), "document ids"),
                       (Jsonb({"updated_since": "soon"}), "timestamp"), (Jsonb({"metadata": [1]}), "JSON object"),
                       (Jsonb({"language": {"en": 1}}), "a list of strings"), (Jsonb([1]), "JSON object")):  # fmt: skip
        with pytest.raises(psycopg.errors.InvalidParameterValue, match=words):
            conn.execute("SELECT * FROM chunkyard_fulltext_search('default', 'keys', 5, p_filter => %s)", (bad,))
        conn.rollback()


def test_filtered_vector_search_keeps_its_index_and_k_rows(corpus, settings, database_url):
    """A filter on chunks (language, metadata) searches the HNSW index until k chunks pass, under generic
    plans; a filter on a few documents reads their chunks directly: k rows either way when k pass."""
    vec = get_embedder(settings.model).encode([QUERY])[0]
    with db.connection(database_url) as conn:
        hnsw = f"Index Scan using chunk_vectors_{store.get_collection(conn, 'default').vectors.id}_hnsw"
        plans = _plans(conn, "SELECT * FROM chunkyard_search(%s, %s, %s, p_filter => %s)",
                       ("default", vec, 2, Jsonb({"language": ["en"]})), sort=False)  # fmt: skip
        assert hnsw in plans and "language = ANY" in plans, plans  # the filter, inlined, inside the scan
    with db.connection(database_url) as conn:
        en = store.search(conn, "default", vec, k=2, filters={"language": ["en"]}, whole_sections=None)
        assert len(en) == 2 and all(h.chunk_id for h in en)
        docs = [r[0] for r in conn.execute("SELECT id FROM documents ORDER BY id LIMIT 2")]
        got = store.search(conn, "default", vec, k=5, filters={"documents": docs}, whole_sections=None)
        exact = conn.execute(
            """SELECT c.id FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id
               WHERE c.document_id = ANY (%s) ORDER BY e.embedding <=> %s, c.id""", (docs, vec)
        ).fetchall()
        assert [h.chunk_id for h in got] == [r[0] for r in exact][:5]


def test_filters_under_row_level_security(corpus, conn, database_url, login):  # noqa: F811
    tenant = login("chunkyard_reader")
    run_ingest([corpus / "notes"], settings=None, collection="other")
    conn.execute("SELECT chunkyard_grant('default', %s)", (tenant,))
    conn.execute("SELECT chunkyard_enable_rls()")
    with as_role(database_url, tenant) as c:
        vec = c.execute("SELECT embedding FROM chunk_embeddings LIMIT 1").fetchone()[0]
        f = Jsonb({"source": "*.txt"})
        mine = c.execute("SELECT source_uri FROM chunkyard_search('default', %s, 10, p_filter => %s)", (vec, f))
        assert {_name(r[0]) for r in mine} == {"keys.txt", "schlüssel.txt"}
        for call in ("chunkyard_search('other', %s, 10, p_filter => %s)",
                     "chunkyard_hybrid_search('other', %s, 'keys', 10, p_filter => %s)"):  # fmt: skip
            assert c.execute(f"SELECT count(*) FROM {call}", (vec, f)).fetchone()[0] == 0
        ids = [r[0] for r in conn.execute("SELECT d.id FROM documents d JOIN collections l ON l.id = d.collection_id "
                                          "WHERE l.name = 'other'")]  # fmt: skip
        theirs = Jsonb({"documents": ids})
        n = c.execute("SELECT count(*) FROM chunkyard_fulltext_search('other', 'keys', 10, p_filter => %s)", (theirs,))
        assert n.fetchone()[0] == 0
    conn.execute("SELECT chunkyard_disable_rls()")


def test_search_cli_filters(corpus, monkeypatch):
    runner = CliRunner()
    monkeypatch.chdir(corpus)

    def files(*args: str) -> set[str]:
        res = runner.invoke(app, ["search", QUERY, "-k", "10", "--json", *args])
        assert res.exit_code == 0, res.output
        return {_name(h["source_uri"]) for h in json.loads(res.output)}

    assert files("--source", "docs") == {"keys.md", "setup.md"}  # a folder that exists: the files below it
    assert files("--source", "*.txt", "--mode", "fulltext") == {"keys.txt", "schlüssel.txt"}
    assert files("--type", "markdown", "--mode", "vector") == {"keys.md", "setup.md"}
    assert files("--language", "de") == {"schlüssel.txt"}
    assert files("--metadata", '{"heading_path": ["Setup"]}', "--budget", "500") == {"setup.md"}
    assert files("--since", "2999-01-01") == set()
    res = runner.invoke(app, ["search", QUERY, "--json"])
    first = json.loads(res.output)[0]
    with db.connection(db.database_url()) as conn:
        doc = conn.execute("SELECT document_id FROM chunks WHERE id = %s", (first["chunk_id"],)).fetchone()[0]
    assert files("--document", str(doc)) == {_name(first["source_uri"])}
    res = runner.invoke(app, ["search", QUERY, "--source", "nowhere/*"])
    assert res.exit_code == 0 and "no results" in res.output
    for bad, words in ((["--metadata", "{page"], "not JSON"), (["--metadata", "[1]"], "JSON object"),
                       (["--since", "soon"], "ISO date")):  # fmt: skip
        res = runner.invoke(app, ["search", QUERY, *bad])
        assert isinstance(res.exception, ConfigError) and words in str(res.exception), res.output


def test_search_parent_shows_each_hit_within_its_section(tmp_path, settings):
    """`--parent` (issue 26, defect 7): each hit shows its own chunk, marked, inside its section, not the same
    first characters of the section for every hit."""
    from pipeline.config import strategy_profile

    folder = tmp_path / "p"
    folder.mkdir()
    paras = [f"Paragraph {w} explains how rotating {w} keys works for the service. " * 3 for w in
             ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")]  # fmt: skip
    (folder / "long.md").write_text("# Keys\n\n" + "\n\n".join(paras) + "\n", encoding="utf-8")
    run_ingest([folder], settings=settings, profile=strategy_profile("recursive", size=40, context="none"))
    res = CliRunner().invoke(app, ["search", "foxtrot delta keys", "-k", "2", "--parent", "--no-whole-sections",
                                   "--mode", "fulltext"])  # fmt: skip
    assert res.exit_code == 0, res.output
    bodies = [b for b in res.output.split("\n   ") if "»" in b]
    assert len(bodies) == 2 and bodies[0] != bodies[1], res.output
    assert "»Paragraph foxtrot" in res.output and "»Paragraph delta" in res.output, res.output
