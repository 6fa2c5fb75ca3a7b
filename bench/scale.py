"""Search latency and write throughput at scale: N chunks of real sentences with random unit vectors.

    python -m bench.scale --chunks 100000 --queries 100 --json bench/results/scale-100k.json
    python -m bench.scale --chunks 1000000 --queries 100 --json bench/results/scale-1m.json --baseline bench/results/scale-100k.json

Each N gets its own database (`chunkyard_scale_<N>`) on the server of --url (default: an embedded server in
--pgdata), built once through the bulk path (`store.write_documents`, indexes built after the load) and
reused by later runs. Chunks are 6 sentences drawn from Chroma's corpora, 10 per document, 2 per section;
no model is loaded. Queries are Chroma's questions (full text) and fixed random unit vectors. Timings go
through psycopg with server-side prepared statements (prepare_threshold=0), the way an application calls
the search functions; p50/p95 are over the queries of a second, warm pass. Never part of the test suite.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import re
import sys
import time
from pathlib import Path

import numpy as np
import psycopg
from psycopg import sql

from bench.common import chroma_dir
from pipeline import db, store
from pipeline.model import Chunk, Document, Section, SectionPlan, embed_hash, sha256

CHROMA = chroma_dir()
MODEL = "bench/random-unit-384"
DIM = 384
CHUNKS_PER_DOC, CHUNKS_PER_SECTION, SENTENCES_PER_CHUNK = 10, 2, 6
DOCS_PER_TXN = 200


def sentences() -> list[str]:
    """The sentences of Chroma's corpora (5 to 60 words each)."""
    out: list[str] = []
    for path in sorted((CHROMA / "corpora").glob("*.md")):
        text = re.sub(r"\s+", " ", path.read_text(encoding="utf-8"))
        out += [s for s in re.split(r"(?<=[.!?])\s+", text) if 5 <= len(s.split()) <= 60]
    return out


