"""The README runs as written: every shell, console, SQL and python block, in order, in a copy of examples/,
against a fresh database; a block that cannot run here says why in an HTML comment before its fence.

Flow-backed commands that take `--no-prefect` (ingest, eval) get it from the `chunkyard` on PATH here: a
temporary Prefect server per command would add 10-30 s to each block and test Prefect, not the README
(tests/test_flows.py runs the flows). Everything else runs as a user types it. docs/sql.md's blocks run too.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNS = {"bash", "sh", "console", "sql", "python"}
FENCE = re.compile(r"^```(?P<lang>[\w-]*)[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
NOT_RUN = re.compile(r"<!--\s*not run:(?P<reason>.*?)-->\s*\Z", re.S)
#: The commands given --no-prefect by the shim (see the module docstring).
NO_PREFECT = ("ingest", "eval")
#: A toml block whose first line is `# NAME.toml` is written to NAME.toml, so the blocks after it can use it.
FILE_HEADER = re.compile(r"\A#\s*(?P<name>[\w.-]+\.toml)\s*\n")

pytestmark = pytest.mark.slow


@dataclass(frozen=True)
class Block:
    lang: str
    body: str
    line: int
    reason: str | None  # why it is not run; None: it runs


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of a markdown file, each with the not-run reason written right before it."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        before = text[: m.start()].rstrip() + "\n"
        marker = NOT_RUN.search(before.rstrip())
        reason = marker.group("reason").strip() if marker else None
        out.append(Block(m.group("lang"), m.group("body"), text.count("\n", 0, m.start()) + 1, reason))
    return out


def test_every_block_that_is_not_run_says_why():
    found = blocks(ROOT / "README.md")
    for b in found:
        if b.reason is not None:
            assert b.reason, f"README.md:{b.line}: a `not run:` comment with no reason"
    ran = {b.lang for b in found if b.reason is None and b.lang in RUNS}
    assert {"bash", "sql", "python"} <= ran, f"the README should run shell, SQL and python blocks; runs {ran}"
    # a block in a language the test cannot run (toml, text, ini) is never marked as run here by mistake
    assert all(b.lang in RUNS | {"toml", "text", "ini", "json"} for b in found), [b.lang for b in found]


def environment(url: str, cwd: Path) -> dict:
    """A copy of examples/ in cwd, and an environment whose `chunkyard` is this tree's, on the test database."""
    shutil.copytree(ROOT / "examples", cwd / "examples")
    bin_dir = cwd / ".bin"
    bin_dir.mkdir()
    shim = bin_dir / "chunkyard"
    flags = " | ".join(NO_PREFECT)
    shim.write_text(
        "#!/bin/sh\n"
        f'case "$1" in {flags}) cmd="$1"; shift; set -- "$cmd" --no-prefect "$@";; esac\n'
        f'exec "{sys.executable}" -m pipeline.cli "$@"\n',
        encoding="utf-8",
    )
    shim.chmod(shim.stat().st_mode | stat.S_IXUSR)
    env = dict(
        os.environ,
        CHUNKYARD_DATABASE_URL=url,
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p),
        COLUMNS="120",
        HF_HUB_OFFLINE="1",
    )
    env.pop("PREFECT_API_URL", None)
    return env


def _shell(body: str, where: str, cwd: Path, env: dict) -> str:
    res = subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", body],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, (
        f"{where} exited {res.returncode}:\n{body}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"
    )
    return res.stdout + res.stderr


def _console(body: str, where: str, cwd: Path, env: dict) -> None:
    """`$ ` lines run in turn; every other line is output that must appear in what they printed."""
    printed, shown = "", []
    for line in body.splitlines():
        if line.startswith("$ "):
            printed += _shell(line[2:], where, cwd, env)
        elif line.strip():
            shown.append(line.strip())
    for line in shown:
        assert line in printed, f"{where}: the README shows {line!r}; the commands printed:\n{printed}"


def _sql(body: str, where: str, url: str, vector: str | None) -> None:
    """Each statement on its own, so a failure names it; `$1` is a stored chunk's vector (a query vector)."""
    statements = [s.strip() for s in re.split(r";\s*(?:--[^\n]*)?\n", body + "\n") if s.strip()]
    with psycopg.connect(url, autocommit=True) as conn:
        for stmt in statements:
            if not re.sub(r"--[^\n]*", "", stmt).strip():
                continue
            if "$1" in stmt:
                assert vector, f"{where}: `$1` needs a stored vector"
                stmt = stmt.replace("$1", f"'{vector}'::vector")
            try:
                conn.execute(stmt)  # no parameters: sent as written
            except psycopg.Error as exc:
                raise AssertionError(f"{where}: {exc}\n{stmt}") from exc


def _python(body: str, where: str, cwd: Path, env: dict) -> None:
    script = cwd / "readme_block.py"
    script.write_text(body, encoding="utf-8")
    res = subprocess.run(
        [sys.executable, script.name], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert res.returncode == 0, f"{where} failed:\n{body}\n--- stdout\n{res.stdout}\n--- stderr\n{res.stderr}"


def run_blocks(path: Path, url: str, cwd: Path, env: dict) -> int:
    """Run a markdown file's blocks in order; how many ran."""
    n = 0
    for b in blocks(path):
        where = f"{path.relative_to(ROOT)}:{b.line}"
        if b.lang == "toml" and (m := FILE_HEADER.match(b.body)):
            (cwd / m.group("name")).write_text(b.body, encoding="utf-8")
        if b.reason is not None or b.lang not in RUNS:
            continue
        n += 1
        if b.lang in ("bash", "sh"):
            _shell(b.body, where, cwd, env)
        elif b.lang == "console":
            _console(b.body, where, cwd, env)
        elif b.lang == "python":
            _python(b.body, where, cwd, env)
        else:
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT embedding::text FROM chunk_embeddings LIMIT 1").fetchone()
            _sql(b.body, where, url, row[0] if row else None)
    return n


def test_the_readme_and_the_sql_reference_run(database_url, tmp_path):
    """One ingest of examples/ (the README's quick start) serves both files: docs/sql.md runs after the README."""
    env = environment(database_url, tmp_path)
    assert run_blocks(ROOT / "README.md", database_url, tmp_path, env) >= 4
    with psycopg.connect(
        database_url
    ) as conn:  # the quick start stored the sample folder, the eval run is kept
        stored = conn.execute("SELECT count(*) FROM documents").fetchone()[0]
        assert stored == len(list((ROOT / "examples" / "docs").iterdir()))
        assert conn.execute("SELECT count(*) FROM eval_results").fetchone()[0] >= 1
    assert run_blocks(ROOT / "docs" / "sql.md", database_url, tmp_path, env) >= 3
