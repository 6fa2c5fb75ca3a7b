"""The web view (`chunkyard ui`): every page against a real ingested collection, read-only, bad input."""

from __future__ import annotations

import html
import itertools
import json
import os
import re

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from starlette.testclient import TestClient

from pipeline.ingest import run_ingest
from pipeline.ui import create_app, layout
from pipeline.ui.layout import segments

DOCS = {
    "guide.md": "# Guide\n\nIntro text about the service.\n\n## Keys\n\nRotating the API keys every quarter keeps "
    "the service safe. Keys live in the vault.\n\n## Bees\n\nHoney bee colonies raise a new queen when the old "
    "one fails.\n",
    "notes.txt": "Plain notes. The service restarts at night. Nothing else happens here.\n",
}
SEG = re.compile(r'<span class="seg ([^"]*)" data-start="(\d+)" data-end="(\d+)" data-chunks="([\d ]*)">(.*?)</span>', re.S)


@pytest.fixture
def ingested(tmp_path, settings):
    """Collection 'demo': two documents, then a second run that re-chunks one section and meets a bad file."""
    folder = tmp_path / "docs"
    folder.mkdir()
    for name, text in DOCS.items():
        (folder / name).write_text(text, encoding="utf-8")
    run_ingest([folder], settings=settings, collection="demo")
    (folder / "guide.md").write_text(DOCS["guide.md"].replace("old one fails", "old queen fails"), encoding="utf-8")
    (folder / "binary.md").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8)
    run_ingest([folder], settings=settings, collection="demo")
    return folder


@pytest.fixture
def client(ingested, settings, database_url):
    with TestClient(create_app(database_url, settings=settings)) as c:
        yield c


def drawn(page: str) -> dict[int, dict]:
    """chunk id -> its start, end and text as the document page draws them (the join of its segments)."""
    out: dict[int, dict] = {}
    for _, s, e, ids, text in SEG.findall(page):
        for cid in map(int, ids.split()):
            c = out.setdefault(cid, {"start": int(s), "end": int(s), "text": ""})
            assert c["end"] == int(s), f"chunk {cid} is drawn in pieces that do not touch"
            c["end"], c["text"] = int(e), c["text"] + html.unescape(text)
    return out


def test_the_collections_page_lists_collections_and_last_runs(client):
    r = client.get("/")
    assert r.status_code == 200
    assert 'href="/c/demo"' in r.text and "Last runs" in r.text and 'href="/r/2"' in r.text


def test_the_collection_page_shows_counts_documents_runs_and_drift(client, conn):
    coll = conn.execute("SELECT id FROM collections WHERE name = 'demo'").fetchone()[0]
    # two runs' figures 100% apart in tokens mean: the second is what `status --quality` flags
    for mean in (50, 100):
        fig = {"all": {"chunks": 20, "tokens_mean": mean, "histogram": [0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]}}
        conn.execute("INSERT INTO runs (collection_id, kind, status, finished_at, quality) "
                     "VALUES (%s, 'ingest', 'completed', now(), %s)", (coll, json.dumps(fig)))  # fmt: skip
    r = client.get("/c/demo")
    assert r.status_code == 200
    for text in ("guide.md", "notes.txt", "Quality over runs", 'class="pflag"', "+100% (threshold ±25%)", "<svg"):
        assert text in r.text, text
    assert client.get("/c/demo?match=notes").text.count('href="/d/') == 1
    assert client.get("/c/demo?docs=0&runs=0").status_code == 200


def test_the_collection_page_plots_eval_recall_with_failed_runs_flagged(client, conn):
    coll = conn.execute("SELECT id FROM collections WHERE name = 'demo'").fetchone()[0]
    for recall, passed in ((80.0, True), (60.0, False)):
        run = conn.execute("INSERT INTO runs (collection_id, kind, status, finished_at) VALUES "
                           "(%s, 'eval', 'completed', now()) RETURNING id", (coll,)).fetchone()[0]  # fmt: skip
        conn.execute(
            """INSERT INTO eval_results (run_id, collection_id, question_set, questions_hash, k, search_mode,
                   n_questions, recall, precision, precision_omega, iou, hit_rate, mrr, is_baseline, recall_drop,
                   max_drop, passed)
               VALUES (%s, %s, 'faq', 'h', 5, 'hybrid', 3, %s, 10, 10, 10, 100, 1, %s, %s, 5, %s)""",
            (run, coll, recall, passed, None if passed else 20.0, passed),
        )
    r = client.get("/c/demo")
    assert "recall % — faq, hybrid, k=5" in r.text and "recall dropped 20.0 points" in r.text
    assert client.get(f"/r/{run}").text.count("question_set") == 1


