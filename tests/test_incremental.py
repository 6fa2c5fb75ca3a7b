"""Incremental runs: exact counts for real edit scenarios, crash convergence, per-section identity."""

from __future__ import annotations

import itertools
import json
import shutil

import numpy as np
import psycopg
import pytest
from psycopg import sql

from pipeline import store
from pipeline.config import Profile, RecursiveConfig, Settings
from pipeline.ingest import run_ingest

SECTIONS = {
    "A": "Alpacas graze on the high plains and hum when they are content.",
    "B": "Barnacles glue themselves to rocks with a protein cement.",
    "C": "Cuttlefish change colour in a fraction of a second.",
    "D": "Dormice sleep through the winter in nests of woven grass.",
    "E": "Eels cross the Atlantic to spawn in the Sargasso Sea.",
}


def page(order: str = "ABCDE", *, extra: dict[str, str] | None = None, title: str = "Animals") -> str:
    """A markdown page: a title section, then one H2 section per letter."""
    body = dict(SECTIONS, **(extra or {}))
    parts = [f"# {title}\n\nNotes on animals, one per section.\n"]
    parts += [f"## {k}\n\n{body[k]}\n" for k in order]
    return "\n".join(parts)


def ingest(path, settings, **kw):
    stats, run_id, status = run_ingest([path], settings=settings, **kw)
    assert status == "completed", stats.errors
    return stats.counts


def chunk_ids(conn) -> dict[str, int]:
    return dict(conn.execute("SELECT text, id FROM chunks").fetchall())


def contract_ok(conn) -> bool:
    bad = conn.execute(
        """SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id
           WHERE substr(d.normalized_text, c.char_start + 1, c.char_end - c.char_start) <> c.text"""
    ).fetchone()[0]
    return bad == 0


@pytest.fixture
def corpus(tmp_path):
    d = tmp_path / "docs"
    d.mkdir()
    (d / "animals.md").write_text(page())
    return d


def test_no_change(corpus, settings, conn):
    first = ingest(corpus, settings)
    assert first["chunks_embedded"] == 6 and first["sections_rechunked"] == 6
    c = ingest(corpus, settings)
    assert c["documents_unchanged"] == 1
    assert c["chunks_embedded"] == c["sections_rechunked"] == c["chunks_written"] == 0


def test_one_word_in_one_section(corpus, settings, conn):
    ingest(corpus, settings)
    ids = chunk_ids(conn)
    (corpus / "animals.md").write_text(page(extra={"C": SECTIONS["C"].replace("second", "moment")}))
    c = ingest(corpus, settings)
    assert (c["documents_changed"], c["sections_kept"], c["sections_rechunked"], c["sections_deleted"]) == (
        1,
        5,
        1,
        1,
    )
    assert (c["chunks_embedded"], c["chunks_deleted"], c["chunks_written"]) == (1, 1, 1)
    after = chunk_ids(conn)
    assert sum(1 for t, i in after.items() if ids.get(t) == i) == 5
    assert contract_ok(conn)


def test_section_inserted_at_top_keeps_everything_below(corpus, settings, conn):
    ingest(corpus, settings)
    ids = chunk_ids(conn)
    (corpus / "animals.md").write_text(page("NABCDE", extra={"N": "Newts regrow lost limbs."}))
    c = ingest(corpus, settings)
    assert (c["sections_kept"], c["sections_rechunked"], c["sections_deleted"]) == (6, 1, 0)
    assert c["chunks_embedded"] == 1
    after = chunk_ids(conn)
    assert all(after[t] == i for t, i in ids.items())  # same rows, same embeddings
    assert contract_ok(conn)  # their offsets moved with the text
    ordinals = [r[0] for r in conn.execute("SELECT heading_path[2] FROM sections ORDER BY ordinal")]
    assert ordinals == [None, "N", "A", "B", "C", "D", "E"]


def test_section_moved(corpus, settings, conn):
    ingest(corpus, settings)
    (corpus / "animals.md").write_text(page("ACDBE"))
    c = ingest(corpus, settings)
    assert (c["sections_kept"], c["sections_rechunked"], c["sections_deleted"], c["chunks_embedded"]) == (
        6,
        0,
        0,
        0,
    )
    assert contract_ok(conn)


def test_section_deleted(corpus, settings, conn):
    ingest(corpus, settings)
    (corpus / "animals.md").write_text(page("ABCD"))
    c = ingest(corpus, settings)
    assert (c["sections_kept"], c["sections_deleted"], c["chunks_deleted"], c["chunks_embedded"]) == (
        5,
        1,
        1,
        0,
    )
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 5


