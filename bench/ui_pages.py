"""Render times of `chunkyard ui` pages on a large collection: 100k chunks in 1000 documents plus one 5 MB
document of 5000 chunks, written by SQL inserts (no embedding), in a throwaway embedded Postgres.

    python -m bench.ui_pages [--repeat 5]

Prints a table: page, HTTP status, median and max milliseconds (server side, through Starlette's TestClient).
The rows have no vectors: the document page's "re-chunked" mark (an index probe per chunk) finds none.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psycopg

from pipeline import db, store
from pipeline.config import Settings
from pipeline.ui import create_app

FILL = """
INSERT INTO documents (collection_id, source_uri, content_hash, text_hash, doc_type, chunk_key, mime,
                       normalized_text, last_run_id, metadata)
SELECT %(c)s, 'file:///bench/doc' || lpad(i::text, 5, '0') || '.txt', md5(i::text), md5(i::text), 'text', 'k',
       'text/plain', repeat(rpad('Chunk of document ' || i || ' about bees, queens and API keys', 199, ' .') || E'\\n', 100),
       %(r)s, '{"language": "en"}'
FROM generate_series(1, 1000) i;
INSERT INTO documents (collection_id, source_uri, content_hash, text_hash, doc_type, chunk_key, mime,
                       normalized_text, last_run_id)
VALUES (%(c)s, 'file:///bench/big-5mb.txt', 'big', 'big', 'text', 'k', 'text/plain',
        repeat(rpad('A long contract clause about liability, bees and keys', 999, ' .') || E'\\n', 5000), %(r)s);
INSERT INTO sections (document_id, ordinal, level, heading_path, content_hash, fingerprint, char_start, char_end)
SELECT d.id, s, 1, ARRAY['Part ' || s], md5(d.id || ':' || s), 'f', s * w, s * w + w - 1
FROM documents d
CROSS JOIN LATERAL (SELECT CASE WHEN d.source_uri LIKE '%%big-5mb%%' THEN 100000 ELSE 2000 END AS w,
                           CASE WHEN d.source_uri LIKE '%%big-5mb%%' THEN 49 ELSE 9 END AS last) x
CROSS JOIN LATERAL generate_series(0, x.last) s
WHERE d.collection_id = %(c)s;
INSERT INTO chunks (section_id, document_id, collection_id, ordinal, text, content_hash, embed_hash, char_start,
                    char_end, token_count)
SELECT s.id, s.document_id, %(c)s, j, substr(d.normalized_text, s.char_start + j * x.len + 1, x.len - 1),
       md5(s.id || ':' || j), md5(s.id || ':' || j), s.char_start + j * x.len, s.char_start + j * x.len + x.len - 1,
       x.len / 5
FROM sections s JOIN documents d ON d.id = s.document_id
CROSS JOIN LATERAL (SELECT CASE WHEN d.source_uri LIKE '%%big-5mb%%' THEN 1000 ELSE 200 END AS len) x
CROSS JOIN LATERAL generate_series(0, 9 + 90 * (x.len / 1000)) j
WHERE d.collection_id = %(c)s;
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cy-ui-bench-"))
    try:
        url = db.start_embedded(root / "pg")
        with db.connection(url) as conn:
            coll = store.ensure_collection(conn, "big", profile={}, model="bench", dim=4)
            run = store.start_run(conn, coll.id, kind="ingest", params={})
            t = time.perf_counter()
            with conn.transaction():
                for stmt in FILL.split(";\n"):
                    if stmt.strip():
                        conn.execute(stmt, {"c": coll.id, "r": run})
            store.finish_run(conn, run, status="completed", counts={"documents_new": 1001}, timings={})
            conn.execute("ANALYZE")
            n, big = conn.execute("SELECT count(*), max(document_id) FROM chunks").fetchone()
            size = conn.execute("SELECT length(normalized_text) FROM documents WHERE id = %s", (big,)).fetchone()[0]
            print(f"filled {n} chunks in {time.perf_counter() - t:.1f} s; the big document: {size:,} characters")
        from starlette.testclient import TestClient

        client = TestClient(create_app(url, settings=Settings(database_url=url)))
        pages = ["/", "/c/big", "/c/big?docs=15", f"/d/{big - 1}", f"/d/{big}", f"/d/{big}?page=9",
                 f"/d/{big}?at=4500000&hl=4500000-4500999", f"/r/{run}",
                 "/c/big/search?q=liability+contract&mode=fulltext&k=10"]  # fmt: skip
        print(f"{'page':58} status  median ms  max ms  bytes")
        for p in pages:
            times, status, size = [], 0, 0
            for _ in range(args.repeat):
                t = time.perf_counter()
                r = client.get(p)
                times.append((time.perf_counter() - t) * 1000)
                status, size = r.status_code, len(r.content)
            print(f"{p:58} {status:6}  {statistics.median(times):9.0f}  {max(times):6.0f}  {size:,}")
    finally:
        db.stop_embedded(root / "pg")
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    try:
        main()
    except psycopg.Error as e:
        sys.exit(f"bench failed: {e}")
