"""Bulk loads: many new documents in one transaction (set-based inserts, binary COPY), and search indexes
dropped before a large first load and built once after it, which is several times faster than row by row."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import psycopg
from psycopg import sql
from psycopg.types.json import Jsonb

from pipeline.model import Chunk, Document, embed_hash, heading_context, section_hash, sha256

#: The full-text index a bulk load may build after the load instead of maintaining it row by row (name ->
#: definition, as in migration 002); `ensure_search_indexes` restores it when missing. The HNSW index is the
#: collection's own (its embedding set's partition, `chunkyard_vector_index`).
SEARCH_INDEXES: dict[str, str] = {
    "chunks_tsv_idx": "CREATE INDEX IF NOT EXISTS chunks_tsv_idx ON chunks USING gin (tsv)",
}


@dataclass
class NewDocument:
    """A document with no stored state: every section is new and chunked."""

    doc: Document
    chunk_key: str
    fingerprints: list[str]
    chunks: dict[int, list[Chunk]] = field(default_factory=dict)  # section index -> its chunks


def document_metadata(doc: Document) -> str:
    """documents.metadata as JSON: warnings, language, and what the parser adds (pages, OCR pages)."""
    return json.dumps({"warnings": doc.warnings, "language": doc.language, **doc.metadata})


def write_documents(
    conn: psycopg.Connection,
    *,
    collection_id: int,
    docs: Sequence[NewDocument],
    vectors: dict[str, np.ndarray],
    set_id: int,
    run_id: int | None,
) -> dict[str, int]:
    """Insert new documents, their sections and chunks in ONE transaction of a few set-based statements;
    returns uri -> id of those written (a uri stored meanwhile by someone else is left to the caller)."""
    if not docs:
        return {}
    with conn.transaction():
        rows = conn.execute(
            """INSERT INTO documents (collection_id, source_uri, content_hash, text_hash, doc_type, chunk_key,
                                      mime, title, metadata, normalized_text, language, last_run_id)
               SELECT %s, u.* , %s
               FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[], %s::text[],
                           %s::jsonb[], %s::text[], %s::text[]) AS u
               ON CONFLICT (collection_id, source_uri) DO NOTHING
               RETURNING source_uri, id""",
            (
                collection_id,
                run_id,
                [d.doc.uri for d in docs],
                [d.doc.raw_hash for d in docs],
                [d.doc.text_hash for d in docs],
                [d.doc.doc_type for d in docs],
                [d.chunk_key for d in docs],
                [d.doc.mime for d in docs],
                [d.doc.title for d in docs],
                [document_metadata(d.doc) for d in docs],
                [d.doc.text for d in docs],
                [d.doc.lang for d in docs],
            ),
        ).fetchall()
        doc_ids = dict(rows)
        written = [d for d in docs if d.doc.uri in doc_ids]
        sec_rows = [(doc_ids[d.doc.uri], i, s, d) for d in written for i, s in enumerate(d.doc.sections)]
        if not sec_rows:
            return doc_ids
        ids = conn.execute(
            """INSERT INTO sections (document_id, ordinal, level, kind, heading_path, content_hash, fingerprint,
                                     char_start, char_end)
               SELECT u.doc, u.ordinal, u.level, u.kind, coalesce(string_to_array(u.path, E'\\x1f'), '{}'),
                      u.hash, u.fp, u.cs, u.ce
               FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::text[], %s::text[], %s::text[], %s::text[],
                           %s::int[], %s::int[]) AS u(doc, ordinal, level, kind, path, hash, fp, cs, ce)
               RETURNING document_id, ordinal, id""",
            (
                [r[0] for r in sec_rows],
                [r[1] for r in sec_rows],
                [s.level for _, _, s, _ in sec_rows],
                [s.kind for _, _, s, _ in sec_rows],
                ["\x1f".join(s.heading_path) if s.heading_path else None for _, _, s, _ in sec_rows],
                [section_hash(d.doc, s) for _, _, s, d in sec_rows],
                [d.fingerprints[i] for _, i, _, d in sec_rows],
                [s.start for _, _, s, _ in sec_rows],
                [s.end for _, _, s, _ in sec_rows],
            ),
        ).fetchall()
        sid = {(doc, ordinal): i for doc, ordinal, i in ids}
        links = [
            (sid[doc, i], sid[doc, s.parent]) for doc, i, s, _ in sec_rows if s.parent is not None
        ]  # fmt: skip
        if links:
            conn.execute(
                """UPDATE sections s SET parent_id = u.parent FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, parent)
                   WHERE s.id = u.id""",
                ([a for a, _ in links], [b for _, b in links]),
            )
        copy_chunks(
            conn,
            [
                (
                    sid[doc_ids[d.doc.uri], i], doc_ids[d.doc.uri], k, ch, heading_context(d.doc, d.doc.sections[i]),
                    d.doc.sections[i].lang,
                )
                for d in written
                for i, chunks in d.chunks.items()
                for k, ch in enumerate(chunks)
            ],
            collection_id=collection_id,
            vectors=vectors,
            set_id=set_id,
        )
    return doc_ids


def copy_chunks(
    conn: psycopg.Connection,
    rows: Sequence[tuple[int, int, int, Chunk, str, str]],
    *,
    collection_id: int,
    vectors: dict[str, np.ndarray],
    set_id: int,
) -> None:
    """Binary COPY of (section id, document id, ordinal, chunk, search context, language) rows into chunks, and
    of their vectors into the embedding set's partition: the one way chunks are written. Ids are drawn first, so
    both are plain COPYs. The search context (`model.heading_context`) and the section's language are read by
    full-text search only."""
    if not rows:
        return
    ids = [
        r[0]
        for r in conn.execute(
            "SELECT nextval(pg_get_serial_sequence('chunks', 'id')) FROM generate_series(1, %s)", (len(rows),)
        ).fetchall()
    ]
    hashes = [embed_hash(ch.embed_text) for _, _, _, ch, _, _ in rows]
    cols = """id, section_id, document_id, collection_id, ordinal, text, context, content_hash, embed_hash,
              char_start, char_end, token_count, metadata, search_context, language"""
    with _copy_into(conn, "chunks", cols) as cp:
        cp.set_types(["int8", "int8", "int8", "int8", "int4", "text", "text", "text", "text", "int4", "int4",
                      "int4", "jsonb", "text", "text"])  # fmt: skip
        for chunk_id, h, (section_id, doc_id, ordinal, ch, search, lang) in zip(ids, hashes, rows, strict=True):
            cp.write_row([
                chunk_id, section_id, doc_id, collection_id, ordinal, ch.text, ch.context, sha256(ch.text), h,
                ch.start, ch.end, ch.token_count, Jsonb(ch.metadata), search, lang,
            ])  # fmt: skip
    copy_vectors(conn, set_id, ((i, vectors[h]) for i, h in zip(ids, hashes, strict=True)))


def copy_vectors(conn: psycopg.Connection, set_id: int, rows: Iterable[tuple[int, np.ndarray]]) -> None:
    """Binary COPY of (chunk id, vector) rows into an embedding set's partition."""
    with _copy_into(conn, f"chunk_vectors_{set_id}", "chunk_id, set_id, embedding") as cp:
        cp.set_types(["int8", "int8", "vector"])
        for chunk_id, vec in rows:
            cp.write_row([chunk_id, set_id, vec])