def test_file_renamed_reuses_embeddings(corpus, settings, conn):
    ingest(corpus, settings)
    (corpus / "animals.md").rename(corpus / "fauna.md")
    c = ingest(corpus, settings)
    assert (c["documents_new"], c["documents_deleted"]) == (1, 1)
    assert (c["chunks_written"], c["chunks_embedded"], c["chunks_cached"]) == (6, 0, 6)
    uris = [r[0] for r in conn.execute("SELECT source_uri FROM documents")]
    assert len(uris) == 1 and uris[0].endswith("fauna.md")


def test_file_deleted(corpus, settings, conn):
    (corpus / "other.md").write_text(page(title="Other"))
    ingest(corpus, settings)
    (corpus / "animals.md").unlink()
    c = ingest(corpus, settings)
    assert (c["documents_deleted"], c["chunks_deleted"]) == (1, 6)
    assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM sections").fetchone()[0] == 6


def test_soft_delete_keeps_rows_but_hides_them(corpus, settings, conn):
    ingest(corpus, settings)
    (corpus / "animals.md").unlink()
    c = ingest(corpus, settings, soft_delete=True)
    assert c["documents_deleted"] == 1
    assert conn.execute("SELECT count(*) FROM chunks").fetchone()[0] == 6
    vec = conn.execute("SELECT embedding FROM chunk_embeddings LIMIT 1").fetchone()[0]
    assert store.search(conn, "default", vec, k=3) == []


def test_duplicate_file_embeds_nothing(corpus, settings, conn):
    ingest(corpus, settings)
    shutil.copy(corpus / "animals.md", corpus / "copy.md")
    c = ingest(corpus, settings)
    assert (c["documents_unchanged"], c["documents_new"], c["chunks_written"], c["chunks_embedded"]) == (
        1,
        1,
        6,
        0,
    )


def test_profile_change_rechunks_only_affected_types(corpus, settings, conn):
    (corpus / "notes.txt").write_text("Plain notes.\n\n" + " ".join(f"word{i}" for i in range(300)))
    ingest(corpus, settings)
    md_ids = {
        r[0]
        for r in conn.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.doc_type = 'markdown'"
        )
    }
    changed = Profile(text=RecursiveConfig(size=60, overlap=0))
    c = ingest(corpus, settings, profile=changed)
    assert c["documents_unchanged"] == 1  # the markdown file: its chunker settings did not change
    assert c["sections_rechunked"] >= 1 and c["chunks_written"] >= 300 // 60
    still = {
        r[0]
        for r in conn.execute(
            "SELECT c.id FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.doc_type = 'markdown'"
        )
    }
    assert still == md_ids
    sizes = [
        r[0]
        for r in conn.execute(
            "SELECT token_count FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.doc_type = 'text'"
        )
    ]
    assert max(sizes) <= 60


def test_a_new_parser_version_reads_stored_files_again_and_keeps_what_did_not_change(corpus, settings, conn):
    """A file stored by an older parser (its key without the parser's version) is read again once, though its
    bytes are the same; sections that come out the same keep their chunks and embed nothing."""
    ingest(corpus, settings)
    ids = chunk_ids(conn)
    (key,) = conn.execute("SELECT chunk_key FROM documents").fetchone()
    assert ":parse=3:" in key  # markdown's parser is at version 3
    conn.execute(r"UPDATE documents SET chunk_key = regexp_replace(chunk_key, ':parse=\d+', '')")
    c = ingest(corpus, settings)
    assert c.get("documents_unchanged", 0) == 0 and c["documents_changed"] == 1
    assert c["sections_rechunked"] == c["chunks_embedded"] == c["chunks_written"] == 0
    assert chunk_ids(conn) == ids and conn.execute("SELECT chunk_key FROM documents").fetchone() == (key,)
    assert ingest(corpus, settings)["documents_unchanged"] == 1


def test_documents_stored_before_languages_are_read_once_and_english_keeps_its_chunks(corpus, settings, conn):
    """A document stored before languages were detected (no ':lang=' in its key, language '' and chunks
    analysed as English) is read again once: it learns its language, and English sections keep their rows."""
    ingest(corpus, settings)
    ids = chunk_ids(conn)
    conn.execute(r"UPDATE documents SET chunk_key = regexp_replace(chunk_key, ':lang=.*$', ''), language = ''")
    c = ingest(corpus, settings)
    assert c["documents_changed"] == 1 and c["sections_rechunked"] == c["chunks_embedded"] == 0
    assert chunk_ids(conn) == ids
    assert conn.execute("SELECT language FROM documents").fetchone() == ("en",)
    assert ingest(corpus, settings)["documents_unchanged"] == 1


