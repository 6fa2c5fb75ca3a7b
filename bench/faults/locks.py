"""Lock waits against another role, and the security cases (pg_temp hijacks, cross-tenant reads)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from bench.faults.harness import Bench, cli, compare, run_cli, snapshot


def _wide_model(folder: Path) -> str:
    """all-MiniLM-L6-v2 with a seeded 384 -> 768 layer: a second model, built here (as tests/test_models.py)."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    from pipeline.config import DEFAULT_MODEL
    from pipeline.embed.meta import model_path

    base = SentenceTransformer(model_path(DEFAULT_MODEL), device="cpu")
    torch.manual_seed(0)
    dense = models.Dense(384, 768, activation_function=torch.nn.Identity())
    SentenceTransformer(modules=[*base, dense, models.Normalize()], device="cpu").save(str(folder))
    return str(folder)


def _until(cond: Callable[[], bool], seconds: float = 300) -> bool:
    deadline = time.monotonic() + seconds
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def lock_cases(bench: Bench) -> None:
    """The collection lock: an ingest queued behind `reindex --model` writes with the new model into the new
    active set; a lock held by a role with no grants ends the wait in CHUNKYARD_LOCK_TIMEOUT_S, one line."""
    import psycopg
    from psycopg import sql

    from pipeline.store.ledger import LOCK_CLASS

    url = bench.create_db("lockswitch", template="v1")
    with psycopg.connect(url, autocommit=True) as c:
        cid = c.execute("SELECT id FROM collections WHERE name = 'inc'").fetchone()[0]

    def waiters() -> int:
        with psycopg.connect(url, autocommit=True) as c:
            return c.execute(
                """SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 2
                   AND classid = hashtext(%s)::oid AND objid = %s::oid""",
                (LOCK_CLASS, cid),
            ).fetchone()[0]

    model = _wide_model(bench.tmp / "minilm-wide-768")
    new = bench.tmp / "lock-new"
    new.mkdir()
    (new / "pelicans.md").write_text(
        "# Pelicans\n\nBrown pelicans plunge-dive to scoop fish into their pouch.\n"
    )
    t0 = time.perf_counter()
    holder = psycopg.connect(url, autocommit=True)
    holder.execute("SELECT pg_advisory_lock(hashtext(%s), %s::int)", (LOCK_CLASS, cid))
    switch = cli(url, "reindex", "-c", "inc", "--model", model)
    queued = _until(lambda: waiters() == 1)
    ingest = cli(url, "ingest", str(new), "--no-prefect", "-c", "inc")
    queued = queued and _until(lambda: waiters() == 2)
    holder.close()
    codes = [switch.wait(900), ingest.wait(900)]
    errs = [p.stderr.read() for p in (switch, ingest)]  # type: ignore[union-attr]
    with psycopg.connect(url) as c:
        active = c.execute(
            "SELECT id, dim FROM embedding_sets WHERE collection_id = %s AND status = 'active'", (cid,)
        ).fetchone()
        missing = c.execute(
            """SELECT count(*) FROM chunks k WHERE k.collection_id = %s
               AND NOT EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = k.id)""",
            (cid,),
        ).fetchone()[0]
        stray = c.execute(
            """SELECT count(*) FROM chunk_vectors v JOIN chunks k ON k.id = v.chunk_id
               JOIN documents d ON d.id = k.document_id
               WHERE d.source_uri LIKE '%%pelicans.md' AND v.set_id <> %s""",
            (active[0],),
        ).fetchone()[0]
    code, out, _ = run_cli(
        url, "search", "how do pelicans catch fish?", "-c", "inc", "-k", "1", "-m", "vector", "--json"
    )
    ok = queued and codes == [0, 0] and active[1] == 768 and missing == 0 and stray == 0 and "pelicans" in out
    bench.record("lock", "ingest queued behind reindex --model", ok, t0,
                 f"queued {queued}, exits {codes}, active dim {active[1]}, chunks without an active vector "
                 f"{missing}, in another set {stray}" + "".join(f"; {e.strip().splitlines()[-1]}" for e in errs if e.strip() and "Traceback" in e))  # fmt: skip

    admin = bench.server.get_uri()  # type: ignore[attr-defined]
    role = f"squatter_{os.getpid()}"
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
    t0 = time.perf_counter()
    try:
        with psycopg.connect(make_conninfo(**{**conninfo_to_dict(url), "user": role}), autocommit=True) as c:
            c.execute("SET application_name = 'squatter'")
            c.execute("SELECT pg_advisory_lock(hashtext(%s), %s::int)", (LOCK_CLASS, cid))
            code, out, err = run_cli(url, "ingest", str(new), "--no-prefect", "-c", "inc", timeout=120,
                                     env={"CHUNKYARD_LOCK_TIMEOUT_S": "3"})  # fmt: skip
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
    lines = [ln for ln in err.splitlines() if role in ln]
    took = time.perf_counter() - t0
    ok = (
        code == 2
        and "Traceback" not in err
        and any("still locked after 3 s" in ln for ln in lines)
        and took < 60
    )
    bench.record("lock", "lock held by a role with no grants", ok, t0, f"exit {code}, {took:.0f} s: {lines[-1] if lines else err[-200:]}")  # fmt: skip