def test_the_document_page_draws_every_chunk_at_its_stored_offsets(client, conn):
    doc = conn.execute("SELECT id FROM documents WHERE source_uri LIKE '%guide.md'").fetchone()[0]
    r = client.get(f"/d/{doc}")
    assert r.status_code == 200
    rows = conn.execute("SELECT id, char_start, char_end, text FROM chunks WHERE document_id = %s", (doc,)).fetchall()
    seen = drawn(r.text)
    assert set(seen) == {row[0] for row in rows}
    for cid, s, e, text in rows:
        assert (seen[cid]["start"], seen[cid]["end"], seen[cid]["text"]) == (s, e, text)
    # the whole text is drawn once, in order
    full = conn.execute("SELECT normalized_text FROM documents WHERE id = %s", (doc,)).fetchone()[0]
    assert "".join(html.unescape(m[4]) for m in SEG.findall(r.text)) == full
    # the section tree, the chunk details (context, hash) for the panel
    assert 'class="sections"' in r.text and "Keys" in r.text
    data = json.loads(html.unescape(re.search(r'id="chunk-data">(.*?)</script>', r.text, re.S).group(1)))
    assert {d["hash"] for d in data.values()} == {
        h for (h,) in conn.execute("SELECT content_hash FROM chunks WHERE document_id = %s", (doc,))
    }


def test_the_document_page_marks_what_the_last_run_rechunked(client, conn):
    doc = conn.execute("SELECT id FROM documents WHERE source_uri LIKE '%guide.md'").fetchone()[0]
    page = client.get(f"/d/{doc}").text
    classes = {}
    for cls, _, _, ids, text in SEG.findall(page):
        for cid in ids.split():
            classes.setdefault(int(cid), (cls, text))
    new = [t for c, t in classes.values() if " new" in c]
    kept = [t for c, t in classes.values() if " new" not in c]
    assert new and all("queen" in t or "Bees" in t for t in new), new
    assert any("Rotating" in t for t in kept)
    assert "re-chunked" in page and 'href="/r/2"' in page


def test_the_document_page_pages_by_chunk_ranges_and_highlights_a_span(client, conn, monkeypatch):
    monkeypatch.setattr(layout, "CHUNKS_PER_PAGE", 1)
    doc = conn.execute("SELECT id FROM documents WHERE source_uri LIKE '%guide.md'").fetchone()[0]
    rows = conn.execute("SELECT id, char_start, char_end FROM chunks WHERE document_id = %s ORDER BY char_start",
                        (doc,)).fetchall()  # fmt: skip
    assert len(rows) >= 2
    last = client.get(f"/d/{doc}?page={len(rows) - 1}").text
    assert set(drawn(last)) == {rows[-1][0]} and "page" in last
    cid, s, e = rows[-1]
    found = client.get(f"/d/{doc}?at={s}&hl={s}-{e}&chunk={cid}").text
    assert set(drawn(found)) == {cid} and " hl" in found and f'data-pin="{cid}"' in found
    assert client.get(f"/d/{doc}?page=99").status_code == 400


def test_search_shows_hits_in_their_documents_with_scores_explained(client):
    r = client.get("/c/demo/search", params={"q": "rotating keys", "mode": "fulltext", "k": 3})
    assert r.status_code == 200
    assert "<mark>" in r.text and "guide.md" in r.text and "BM25" in r.text
    assert re.search(r'href="/d/\d+\?at=\d+&amp;hl=\d+-\d+&amp;chunk=\d+"', r.text)
    hybrid = client.get("/c/demo/search", params={"q": "when does the service restart", "mode": "hybrid"})
    assert "min-max scaled" in hybrid.text and "cosine" in hybrid.text and "notes.txt" in hybrid.text
    ctx = client.get("/c/demo/search", params={"q": "queen bee", "mode": "fulltext", "budget": 200, "whole": "0"})
    assert ctx.status_code == 200 and "tokens," in ctx.text
    whole = client.get("/c/demo/search", params={"q": "honey bee colonies queen", "mode": "fulltext", "k": 5})
    assert "whole section" in whole.text or "guide.md" in whole.text
    assert client.get("/c/demo/search").status_code == 200  # the empty form


def test_the_run_page_shows_counts_timings_errors_and_changes(client):
    r = client.get("/r/2")
    assert r.status_code == 200
    assert "binary.md" in r.text and "looks like a binary file" in r.text  # the file and the reason
    assert "sections_rechunked" in r.text and "Timings" in r.text
    assert "guide.md" in r.text and "changed" in r.text  # what it changed
    assert "notes.txt" not in r.text.split("What it changed")[1]  # unchanged: written by run 1
    assert "new" in client.get("/r/1").text