def make_docs(rng: np.random.Generator, pool: list[str], n_docs: int, prefix: str) -> tuple[list, dict]:
    """Synthetic documents (one section per 2 chunks) with their chunks and random unit vectors."""
    docs, vectors = [], {}
    for j in range(n_docs):
        parts = [" ".join(pool[i] for i in rng.integers(0, len(pool), SENTENCES_PER_CHUNK))
                 for _ in range(CHUNKS_PER_DOC)]  # fmt: skip
        text, spans, pos = "\n\n".join(parts), [], 0
        for p in parts:
            spans.append((pos, pos + len(p)))
            pos += len(p) + 2
        sections, chunks = [], {}
        for s in range(0, CHUNKS_PER_DOC, CHUNKS_PER_SECTION):
            group = spans[s : s + CHUNKS_PER_SECTION]
            chunks[len(sections)] = [Chunk(a, b, text[a:b], len(text[a:b].split())) for a, b in group]
            sections.append(Section(group[0][0], group[-1][1]))
        doc = Document(uri=f"bench://{prefix}/{j}", doc_type="text", text=text, sections=sections,
                       raw_hash=sha256(text))  # fmt: skip
        v = rng.standard_normal((CHUNKS_PER_DOC, DIM), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        for k, ch in enumerate(c for cs in chunks.values() for c in cs):
            vectors[embed_hash(ch.embed_text)] = v[k]
        docs.append(
            store.NewDocument(doc, "bench", [sha256(f"{j}:{i}") for i in range(len(sections))], chunks)
        )
    return docs, vectors


def build(conn: psycopg.Connection, n_chunks: int, pool: list[str]) -> dict:
    """Bulk-load the collection: indexes dropped, documents written in big transactions, indexes built."""
    coll = store.ensure_collection(conn, "scale", profile={"bench": True}, model=MODEL, dim=DIM)
    rng = np.random.default_rng(12)
    n_docs = n_chunks // CHUNKS_PER_DOC
    store.drop_search_indexes(conn, coll.vectors.id)
    gen = load = 0.0
    for start in range(0, n_docs, DOCS_PER_TXN):
        t0 = time.perf_counter()
        docs, vectors = make_docs(rng, pool, min(DOCS_PER_TXN, n_docs - start), f"d{start}")
        t1 = time.perf_counter()
        store.write_documents(
            conn, collection_id=coll.id, docs=docs, vectors=vectors, set_id=coll.vectors.id, run_id=None
        )
        load += time.perf_counter() - t1
        gen += t1 - t0
        if start // DOCS_PER_TXN % 50 == 0:
            print(f"  {start * CHUNKS_PER_DOC:>9} chunks  {start * CHUNKS_PER_DOC / max(load, 1e-9):,.0f} rows/s",
                  file=sys.stderr)  # fmt: skip
    t0 = time.perf_counter()
    built = store.ensure_search_indexes(conn, [coll.vectors.id], maintenance_work_mem="4GB")
    t_index = time.perf_counter() - t0
    t0 = time.perf_counter()
    store.refresh_fts_stats(conn, coll.id, [coll.vectors.id])
    t_fts = time.perf_counter() - t0
    conn.execute("VACUUM ANALYZE chunks")
    conn.execute(f"VACUUM ANALYZE chunk_vectors_{coll.vectors.id}")
    conn.execute("VACUUM ANALYZE documents")
    conn.execute("VACUUM ANALYZE sections")
    return {"bulk_load_s": round(load, 2), "generate_s": round(gen, 2), "index_build_s": round(t_index, 2),
            "indexes_built": built, "fts_stats_s": round(t_fts, 2),
            "bulk_rows_per_s": round(n_chunks / load), "bulk_rows_per_s_with_indexes":
            round(n_chunks / (load + t_index + t_fts))}  # fmt: skip


def incremental(conn: psycopg.Connection, pool: list[str], n_docs: int = 100) -> float:
    """Rows/s of the per-document path (one transaction each) into the indexed table, then rolled away."""
    coll = store.ensure_collection(conn, "scale_incremental", profile={"bench": True}, model=MODEL, dim=DIM)
    docs, vectors = make_docs(np.random.default_rng(99), pool, n_docs, "inc")
    t0 = time.perf_counter()
    for d in docs:
        plan = SectionPlan(new=list(range(len(d.doc.sections))))
        store.write_document(conn, collection_id=coll.id, doc=d.doc, chunk_key=d.chunk_key,
                             fingerprints=d.fingerprints, plan=plan, new_chunks=d.chunks, vectors=vectors,
                             set_id=coll.vectors.id, run_id=None)  # fmt: skip
    took = time.perf_counter() - t0
    store.drop_collection(conn, "scale_incremental")
    return n_docs * CHUNKS_PER_DOC / took


def queries(n: int) -> tuple[list[str], np.ndarray]:
    """The first n of Chroma's questions, and n fixed random unit vectors."""
    with open(CHROMA / "questions_df.csv", newline="", encoding="utf-8") as f:
        texts = [r["question"] for r in csv.DictReader(f)][:n]
    v = np.random.default_rng(7).standard_normal((len(texts), DIM), dtype=np.float32)
    return texts, v / np.linalg.norm(v, axis=1, keepdims=True)


def latencies(
    url: str, texts: list[str], vecs: np.ndarray, k: int, filters: dict | None = None, label: str = ""
) -> dict[str, list[float]]:
    """Milliseconds per query and mode, warm (second pass), through server-side prepared statements; with
    `filters` (store.search_filter), every search is filtered and must still return k rows."""
    out: dict[str, list[float]] = {}
    with db.connection(url) as conn:
        conn.prepare_threshold = 0
        for mode in ("vector", "fulltext", "hybrid"):
            short = 0
            for _rep in range(2):
                times = []
                for text, vec in zip(texts, vecs, strict=True):
                    t0 = time.perf_counter()
                    hits = store.search(conn, "scale", vec, k=k, query_text=text, mode=mode, filters=filters,
                                        whole_sections=None if filters else store.WHOLE_SECTION_SHARE)  # fmt: skip
                    times.append((time.perf_counter() - t0) * 1000)
                    short += mode == "vector" and len(hits) < k
                out[mode + label] = times
            note = f", {short} vector searches short of k" if filters else ""
            print(f"  {mode}{label}: p50 {np.percentile(times, 50):.1f} ms, p95 {np.percentile(times, 95):.1f} ms"
                  f"{note}", file=sys.stderr)  # fmt: skip
    return out


def share_filter(url: str, share: float) -> dict:
    """A filter admitting about `share` of the collection: every (1 / share)-th document, spread over the
    whole of it (so an index scan meets them everywhere)."""
    step = max(1, round(1 / share))
    with db.connection(url) as conn:
        ids = [r[0] for r in conn.execute(
            "SELECT id FROM documents d WHERE d.collection_id = (SELECT id FROM collections WHERE name = 'scale') "
            "ORDER BY id").fetchall()][::step]  # fmt: skip
        conn.commit()
    return store.search_filter(documents=ids) or {}


def exactness(url: str, texts: list[str], k: int) -> dict[str, float]:
    """How many of exact BM25's top k (every match scored) the bounded candidate set finds, on average."""
    out: dict[str, list[float]] = {"recall_at_k": [], "exact_ms": []}
    with db.connection(url) as conn:
        for text in texts:
            sql_ = "SELECT chunk_id FROM chunkyard_fulltext_search('scale', %s, %s, p_max_candidates => %s)"
            bounded = {r[0] for r in conn.execute(sql_, (text, k, 1000)).fetchall()}
            t0 = time.perf_counter()
            exact = {r[0] for r in conn.execute(sql_, (text, k, 2**31 - 1)).fetchall()}
            out["exact_ms"].append((time.perf_counter() - t0) * 1000)
            if exact:
                out["recall_at_k"].append(len(bounded & exact) / len(exact))
        conn.commit()
    return {"k": k, "recall_at_k": round(float(np.mean(out["recall_at_k"])), 3),
            "exact_p50_ms": round(float(np.percentile(out["exact_ms"], 50)), 1)}  # fmt: skip


def sizes(conn: psycopg.Connection) -> dict[str, float]:
    """MB of each table (heap + TOAST) and index the search and writes touch."""
    rows = conn.execute(
        """SELECT c.relname, pg_relation_size(c.oid) + coalesce(pg_total_relation_size(NULLIF(c.reltoastrelid, 0)), 0)
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
           WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'i')
             AND c.relname ~ '^(chunks|chunk_vectors|documents|sections|embedding_cache|fts_)'"""
    ).fetchall()
    conn.commit()
    return {name: round(b / 2**20, 1) for name, b in sorted(rows) if b > 0}


def tsvector_cost(conn: psycopg.Connection, sample: int = 20_000) -> dict[str, float]:
    """What the full-text vector alone costs a write: `to_tsvector('english')` (the generated `chunks.tsv`)
    recomputed over a sample of the stored chunks in one backend, ms a row, and the rows/s one core could
    write if it did nothing else (the ceiling of a writer per core: >90% of a chunk row's insert here)."""
    conn.execute("SET max_parallel_workers_per_gather = 0")
    t0 = time.perf_counter()
    n = conn.execute(
        "SELECT count(to_tsvector('english', text)) FROM (SELECT text FROM chunks LIMIT %s) s", (sample,)
    ).fetchone()[0]
    took = time.perf_counter() - t0
    conn.execute("RESET max_parallel_workers_per_gather")
    conn.commit()
    return {"ms_per_row": round(1000 * took / max(n, 1), 3), "rows_per_s_per_core": round(n / took)}


def database(admin: str, name: str) -> str:
    """URL of the per-N database, created and migrated if missing."""
    with psycopg.connect(admin, autocommit=True) as c:
        if not c.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    return make_conninfo(**(conninfo_to_dict(admin) | {"dbname": name}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--chunks", type=int, required=True)
    ap.add_argument("--queries", type=int, default=100)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--baseline", type=Path, help="an earlier --json result: print the growth from it")
    ap.add_argument("-k", type=int, default=5)
    ap.add_argument("--url", help="admin URL of a Postgres with pgvector (default: embedded in --pgdata)")
    ap.add_argument("--pgdata", type=Path, default=Path("/tmp/chunkyard-scale/pg"))
    ap.add_argument("--rebuild", action="store_true", help="drop the N-chunk database and build it again")
    ap.add_argument("--exactness", action="store_true", help="compare full text with exact BM25 (slow)")
    ap.add_argument("--filter-share", type=float, metavar="SHARE",
                    help="also time every search filtered to this share of the documents (e.g. 0.01)")  # fmt: skip
    args = ap.parse_args()
    if args.queries < 50:
        ap.error("--queries: at least 50")
    admin = args.url or db.start_embedded(args.pgdata, keep_running=True)
    name = f"chunkyard_scale_{args.chunks}"
    if args.rebuild:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    url = database(admin, name)
    pool = sentences()
    result: dict = {"chunks": args.chunks}
    with db.connection(url) as conn:
        have = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        conn.commit()
        if have != args.chunks:
            if have:
                sys.exit(f"{name} holds {have} chunks, not {args.chunks}: use --rebuild")
            print(f"building {args.chunks:,} chunks in {name}", file=sys.stderr)
            build_stats = build(conn, args.chunks, pool)
            (args.pgdata.parent / f"{name}.build.json").write_text(json.dumps(build_stats))
        else:
            path = args.pgdata.parent / f"{name}.build.json"
            build_stats = json.loads(path.read_text()) if path.exists() else {}
        result |= build_stats
        print("incremental writes", file=sys.stderr)
        result["incremental_rows_per_s"] = round(incremental(conn, pool))
        result["sizes_mb"] = sizes(conn)
        result["tsvector"] = tsvector_cost(conn)
    texts, vecs = queries(args.queries)
    lat = latencies(url, texts, vecs, args.k)
    if args.filter_share:
        label = f" {args.filter_share:.0%} filter"
        lat |= latencies(url, texts, vecs, args.k, share_filter(url, args.filter_share), label)
    result["queries"] = len(texts)
    result["p50_ms"] = {m: round(float(np.percentile(t, 50)), 1) for m, t in lat.items()}
    result["p95_ms"] = {m: round(float(np.percentile(t, 95)), 1) for m, t in lat.items()}
    result["write_rows_per_s"] = result.get("bulk_rows_per_s")
    if args.exactness:
        result["fulltext_vs_exact_bm25"] = exactness(url, texts, 50)
        print(f"full text vs exact BM25: {result['fulltext_vs_exact_bm25']}", file=sys.stderr)
    report(result, json.loads(args.baseline.read_text()) if args.baseline else None)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")


def report(r: dict, base: dict | None) -> None:
    """A markdown table of this size, and the growth exponent from the baseline's size (t ~ N^e)."""
    print(f"| {r['chunks']:,} chunks | p50 ms | p95 ms |" + (" growth of p95 (exponent) |" if base else ""))
    print("| --- | ---: | ---: |" + (" ---: |" if base else ""))
    for m in r["p95_ms"]:
        line = f"| {m} | {r['p50_ms'][m]} | {r['p95_ms'][m]} |"
        if base:
            ratio = r["p95_ms"][m] / base["p95_ms"][m]
            line += f" x{ratio:.2f} ({math.log(ratio) / math.log(r['chunks'] / base['chunks']):.2f}) |"
        print(line)
    print(f"bulk writes {r.get('bulk_rows_per_s')} rows/s (load), {r.get('bulk_rows_per_s_with_indexes')} rows/s "
          f"with index builds ({r.get('index_build_s')} s); incremental {r['incremental_rows_per_s']} rows/s")  # fmt: skip
    tsv = r.get("tsvector")
    if tsv:
        print(f"to_tsvector('english') alone: {tsv['ms_per_row']} ms a row, at most {tsv['rows_per_s_per_core']:,} "
              "rows/s per core writing")
    print("sizes (MB): " + ", ".join(f"{k} {v}" for k, v in r["sizes_mb"].items()))


if __name__ == "__main__":
    main()