def security(bench: Bench) -> None:
    """The pg_temp hijacks and the cross-tenant reads, played as an outsider, a reader and a writer against
    two ingested collections under row-level security; the tables are checked whole after them."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    url = bench.create_db("sec")
    for name, animal in (("a", "pelicans"), ("b", "walruses")):
        d = bench.tmp / "sec" / name
        d.mkdir(parents=True)
        (d / f"{animal}.md").write_text(f"# {animal.title()}\n\nA note about {animal} and their habits.\n")
        code, _, err = run_cli(url, "ingest", str(d), "--no-prefect", "-c", name)
        if code != 0:
            bench.record("security", f"ingest {name}", False, time.perf_counter(), err[-200:])
            return
    before = snapshot(url)
    roles = {k: f"cy_faults_{k}_{os.getpid()}" for k in ("outsider", "reader", "writer")}
    evil = ("CREATE FUNCTION pg_temp.evil() RETURNS bigint LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'hijacked: ran as %', current_user; END $$")  # fmt: skip
    with psycopg.connect(url, autocommit=True) as c:
        for kind, role in roles.items():
            c.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
            c.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(role)))
            if kind != "outsider":
                c.execute(sql.SQL("GRANT {} TO {}").format(sql.Identifier(f"chunkyard_{kind}"), sql.Identifier(role)))
        c.execute("SELECT chunkyard_grant('a', %s)", (roles["reader"],))
        c.execute("SELECT chunkyard_enable_rls()")
        set_id = c.execute("SELECT min(id) FROM embedding_sets").fetchone()[0]

    def as_role(kind: str) -> psycopg.Connection:
        d = conninfo_to_dict(url)
        d["user"] = roles[kind]
        return psycopg.connect(make_conninfo(**d), autocommit=True)

    def attempt(kind: str, case: str, steps: list[str], check: Callable[[psycopg.Connection], bool]) -> None:
        t0 = time.perf_counter()
        try:
            with as_role(kind) as c:
                for q in steps:
                    c.execute(q)
                ok, detail = check(c), ""
        except psycopg.errors.InsufficientPrivilege as exc:
            ok, detail = True, f"refused: {str(exc).strip()[:60]}"
        except psycopg.Error as exc:
            ok, detail = False, str(exc).strip().splitlines()[0]
        bench.record("security", f"{kind}: {case}", ok, t0, detail)

    def rows(q: str) -> Callable[[psycopg.Connection], set]:
        return lambda c: {r[0] for r in c.execute(q)}

    reader_sees_a = rows("SELECT name FROM collections")
    attempt("reader", "temp collection_readers widens RLS",
            ["CREATE TEMP TABLE collection_readers (collection_id bigint, role_name name)",
             "INSERT INTO collection_readers SELECT g, session_user FROM generate_series(1, 100) g"],
            lambda c: reader_sees_a(c) == {"a"})  # fmt: skip
    hijack = [evil, "CREATE TEMP VIEW collection_readers AS SELECT pg_temp.evil() AS collection_id, "
              "session_user AS role_name", "SELECT chunkyard_readable_collections()"]  # fmt: skip
    for kind in ("outsider", "reader"):
        attempt(kind, "temp view runs code as the owner", hijack, lambda c: True)
    attempt("writer", "temp embedding_sets in chunkyard_vector_index",
            [evil, "CREATE TEMP VIEW embedding_sets AS SELECT id, pg_temp.evil()::integer AS dim "
             "FROM generate_series(1, 1000) id", f"SELECT chunkyard_vector_index({set_id}, true)"],
            lambda c: True)  # fmt: skip
    attempt("reader", "embedding_cache of other tenants", [], lambda c: not c.execute(
        "SELECT 1 FROM embedding_cache LIMIT 1").fetchall())  # fmt: skip
    attempt("outsider", "reads chunks", [], lambda c: not c.execute("SELECT 1 FROM chunks LIMIT 1").fetchall())
    t0 = time.perf_counter()
    with psycopg.connect(url, autocommit=True) as c:
        c.execute("SELECT chunkyard_disable_rls()")
        for role in roles.values():
            c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            c.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
    diff = compare(snapshot(url), before)
    bench.record("security", "tables unchanged after the attacks", not diff, t0, diff)