def test_dry_run_writes_nothing(corpus, settings, conn):
    ingest(corpus, settings)
    (corpus / "animals.md").write_text(page(extra={"C": "Cuttlefish are not fish."}))
    stats, run_id, status = run_ingest([corpus], settings=settings, dry_run=True)
    assert run_id is None
    assert stats.plan == [
        {"uri": (corpus / "animals.md").as_uri(), "action": "update", "sections_kept": 5,
         "sections_rechunked": 1, "sections_deleted": 1, "chunks": 1}
    ]  # fmt: skip
    assert stats.counts["chunks_embedded"] == 1
    assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1
    assert "Cuttlefish change colour" in conn.execute("SELECT normalized_text FROM documents").fetchone()[0]


# ------------------------------------------------------------------------------------------ crashes

_n = itertools.count()


@pytest.fixture
def make_db(pg_server, template_db):
    """Extra fresh databases for comparing two histories."""
    from tests.conftest import _with_db

    made = []

    def make() -> str:
        name = f"x_{next(_n)}_{id(made)}"
        with psycopg.connect(pg_server, autocommit=True) as c:
            c.execute(
                sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template_db)
                )
            )
        made.append(name)
        return _with_db(pg_server, name)

    yield make
    with psycopg.connect(pg_server, autocommit=True) as c:
        for name in made:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))


def snapshot(url: str) -> dict:
    """Every table's content, without row ids or timestamps."""
    with psycopg.connect(url) as c:
        return {
            "documents": c.execute(
                "SELECT source_uri, content_hash, text_hash, chunk_key, normalized_text FROM documents ORDER BY 1"
            ).fetchall(),
            "sections": c.execute(
                """SELECT d.source_uri, s.ordinal, s.heading_path, s.content_hash, s.fingerprint, s.char_start,
                          s.char_end, p.ordinal
                   FROM sections s JOIN documents d ON d.id = s.document_id LEFT JOIN sections p ON p.id = s.parent_id
                   ORDER BY 1, 2"""
            ).fetchall(),
            "chunks": c.execute(
                """SELECT d.source_uri, s.ordinal, c.ordinal, c.text, c.context, c.char_start, c.char_end,
                          c.embed_hash, c.token_count, e.embedding::text
                   FROM chunks c JOIN chunk_embeddings e ON e.chunk_id = c.id JOIN sections s ON s.id = c.section_id JOIN documents d ON d.id = c.document_id
                   ORDER BY 1, 2, 3"""
            ).fetchall(),
            "cache": c.execute("SELECT model, text_hash FROM embedding_cache ORDER BY 2").fetchall(),
        }


@pytest.mark.parametrize("path", ["per-document", "bulk"])
def test_crash_between_documents_converges(tmp_path, make_db, monkeypatch, path):
    """A crash while storing: what was committed stays, the next run does the rest, and the result is the
    same as a run that never crashed. Per document (a collection that holds vectors already: one
    transaction per document) and in bulk (the first load of a collection: a batch in one transaction)."""
    d = tmp_path / "docs"
    d.mkdir()
    for name, title in (("a.md", "First"), ("b.md", "Second"), ("c.md", "Third")):
        (d / name).write_text(page(title=title))
    crashed, clean = make_db(), make_db()
    if path == "per-document":
        monkeypatch.setattr(store, "defer_vector_index", lambda conn, set_id: False)
    name = "write_document" if path == "per-document" else "write_documents"
    real = getattr(store, name)
    calls = itertools.count()

    def crash_on_second(*a, **kw):
        if path == "bulk" or next(calls) == 1:
            raise KeyboardInterrupt("injected crash between two documents")
        return real(*a, **kw)

    monkeypatch.setattr(store, name, crash_on_second)
    with pytest.raises(KeyboardInterrupt):
        run_ingest([d], settings=Settings(database_url=crashed))
    monkeypatch.setattr(store, name, real)
    stored = 1 if path == "per-document" else 0
    with psycopg.connect(crashed) as c:
        assert c.execute("SELECT count(*) FROM documents").fetchone()[0] == stored
        assert c.execute("SELECT status FROM runs").fetchone()[0] == "crashed"
    stats, _, status = run_ingest([d], settings=Settings(database_url=crashed))
    assert status == "completed"
    assert stats.counts["documents_unchanged"] == stored and stats.counts["documents_new"] == 3 - stored
    run_ingest([d], settings=Settings(database_url=clean))
    assert snapshot(crashed) == snapshot(clean)