@pytest.mark.parametrize(
    ("path", "status"),
    [("/d/999999", 404), ("/d/abc", 404), ("/r/999999", 404), ("/r/1x", 404), ("/c/nope", 404),
     ("/c/nope/search?q=x", 404), ("/nowhere", 404), ("/c/demo/search?q=x&mode=bogus", 400),
     ("/c/demo/search?q=x&k=0", 400), ("/c/demo/search?q=x&k=many", 400), ("/d/1?hl=9-2", 400),
     ("/c/demo?docs=-1", 400)],
)  # fmt: skip
def test_bad_input_is_a_clear_page_with_its_status(client, path, status):
    r = client.get(path)
    assert r.status_code == status
    assert "Traceback" not in r.text and f"{status} ·" in r.text


def test_the_view_never_writes(client):
    ui = client.app.state.ui
    with ui.conn() as c, pytest.raises(psycopg.errors.ReadOnlySqlTransaction):
        c.execute("DELETE FROM chunks")


def test_a_database_that_is_gone_or_empty_is_a_503_page(settings, pg_server):
    with TestClient(create_app("postgresql://127.0.0.1:1/nothing", settings=settings)) as c:
        for path in ("/", "/c/demo", "/d/1"):
            r = c.get(path)
            assert r.status_code == 503 and "not reachable" in r.text and "Traceback" not in r.text
    name = f"t_ui_empty_{os.getpid()}"
    with psycopg.connect(pg_server, autocommit=True) as a:
        a.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        d = conninfo_to_dict(pg_server)
        d["dbname"] = name
        with TestClient(create_app(make_conninfo(**d), settings=settings)) as c:
            r = c.get("/")
            assert r.status_code == 503 and "no chunkyard schema" in r.text
    finally:
        with psycopg.connect(pg_server, autocommit=True) as a:
            a.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


_roles = itertools.count()


@pytest.fixture
def tenant(pg_server, database_url, ingested, settings, tmp_path):
    """A reader granted collection 'mine' only, row-level security on; 'demo' belongs to another tenant."""
    role = f"t_ui_role_{os.getpid()}_{next(_roles)}"
    other = tmp_path / "mine"
    other.mkdir()
    (other / "pelicans.md").write_text("# Pelicans\n\nPelicans scoop fish into their pouch.\n")
    run_ingest([other], settings=settings, collection="mine")
    with psycopg.connect(pg_server, autocommit=True) as a:
        a.execute(sql.SQL("CREATE ROLE {} LOGIN IN ROLE chunkyard_reader").format(sql.Identifier(role)))
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute("SELECT chunkyard_grant('mine', %s)", (role,))
        c.execute("SELECT chunkyard_enable_rls()")
    d = conninfo_to_dict(database_url)
    d["user"] = role
    yield make_conninfo(**d)
    with psycopg.connect(database_url, autocommit=True) as c:
        c.execute("SELECT chunkyard_disable_rls()")
        c.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
    with psycopg.connect(pg_server, autocommit=True) as a:
        a.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


def test_a_tenant_sees_its_collection_and_nothing_of_another(tenant, settings, conn):
    theirs_doc = conn.execute("SELECT id FROM documents WHERE source_uri LIKE '%guide.md'").fetchone()[0]
    mine_doc = conn.execute("SELECT id FROM documents WHERE source_uri LIKE '%pelicans.md'").fetchone()[0]
    theirs_run = conn.execute("SELECT min(r.id) FROM runs r JOIN collections c ON c.id = r.collection_id "
                              "WHERE c.name = 'demo'").fetchone()[0]  # fmt: skip
    with TestClient(create_app(tenant, settings=settings)) as c:
        index = c.get("/").text
        assert 'href="/c/mine"' in index and "/c/demo" not in index
        assert c.get("/c/mine").status_code == 200
        assert c.get(f"/d/{mine_doc}").status_code == 200
        assert c.get("/c/mine/search", params={"q": "pelicans fish", "mode": "fulltext"}).text.count("<mark>") >= 1
        for path in ("/c/demo", f"/d/{theirs_doc}", f"/r/{theirs_run}", "/c/demo/search?q=keys&mode=fulltext"):
            r = c.get(path)
            assert r.status_code == 404, path
            assert "Rotating" not in r.text and "guide.md" not in r.text


def test_segments_cut_overlapping_chunks_and_a_highlight():
    text = "abcdefghij"
    segs = segments(text, 0, [(1, 0, 6), (2, 4, 10)], highlight=(5, 7))
    assert [(s.start, s.end, s.chunks, s.highlight) for s in segs] == [
        (0, 4, (1,), False), (4, 5, (1, 2), False), (5, 6, (1, 2), True), (6, 7, (2,), True), (7, 10, (2,), False),
    ]  # fmt: skip
    assert "".join(s.text for s in segs) == text
    # a window from offset 100, a chunk that began before it
    assert [(s.start, s.chunks) for s in segments("xyz", 100, [(3, 90, 101)])] == [(100, (3,)), (101, ())]