@contextmanager
def _copy_into(conn: psycopg.Connection, table: str, columns: str) -> Iterator[psycopg.Copy]:
    """A binary COPY into `table`; where row-level security applies to this role (a writer after
    `chunkyard_enable_rls()`), which COPY FROM refuses, into a temporary copy of it and then INSERT ... SELECT,
    which the policies check."""
    if not conn.execute("SELECT row_security_active(%s)", (table,)).fetchone()[0]:
        with conn.cursor().copy(
            sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(
                sql.Identifier(table), sql.SQL(columns)
            )
        ) as cp:
            yield cp
        return
    temp = sql.Identifier(f"_in_{table}")
    conn.execute(
        sql.SQL("CREATE TEMP TABLE IF NOT EXISTS {} (LIKE {}) ON COMMIT DELETE ROWS").format(
            temp, sql.Identifier(table)
        )
    )
    with conn.cursor().copy(
        sql.SQL("COPY {} ({}) FROM STDIN WITH (FORMAT BINARY)").format(temp, sql.SQL(columns))
    ) as cp:
        yield cp
    conn.execute(
        sql.SQL("INSERT INTO {} ({cols}) SELECT {cols} FROM {}").format(
            sql.Identifier(table), temp, cols=sql.SQL(columns)
        )
    )
    conn.execute(sql.SQL("TRUNCATE {}").format(temp))


