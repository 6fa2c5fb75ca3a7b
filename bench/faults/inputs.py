"""Hostile input: bad files one line each, the per-file time bound, a code fence's linear time."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from bench.common import ROOT, shared_data
from bench.faults.harness import Bench, run_cli
from tests.make_files import page_count_pdf, with_forged_member  # the hostile files, built at run time

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01" + bytes(range(256)) * 4
#: The per-file time bound of the bad-input run (CHUNKYARD_FILE_TIMEOUT_S): every other case is well within.
#: The per-file bound of the run over a file that needs about a minute to parse and chunk (file_bound).
SLOW_TIMEOUT_S = 5
PROSE = (ROOT / "examples" / "docs" / "getting-started.md").read_text(encoding="utf-8")


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
