"""Security from the catalogue: every definer function pinned and closed to PUBLIC, every readable table
under row-level security, and the pg_temp hijacks played as a reader, a writer and an outsider."""

from __future__ import annotations

import psycopg
import pytest
from test_roles import as_role, login, two_collections  # noqa: F401  (fixtures)

#: Tables a reader may read with no row-level security, and why: they hold no tenant's data.
UNTENANTED = {"schema_migrations": "migration versions and checksums"}

#: A function in the caller's own temporary schema that reports who it runs as: called from inside a
#: definer function that finds the caller's temporary objects first, it would run as the schema's owner.
EVIL = """CREATE FUNCTION pg_temp.evil() RETURNS bigint LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'hijacked: ran as %', current_user;
END $$"""


def _definers(conn: psycopg.Connection) -> list[tuple[str, list[str] | None, bool]]:
    """(signature, proconfig, executable by PUBLIC) of every SECURITY DEFINER function of the schema."""
    return conn.execute(
        """SELECT p.oid::regprocedure::text, p.proconfig,
                  EXISTS (SELECT 1 FROM aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
                          WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
           FROM pg_proc p WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef
           ORDER BY 1"""
    ).fetchall()


def test_every_definer_function_has_a_pinned_path_and_is_closed_to_public(conn):
    found = _definers(conn)
    names = {sig.split("(")[0] for sig, _, _ in found}
    # the ones the schema has today: a new one is checked by the same rule below
    assert {"chunkyard_readable_collections", "chunkyard_create_embedding_set", "chunkyard_vector_index",
            "chunkyard_drop_embedding_set"} <= names  # fmt: skip
    schema = conn.execute("SELECT current_schema()").fetchone()[0]
    for sig, config, public in found:
        paths = [c.split("=", 1)[1] for c in config or [] if c.startswith("search_path=")]
        assert paths, f"{sig} has no pinned search_path"
        parts = [p.strip().strip('"') for p in paths[0].split(",")]
        assert parts == [schema, "pg_temp"], f"{sig}: search_path {paths[0]!r}"
        assert not public, f"{sig} is executable by PUBLIC"


def test_every_table_a_reader_can_read_is_under_row_level_security(two_collections, conn):  # noqa: F811
    conn.execute("SELECT chunkyard_enable_rls()")
    rels = conn.execute(
        """SELECT c.relname, c.relkind, c.relrowsecurity, coalesce(c.reloptions, '{}'),
                  has_table_privilege('chunkyard_reader', c.oid, 'SELECT'),
                  EXISTS (SELECT 1 FROM pg_policy p WHERE p.polrelid = c.oid AND p.polcmd IN ('r', '*')
                          AND (0 = ANY (p.polroles) OR 'chunkyard_reader'::regrole = ANY (p.polroles)))
           FROM pg_class c
           WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p', 'v', 'm')
           ORDER BY 1"""
    ).fetchall()
    names = {r[0] for r in rels}
    assert {"chunks", "documents", "embedding_cache", "chunk_vectors", "chunk_embeddings"} <= names
    assert any(n.startswith("chunk_vectors_") for n in names), "an embedding set's partition is checked too"
    for name, kind, rls, options, readable, policy in rels:
        if not readable or name in UNTENANTED:
            continue
        if kind == "v":
            assert "security_invoker=true" in options, f"view {name} reads as its owner, past row-level security"
        else:
            assert kind != "m", f"materialized view {name} cannot be under row-level security"
            assert rls and policy, f"a reader reads {name} with no row-level security"


def test_a_reader_cannot_read_the_embedding_cache(two_collections, database_url, login):  # noqa: F811
    reader = login("chunkyard_reader")
    with as_role(database_url, reader) as c, pytest.raises(psycopg.errors.InsufficientPrivilege):
        c.execute("SELECT text_hash FROM embedding_cache LIMIT 1")


def test_a_reader_cannot_widen_row_level_security_with_a_temporary_table(
    two_collections, conn, database_url, login  # noqa: F811
):
    tenant = login("chunkyard_reader")
    conn.execute("SELECT chunkyard_grant('a', %s)", (tenant,))
    conn.execute("SELECT chunkyard_enable_rls()")
    with as_role(database_url, tenant) as c:
        c.execute("CREATE TEMP TABLE collection_readers (collection_id bigint, role_name name)")
        c.execute("INSERT INTO collection_readers SELECT g, session_user FROM generate_series(1, 100) g")
        assert {r[0] for r in c.execute("SELECT name FROM collections")} == {"a"}
        assert all("pelicans" in r[0].lower() for r in c.execute("SELECT text FROM chunks"))


def test_no_role_runs_its_code_as_the_owner_through_pg_temp(two_collections, conn, database_url, login):  # noqa: F811
    conn.execute("SELECT chunkyard_enable_rls()")
    set_id = conn.execute("SELECT min(id) FROM embedding_sets").fetchone()[0]
    # an outsider (a login role with no chunkyard grant) and a reader, through the RLS helper
    for role in (login(), login("chunkyard_reader")):
        with as_role(database_url, role) as c:
            c.execute(EVIL)
            c.execute("CREATE TEMP VIEW collection_readers AS SELECT pg_temp.evil() AS collection_id, "
                      "session_user AS role_name")  # fmt: skip
            try:
                c.execute("SELECT chunkyard_readable_collections()")
            except psycopg.errors.InsufficientPrivilege:
                pass  # the outsider may not call it at all
            except psycopg.Error as exc:
                pytest.fail(f"{role}: {exc}")
    # a writer, through the HNSW index builder that reads embedding_sets
    writer = login("chunkyard_writer")
    with as_role(database_url, writer) as c:
        c.execute(EVIL)
        c.execute("CREATE TEMP VIEW embedding_sets AS SELECT id, pg_temp.evil()::integer AS dim FROM "
                  "generate_series(1, 1000) id")  # fmt: skip
        assert c.execute("SELECT chunkyard_vector_index(%s, true)", (set_id,)).fetchone()[0] is True
        assert c.execute("SELECT chunkyard_vector_index(%s, true)", (10**9,)).fetchone()[0] is False


def test_a_grant_of_an_unknown_collection_or_to_an_unknown_role_is_an_error(two_collections, conn, login):  # noqa: F811
    tenant = login("chunkyard_reader")
    with pytest.raises(psycopg.errors.UndefinedObject, match="no collection 'nosuch'"):
        conn.execute("SELECT chunkyard_grant('nosuch', %s)", (tenant,))
    with pytest.raises(psycopg.errors.UndefinedObject, match="no role 'nobody_here'"):
        conn.execute("SELECT chunkyard_grant('a', 'nobody_here')")
    conn.execute("SELECT chunkyard_grant('a', %s)", (tenant,))
    conn.execute("SELECT chunkyard_grant('a', %s)", (tenant,))  # twice is once
    assert conn.execute("SELECT count(*) FROM collection_readers").fetchone()[0] == 1
