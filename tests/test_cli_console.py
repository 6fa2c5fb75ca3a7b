"""The CLI's tables at 80 columns and in a pipe (issue 26): nothing cut to an ellipsis, no key without its
value, file names whole, and the summary's stage times labelled as summed over parallel tasks."""

from __future__ import annotations

import os
import subprocess
import sys

from pipeline.ingest import run_ingest


def _cli(*args: str, url: str, cwd) -> str:
    """The CLI's stdout through a pipe, as `chunkyard ... | less` sees it, at 80 columns."""
    env = {**os.environ, "CHUNKYARD_DATABASE_URL": url, "COLUMNS": "80"}
    res = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args], capture_output=True, text=True, env=env, cwd=cwd,
        timeout=600,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert max(len(ln) for ln in res.stdout.splitlines() if "│" in ln or "┃" in ln) <= 80
    assert "…" not in res.stdout, res.stdout
    return res.stdout


def test_status_shows_every_key_with_its_value_at_80_columns(docs, database_url, tmp_path):
    run_ingest([str(docs)], collection="a-collection-with-a-long-name")
    text = _cli("status", url=database_url, cwd=tmp_path)
    for key in ("documents_seen=4", "documents_new=4", "chunks_written=", "sections_rechunked="):
        assert key in text, text
    assert "markdown=markdown/" in text and "code=code/" in text, text


def test_the_dry_run_plan_keeps_file_names_whole_and_the_summary_says_task_seconds(docs, database_url):
    long = docs / "a-rather-long-file-name-that-no-table-column-of-eighty-fits.md"
    long.write_text("# Long\n\nA file with a long name.\n")
    text = _cli("ingest", str(docs), "--dry-run", "--no-prefect", url=database_url, cwd=docs.parent)
    cells = "".join(ln.split("│")[1].strip() for ln in text.splitlines() if ln.startswith("│"))
    for name in ("getting-started.md", "operations.html", long.name):
        assert name in cells, text
    assert "task-seconds" in text, text
