"""Least privilege: a reader can search and read but not write; row-level security per collection."""

from __future__ import annotations

import itertools
import os

import psycopg
import pytest
from pgvector.psycopg import register_vector
from psycopg import sql

from pipeline.config import Settings
from pipeline.ingest import run_ingest

_names = itertools.count()


@pytest.fixture
def login(pg_server, database_url):
    """Make login roles (cluster-wide, so uniquely named and dropped after) and connect as them."""
    made: list[str] = []

    def make(*groups: str) -> str:
        name = f"t_role_{os.getpid()}_{next(_names)}"
        with psycopg.connect(pg_server, autocommit=True) as c:
            c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(name)))
            for g in groups:
                c.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(g), sql.Identifier(name)))
        made.append(name)
        return name

    yield make
    with psycopg.connect(database_url, autocommit=True) as c:
        for name in made:
            c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(name)))
    with psycopg.connect(pg_server, autocommit=True) as c:
        for name in made:
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(name)))


def as_role(url: str, role: str) -> psycopg.Connection:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(url)
    d["user"] = role
    conn = psycopg.connect(make_conninfo(**d), autocommit=True)
    register_vector(conn)
    return conn


@pytest.fixture
def two_collections(tmp_path, settings):
    for name, animal in (("a", "pelicans"), ("b", "walruses")):
        d = tmp_path / name
        d.mkdir()
        (d / f"{animal}.md").write_text(f"# {animal.title()}\n\nA note about {animal} and their habits.\n")
        run_ingest([d], settings=settings, collection=name)


def test_a_reader_searches_and_reads_but_cannot_write(two_collections, database_url, login):
    reader = login("chunkyard_reader")
    with as_role(database_url, reader) as c:
        assert c.execute("SELECT count(*) FROM chunks").fetchone()[0] >= 2
        hits = c.execute("SELECT k.text FROM chunkyard_fulltext_search('a', 'pelicans', 3) f "
                         "JOIN chunks k ON k.id = f.chunk_id").fetchall()  # fmt: skip
        assert hits and "pelicans" in hits[0][0]
        vec = c.execute("SELECT embedding FROM chunk_embeddings LIMIT 1").fetchone()[0]
        assert c.execute("SELECT count(*) FROM chunkyard_search('a', %s, 3)", (vec,)).fetchone()[0] >= 1
        ids = [r[0] for r in c.execute("SELECT chunk_id FROM chunkyard_fulltext_search('a', 'pelicans', 3)")]
        read = c.execute("SELECT chunk_id, tokens FROM chunkyard_context(%s, NULL, 1000)", (ids,)).fetchall()
        assert [r[0] for r in read][: len(ids)] == ids and all(r[1] > 0 for r in read)
        for stmt in ("DELETE FROM chunks", "UPDATE documents SET title = 'x'", "DROP TABLE chunks",
                     "INSERT INTO collections (name, profile, model, dim) VALUES ('z', '{}', 'm', 384)",
                     "SELECT chunkyard_enable_rls()"):  # fmt: skip
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                c.execute(stmt)


def test_the_pipeline_runs_as_a_writer_on_a_migrated_database(tmp_path, database_url, login):
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    writer = login("chunkyard_writer")
    d = conninfo_to_dict(database_url)
    d["user"] = writer
    (tmp_path / "w.md").write_text("# Herons\n\nHerons stand still in shallow water.\n")
    stats, _, status = run_ingest([tmp_path], settings=Settings(database_url=make_conninfo(**d)))
    assert status == "completed" and stats.counts["documents_new"] == 1
    with as_role(database_url, writer) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("DROP TABLE chunks")
    # with row-level security on, the writer still writes (COPY FROM is refused under it: the rows go
    # through INSERT ... SELECT), a new collection included
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute("SELECT chunkyard_enable_rls()")
    (tmp_path / "w2.md").write_text("# Egrets\n\nEgrets wade in shallow water too.\n")
    for coll in ("default", "other"):
        stats, _, status = run_ingest([tmp_path], settings=Settings(database_url=make_conninfo(**d)), collection=coll)
        assert status == "completed", stats.errors
    with psycopg.connect(database_url) as c:
        n = c.execute("SELECT count(*) FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id").fetchone()[0]
        assert n == c.execute("SELECT count(*) FROM chunks").fetchone()[0] >= 4


def test_row_level_security_shows_each_tenant_its_collections(two_collections, conn, database_url, login):
    tenant_a, tenant_b = login("chunkyard_reader"), login("chunkyard_reader")
    conn.execute("SELECT chunkyard_grant('a', %s)", (tenant_a,))
    conn.execute("SELECT chunkyard_grant('b', %s)", (tenant_b,))
    conn.execute("SELECT chunkyard_enable_rls()")
    ids = dict(conn.execute("SELECT l.name, array_agg(c.id) FROM chunks c JOIN collections l "
                            "ON l.id = c.collection_id GROUP BY l.name").fetchall())  # fmt: skip
    for role, mine, theirs in ((tenant_a, "a", "b"), (tenant_b, "b", "a")):
        with as_role(database_url, role) as c:
            seen = {r[0] for r in c.execute("SELECT name FROM collections")}
            assert seen == {mine}
            texts = [r[0] for r in c.execute("SELECT text FROM chunks")]
            assert texts and all(("pelicans" if mine == "a" else "walruses") in t.lower() for t in texts)
            assert c.execute("SELECT count(*) FROM sections").fetchone()[0] >= 1
            words = {r[0] for r in c.execute("SELECT lexeme FROM fts_terms")}
            assert ("pelican" in words) == (mine == "a") and ("walrus" in words) == (mine == "b")
            vec = c.execute("SELECT embedding FROM chunk_embeddings LIMIT 1").fetchone()[0]
            assert (
                c.execute("SELECT count(*) FROM chunkyard_search(%s, %s, 5)", (theirs, vec)).fetchone()[0]
                == 0
            )
            assert (
                c.execute("SELECT count(*) FROM chunkyard_search(%s, %s, 5)", (mine, vec)).fetchone()[0] >= 1
            )
            # a context of another tenant's chunk ids reads nothing of them, sections completed or not
            ctx = "SELECT chunk_id FROM chunkyard_context(%s, NULL, NULL, 0.01)"
            assert c.execute(ctx, (ids[theirs],)).fetchall() == []
            assert {r[0] for r in c.execute(ctx, (ids[mine],))} == set(ids[mine])
    # the owner (and the pipeline) still see everything
    assert conn.execute("SELECT count(*) FROM collections").fetchone()[0] == 2
    conn.execute("SELECT chunkyard_disable_rls()")
