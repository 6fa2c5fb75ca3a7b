"""What every fault case shares: the results table, the CLI in a subprocess, table snapshots, the corpus."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT


@dataclass
class Result:
    group: str
    case: str
    ok: bool
    seconds: float
    detail: str = ""


@dataclass
class Bench:
    server: object
    tmp: Path
    results: list[Result] = field(default_factory=list)

    def url(self, db: str) -> str:
        return self.server.get_uri(db)  # type: ignore[attr-defined]

    def create_db(self, name: str, template: str | None = None) -> str:
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.server.get_uri(), autocommit=True) as c:  # type: ignore[attr-defined]
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            q = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
            if template:
                q = sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                    sql.Identifier(name), sql.Identifier(template)
                )
            c.execute(q)
        return self.url(name)

    def record(self, group: str, case: str, ok: bool, t0: float, detail: str = "") -> None:
        self.results.append(Result(group, case, ok, time.perf_counter() - t0, detail))
        mark = "ok  " if ok else "FAIL"
        print(f"  {mark} {group:10} {case:44} {time.perf_counter() - t0:6.1f}s {detail[:90]}", flush=True)


def cli(
    url: str, *args: str, timeout: float = 600, env: dict | None = None, prefix: list[str] | None = None
) -> subprocess.Popen:
    full = dict(os.environ, CHUNKYARD_DATABASE_URL=url, COLUMNS="200", **(env or {}))
    return subprocess.Popen(
        [*(prefix or []), sys.executable, "-m", "pipeline.cli", *args], stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True, env=full, cwd=ROOT,
    )  # fmt: skip


def run_cli(
    url: str, *args: str, timeout: float = 600, env: dict | None = None, prefix: list[str] | None = None
) -> tuple[int, str, str]:
    p = cli(url, *args, env=env, prefix=prefix)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return -999, out, err + f"\n(timed out after {timeout:.0f} s)"
    return p.returncode, out, err


# ------------------------------------------------------------------------------------ snapshots


def snapshot(url: str) -> dict:
    """The tables as sets of rows without ids: what must be equal after a fault and a rerun."""
    import psycopg

    with psycopg.connect(url) as c:
        docs = c.execute(
            "SELECT source_uri, content_hash, text_hash, doc_type, chunk_key, deleted_at IS NULL FROM documents"
        ).fetchall()
        secs = c.execute(
            """SELECT d.source_uri, s.ordinal, s.level, s.kind, s.heading_path, s.content_hash, s.fingerprint,
                      s.char_start, s.char_end, p.ordinal
               FROM sections s JOIN documents d ON d.id = s.document_id
               LEFT JOIN sections p ON p.id = s.parent_id"""
        ).fetchall()
        chunks = c.execute(
            """SELECT d.source_uri, s.ordinal, k.ordinal, k.char_start, k.char_end, k.text, k.context,
                      k.embed_hash, k.token_count,
                      EXISTS (SELECT 1 FROM chunk_embeddings e WHERE e.chunk_id = k.id)
               FROM chunks k JOIN documents d ON d.id = k.document_id JOIN sections s ON s.id = k.section_id"""
        ).fetchall()
        contract = c.execute(
            """SELECT count(*) FROM chunks k JOIN documents d ON d.id = k.document_id
               WHERE substr(d.normalized_text, k.char_start + 1, k.char_end - k.char_start) <> k.text"""
        ).fetchone()[0]
        orphans = c.execute(
            """SELECT (SELECT count(*) FROM chunks k WHERE NOT EXISTS (SELECT 1 FROM sections s WHERE s.id = k.section_id))
                    + (SELECT count(*) FROM embedding_cache e WHERE e.embedding IS NULL)"""
        ).fetchone()[0]
        cache_missing = c.execute(
            """SELECT count(*) FROM chunks k JOIN collections col ON col.id = k.collection_id
               WHERE NOT EXISTS (SELECT 1 FROM embedding_cache e WHERE e.text_hash = k.embed_hash)"""
        ).fetchone()[0]
    return {
        "documents": sorted(map(repr, docs)),
        "sections": sorted(map(repr, secs)),
        "chunks": sorted(map(repr, chunks)),
        "contract_violations": contract,
        "orphans": orphans,
        "cache_missing": cache_missing,
    }


def compare(got: dict, want: dict) -> str:
    """'' when equal, else what differs."""
    problems = []
    for key in ("documents", "sections", "chunks"):
        if got[key] != want[key]:
            extra, missing = set(got[key]) - set(want[key]), set(want[key]) - set(got[key])
            problems.append(f"{key}: +{len(extra)} -{len(missing)}")
    for key in ("contract_violations", "orphans", "cache_missing"):
        if got[key]:
            problems.append(f"{key}={got[key]}")
    return "; ".join(problems)


# --------------------------------------------------------------------------------------- corpus


def corpus_v1(d: Path) -> None:
    """A folder of a dozen documents of every text type."""
    d.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ROOT / "examples" / "docs", d, dirs_exist_ok=True)
    for i in range(8):
        body = "\n\n".join(f"## Part {j}\n\n" + " ".join([f"Paragraph {j} of note {i} about otters."] * 30)
                           for j in range(6))  # fmt: skip
        (d / f"note-{i}.md").write_text(f"# Note {i}\n\n{body}\n", encoding="utf-8")


def corpus_v2(d: Path) -> None:
    """v1 edited: two files changed, one deleted, one renamed, one added."""
    note1 = (d / "note-1.md").read_text(encoding="utf-8")
    (d / "note-1.md").write_text(
        note1.replace("## Part 3", "## Part 3\n\nAn inserted paragraph about herons.")
    )
    (d / "note-2.md").write_text(
        (d / "note-2.md").read_text(encoding="utf-8") + "\n## Part 9\n\nNew ending.\n"
    )
    (d / "note-3.md").unlink()
    (d / "note-4.md").rename(d / "renamed-4.md")
    (d / "added.md").write_text("# Added\n\nA brand new document about kingfishers.\n" * 3)