# ------------------------------------------------------------------------------------ search indexes


def bulk_load_pays(conn: psycopg.Connection, expected_chunks: int) -> bool:
    """Whether dropping the search indexes and building them after the load is cheaper than keeping them:
    when the load at least doubles the chunk table (building is several times faster than inserting), and
    this role owns the table (a writer role may write rows, not drop indexes)."""
    row = conn.execute(
        """SELECT reltuples::bigint, pg_has_role(current_user, relowner, 'USAGE')
           FROM pg_class WHERE oid = to_regclass('chunks')"""
    ).fetchone()
    conn.commit()
    return bool(row and row[1] and expected_chunks >= max(10_000, row[0]))


def bulk_mode(conn: psycopg.Connection, set_id: int) -> bool:
    """Whether a bulk load into this embedding set is under way (its HNSW index dropped): batches then write
    many documents at once."""
    row = conn.execute("SELECT to_regclass(%s) IS NULL", (f"chunk_vectors_{set_id}_hnsw",)).fetchone()
    conn.commit()
    return bool(row[0])


def defer_vector_index(conn: psycopg.Connection, set_id: int) -> bool:
    """A first load into an empty embedding set: drop its HNSW index (no search loses anything, the set holds
    no vectors), so batches write through the bulk path and the index is built once when the run ends, which
    is cheaper than inserting into the graph vector by vector (4,171 vectors: 0.7 s to build against 2.1 s
    of inserts). The full-text index, shared by every collection, stays. Whether it was dropped."""
    row = conn.execute(
        sql.SQL("SELECT NOT EXISTS (SELECT FROM {}) AND to_regclass(%s) IS NOT NULL").format(
            sql.Identifier(f"chunk_vectors_{set_id}")
        ),
        (f"chunk_vectors_{set_id}_hnsw",),
    ).fetchone()
    if row[0]:
        conn.execute("SELECT chunkyard_vector_index(%s, false)", (set_id,))
    conn.commit()
    return bool(row[0])


def drop_search_indexes(conn: psycopg.Connection, set_id: int) -> None:
    """Drop the set's HNSW index and the full-text index before a large load (searches scan until they are
    built again)."""
    conn.execute("SELECT chunkyard_vector_index(%s, false)", (set_id,))
    for name in SEARCH_INDEXES:
        conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
    conn.commit()


def ensure_search_indexes(
    conn: psycopg.Connection, set_ids: Sequence[int] = (), *, maintenance_work_mem: str = "1GB"
) -> list[str]:
    """Build the search indexes that are missing (after a bulk load, or one that crashed): the full-text one,
    and the HNSW index of each given embedding set; returns their names."""
    built = []
    for set_id in set_ids:
        name = f"chunk_vectors_{set_id}_hnsw"
        if conn.execute("SELECT to_regclass(%s) IS NULL", (name,)).fetchone()[0]:
            with conn.transaction():
                conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
                if conn.execute("SELECT chunkyard_vector_index(%s, true)", (set_id,)).fetchone()[0]:
                    built.append(name)
    owner = conn.execute(
        "SELECT pg_has_role(current_user, relowner, 'USAGE') FROM pg_class WHERE oid = 'chunks'::regclass"
    )
    if not owner.fetchone()[0]:
        conn.commit()
        return built  # only the table's owner can build it; the owner's next run does
    missing = [
        n for n in SEARCH_INDEXES if conn.execute("SELECT to_regclass(%s) IS NULL", (n,)).fetchone()[0]
    ]
    for name in missing:
        with conn.transaction():
            conn.execute("SELECT set_config('maintenance_work_mem', %s, true)", (maintenance_work_mem,))
            conn.execute(SEARCH_INDEXES[name])
    conn.commit()
    return built + missing