def test_failure_inside_a_document_keeps_its_old_state(corpus, settings, conn, monkeypatch):
    ingest(corpus, settings)
    before = snapshot(settings.database_url)
    (corpus / "animals.md").write_text(page("ABCDE", extra={"A": "Alpacas are camelids."}))
    real = store.write_document

    def broken(*a, **kw):
        kw["vectors"] = {}  # the COPY of the new chunks fails half-way through the transaction
        return real(*a, **kw)

    monkeypatch.setattr(store, "write_document", broken)
    with pytest.raises(KeyError):
        run_ingest([corpus], settings=settings)
    after = snapshot(settings.database_url)
    for table in ("documents", "sections", "chunks"):
        assert after[table] == before[table], table
    # the new embedding is cached (valid whatever happens to the document): the retry will not redo it
    assert len(after["cache"]) == len(before["cache"]) + 1


def assert_same_rows(a: str, b: str) -> None:
    """Two databases hold the same documents, sections and chunks, and vectors that are the same up to the
    batch they were embedded in (padding moves the last digits)."""
    sa, sb = snapshot(a), snapshot(b)
    for table in ("documents", "sections"):
        assert sa[table] == sb[table], table
    assert [r[:-1] for r in sa["chunks"]] == [r[:-1] for r in sb["chunks"]]
    for ra, rb in zip(sa["chunks"], sb["chunks"], strict=True):
        va, vb = (np.array(json.loads(r[-1])) for r in (ra, rb))
        assert float(va @ vb) / float(np.linalg.norm(va) * np.linalg.norm(vb)) > 0.99


def hnsw_indexes(url: str) -> list[str]:
    with psycopg.connect(url) as c:
        return [r[0] for r in c.execute("SELECT indexname FROM pg_indexes WHERE indexname LIKE '%%_hnsw'")]


def test_a_first_load_writes_in_bulk_and_builds_the_vector_index_once(tmp_path, make_db, monkeypatch):
    """The first load of an empty collection drops its (empty) HNSW index, writes each batch's documents in
    one transaction and builds the index when the run ends; a later run into the filled collection keeps the
    index and writes document by document; both give what a run that never went in bulk gives."""
    d = tmp_path / "docs"
    d.mkdir()
    for i in range(6):
        (d / f"p{i}.md").write_text(page(title=f"Page {i}"))
    bulk, one_by_one = make_db(), make_db()
    real = store.write_documents
    written: list[int] = []
    indexes_while_writing: list[list[str]] = []

    def counting(conn, **kw):
        written.append(len(kw["docs"]))
        indexes_while_writing.append(hnsw_indexes(bulk))
        return real(conn, **kw)

    monkeypatch.setattr(store, "write_documents", counting)
    ingest(d, Settings(database_url=bulk), files_per_batch=3, batch_bytes=None)
    assert written == [3, 3] and indexes_while_writing == [[], []]
    assert len(hnsw_indexes(bulk)) == 1  # built when the run ended
    # the next run: one changed, one new file into a collection that holds vectors: per document
    (d / "p0.md").write_text(page("ABC", title="Page 0"))
    (d / "p6.md").write_text(page(title="Page 6"))
    counts = ingest(d, Settings(database_url=bulk), files_per_batch=3, batch_bytes=None)
    assert written == [3, 3] and len(hnsw_indexes(bulk)) == 1
    assert counts["documents_changed"] == 1 and counts["documents_new"] == 1
    # the same files written document by document from the start, in one batch
    monkeypatch.setattr(store, "defer_vector_index", lambda conn, set_id: False)
    ingest(d, Settings(database_url=one_by_one), files_per_batch=100, batch_bytes=None)
    assert written == [3, 3]
    assert_same_rows(bulk, one_by_one)


def test_overlapped_batches_store_what_one_batch_stores(tmp_path, make_db):
    """Many batches (their stages overlapped: `executor.overlapped`) store exactly what one batch stores,
    and report every file once, a bad one included."""
    d = tmp_path / "docs"
    d.mkdir()
    for i in range(7):
        (d / f"p{i}.md").write_text(page(title=f"Page {i}"))
    (d / "p3.md").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4)  # not text: fails, the run goes on
    many, one = make_db(), make_db()
    s_many, _, status = run_ingest([d], settings=Settings(database_url=many), files_per_batch=1, batch_bytes=None)
    s_one, _, _ = run_ingest([d], settings=Settings(database_url=one), files_per_batch=100, batch_bytes=None)
    assert status == "failed" and [e.uri.rsplit("/", 1)[-1] for e in s_many.errors] == ["p3.md"]
    assert s_many.counts == s_one.counts and s_many.counts["documents_new"] == 6
    assert_same_rows(many, one)
