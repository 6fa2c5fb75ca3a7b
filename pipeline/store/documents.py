"""Documents, sections and chunks: the per-document swap (one transaction), COPY, the embedding cache, prune."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import psycopg

from pipeline.errors import ConcurrentUpdate
from pipeline.model import (
    Chunk,
    Document,
    SectionPlan,
    StoredDocument,
    StoredSection,
    heading_context,
    section_hash,
)
from pipeline.store.bulk import copy_chunks, document_metadata


def as_array(v) -> np.ndarray:
    """A stored vector as float32 numpy (pgvector returns Vector objects in recent versions)."""
    return np.asarray(v.to_numpy() if hasattr(v, "to_numpy") else v, dtype=np.float32)


# --------------------------------------------------------------------------------------- documents


def stored_documents(
    conn: psycopg.Connection, collection_id: int, uris: Sequence[str]
) -> dict[str, StoredDocument]:
    rows = conn.execute(
        """SELECT source_uri, id, content_hash, chunk_key, deleted_at IS NOT NULL, doc_type
           FROM documents WHERE collection_id = %s AND source_uri = ANY(%s)""",
        (collection_id, list(uris)),
    ).fetchall()
    conn.commit()
    return {r[0]: StoredDocument(*r[1:]) for r in rows}


def unstemmed_languages(conn: psycopg.Connection, collection_id: int, run_id: int) -> list[tuple[str, str]]:
    """(language, a document's uri) for each language of documents this run wrote that Postgres has no
    text-search configuration for (full text falls back to `simple`); Chinese, Japanese and Korean are
    segmented into bigrams on purpose and not listed."""
    return conn.execute(
        """SELECT d.language, min(d.source_uri) FROM documents d
           WHERE d.collection_id = %s AND d.last_run_id = %s AND d.language NOT IN ('', 'zh', 'ja', 'ko')
             AND chunkyard_fts_config(d.language) = 'simple'::regconfig
           GROUP BY d.language ORDER BY d.language""",
        (collection_id, run_id),
    ).fetchall()


def source_uris(conn: psycopg.Connection, collection_id: int) -> list[str]:
    """Source URIs of a collection's live documents: what a reindex re-reads and a prune checks."""
    rows = conn.execute(
        "SELECT source_uri FROM documents WHERE collection_id = %s AND deleted_at IS NULL ORDER BY source_uri",
        (collection_id,),
    ).fetchall()
    conn.commit()
    return [r[0] for r in rows]


def stored_sections(conn: psycopg.Connection, document_ids: Sequence[int]) -> dict[int, list[StoredSection]]:
    rows = conn.execute(
        """SELECT s.document_id, s.id, s.fingerprint, s.char_start,
                  (SELECT count(*) FROM chunks c WHERE c.section_id = s.id)
           FROM sections s WHERE s.document_id = ANY(%s) ORDER BY s.document_id, s.ordinal""",
        (list(document_ids),),
    ).fetchall()
    conn.commit()
    out: dict[int, list[StoredSection]] = {}
    for doc_id, sid, fp, start, n in rows:
        out.setdefault(doc_id, []).append(StoredSection(sid, fp, start, n))
    return out


def cache_lookup(conn: psycopg.Connection, model: str, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """Embeddings already computed for these texts with this model."""
    if not hashes:
        return {}
    rows = conn.execute(
        "SELECT text_hash, embedding FROM embedding_cache WHERE model = %s AND text_hash = ANY(%s)",
        (model, list(hashes)),
    ).fetchall()
    conn.commit()
    return {h: as_array(v) for h, v in rows}


def cache_store(conn: psycopg.Connection, model: str, vectors: dict[str, np.ndarray]) -> None:
    """Add new embeddings to the cache (binary COPY into a temp table, then insert the new ones)."""
    if not vectors:
        return
    with conn.transaction():
        conn.execute(
            "CREATE TEMP TABLE IF NOT EXISTS _cache_in (text_hash text, embedding vector) ON COMMIT DELETE ROWS"
        )
        with conn.cursor().copy(
            "COPY _cache_in (text_hash, embedding) FROM STDIN WITH (FORMAT BINARY)"
        ) as cp:
            cp.set_types(["text", "vector"])
            for h, v in vectors.items():
                cp.write_row([h, v])
        conn.execute(
            """INSERT INTO embedding_cache (model, text_hash, embedding)
               SELECT %s, text_hash, embedding FROM _cache_in ON CONFLICT DO NOTHING""",
            (model,),
        )


def write_document(
    conn: psycopg.Connection,
    *,
    collection_id: int,
    doc: Document,
    chunk_key: str,
    fingerprints: list[str],
    plan: SectionPlan,
    new_chunks: dict[int, list[Chunk]],
    vectors: dict[str, np.ndarray],
    set_id: int,
    run_id: int | None,
    expected_sections: Iterable[int] = (),
) -> int:
    """Swap in a document's new state in ONE transaction: a crash leaves the old state whole."""
    with conn.transaction():
        conn.execute(
            "SELECT pg_advisory_xact_lock(hashtext('chunkyard:document'), hashtext(%s))",
            (f"{collection_id}:{doc.uri}",),
        )
        # Optimistic check: the stored sections the plan was made against must still be there.
        expected = set(expected_sections)
        if expected:
            present = conn.execute(
                "SELECT count(*) FROM sections WHERE id = ANY(%s)", (list(expected),)
            ).fetchone()[0]
            if present != len(expected):
                raise ConcurrentUpdate("document changed while it was being processed; retry")
        doc_id = conn.execute(
            """INSERT INTO documents (collection_id, source_uri, content_hash, text_hash, doc_type, chunk_key, mime,
                                      title, metadata, normalized_text, last_run_id, language)
               VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
               ON CONFLICT (collection_id, source_uri) DO UPDATE SET
                 content_hash = EXCLUDED.content_hash, text_hash = EXCLUDED.text_hash,
                 doc_type = EXCLUDED.doc_type, chunk_key = EXCLUDED.chunk_key, mime = EXCLUDED.mime,
                 title = EXCLUDED.title, metadata = EXCLUDED.metadata, language = EXCLUDED.language,
                 normalized_text = EXCLUDED.normalized_text, last_run_id = EXCLUDED.last_run_id,
                 deleted_at = NULL, updated_at = now()
               RETURNING id""",
            (
                collection_id,
                doc.uri,
                doc.raw_hash,
                doc.text_hash,
                doc.doc_type,
                chunk_key,
                doc.mime,
                doc.title,
                document_metadata(doc),
                doc.text,
                run_id,
                doc.lang,
            ),
        ).fetchone()[0]
        if plan.delete:
            conn.execute("DELETE FROM sections WHERE id = ANY(%s)", (plan.delete,))
        ids: dict[int, int] = {}  # section index -> row id
        if plan.keep:
            idx, sids, deltas = zip(*plan.keep, strict=True)
            secs = [doc.sections[i] for i in idx]
            conn.execute(
                """UPDATE sections s SET ordinal = u.ordinal, char_start = u.cs, char_end = u.ce
                   FROM unnest(%s::bigint[], %s::int[], %s::int[], %s::int[]) AS u(id, ordinal, cs, ce)
                   WHERE s.id = u.id AND (s.ordinal, s.char_start, s.char_end) IS DISTINCT FROM (u.ordinal, u.cs, u.ce)""",
                (list(sids), list(idx), [s.start for s in secs], [s.end for s in secs]),
            )
            moved = [(sid, d) for sid, d in zip(sids, deltas, strict=True) if d]
            if moved:
                conn.execute(
                    """UPDATE chunks c SET char_start = c.char_start + u.delta, char_end = c.char_end + u.delta
                       FROM unnest(%s::bigint[], %s::int[]) AS u(id, delta) WHERE c.section_id = u.id""",
                    ([m[0] for m in moved], [m[1] for m in moved]),
                )
            ids.update(dict(zip(idx, sids, strict=True)))
        if plan.new:
            secs = [doc.sections[i] for i in plan.new]
            rows = conn.execute(
                """INSERT INTO sections (document_id, ordinal, level, kind, heading_path, content_hash,
                                         fingerprint, char_start, char_end)
                   SELECT %s, u.ordinal, u.level, u.kind, coalesce(string_to_array(u.path, E'\\x1f'), '{}'), u.hash, u.fp, u.cs, u.ce
                   FROM unnest(%s::int[], %s::int[], %s::text[], %s::text[], %s::text[], %s::text[], %s::int[], %s::int[])
                        AS u(ordinal, level, kind, path, hash, fp, cs, ce)
                   RETURNING id, ordinal""",
                (
                    doc_id,
                    plan.new,
                    [s.level for s in secs],
                    [s.kind for s in secs],
                    ["\x1f".join(s.heading_path) if s.heading_path else None for s in secs],
                    [section_hash(doc, s) for s in secs],
                    [fingerprints[i] for i in plan.new],
                    [s.start for s in secs],
                    [s.end for s in secs],
                ),
            ).fetchall()
            ids.update({ordinal: sid for sid, ordinal in rows})
        # parent links, by index in the new section list
        pairs = [(ids[i], ids.get(s.parent)) for i, s in enumerate(doc.sections) if i in ids]
        if pairs:
            conn.execute(
                """UPDATE sections s SET parent_id = u.parent FROM unnest(%s::bigint[], %s::bigint[]) AS u(id, parent)
                   WHERE s.id = u.id AND s.parent_id IS DISTINCT FROM u.parent""",
                ([p[0] for p in pairs], [p[1] for p in pairs]),
            )
        rows = [
            (ids[i], doc_id, k, ch, heading_context(doc, doc.sections[i]), doc.sections[i].lang)
            for i, chunks in new_chunks.items()
            for k, ch in enumerate(chunks)
        ]
        copy_chunks(conn, rows, collection_id=collection_id, vectors=vectors, set_id=set_id)
    return doc_id


def prune(
    conn: psycopg.Connection,
    collection_id: int,
    *,
    roots: Sequence[str],
    seen: set[str],
    soft: bool,
    dry_run: bool = False,
) -> tuple[int, int]:
    """Delete (or mark deleted) documents under the given roots that the run did not see; a `seen` entry
    ending in "/" (a folder discovery could not list) counts every document below it as seen.

    A dry run only counts what would go: (documents, chunks)."""
    if not roots:
        return 0, 0
    rows = conn.execute(
        """SELECT id, source_uri FROM documents
           WHERE collection_id = %s AND deleted_at IS NULL AND (source_uri = ANY(%s) OR source_uri LIKE ANY(%s))""",
        (collection_id, list(roots), [_like_prefix(r) for r in roots]),
    ).fetchall()
    below = tuple(u for u in seen if u.endswith("/"))  # folders that could not be listed: all kept
    gone = [doc_id for doc_id, uri in rows if uri not in seen and not uri.startswith(below)]
    if not gone:
        conn.commit()
        return 0, 0
    with conn.transaction():
        n_chunks = conn.execute(
            "SELECT count(*) FROM chunks WHERE document_id = ANY(%s)", (gone,)
        ).fetchone()[0]
        if dry_run:
            pass
        elif soft:
            conn.execute("UPDATE documents SET deleted_at = now() WHERE id = ANY(%s)", (gone,))
        else:
            conn.execute("DELETE FROM documents WHERE id = ANY(%s)", (gone,))
    return len(gone), n_chunks


def _like_prefix(root: str) -> str:
    esc = root.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return esc.rstrip("/") + "/%"
