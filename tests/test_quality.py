"""Chunk quality per run: figures right on a hand-made collection, shifts flagged, the view and the CLI."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from pipeline import store
from pipeline.config import FixedConfig, Profile, Settings
from pipeline.ingest import run_ingest
from pipeline.store.quality import (
    HISTOGRAM_EDGES,
    MIN_CHUNKS,
    TINY_TOKENS,
    compare,
    histogram_distance,
    record_quality,
)
from tests.test_roles import as_role, login  # noqa: F401  (the fixture)

SHARED = "## Licence\n\nThis note may be copied freely, as long as the copy names where it came from.\n"


@pytest.fixture
def small(tmp_path) -> Path:
    """Two markdown files that end in the same section (one duplicate chunk text), and a tiny text file."""
    d = tmp_path / "small"
    d.mkdir()
    (d / "alpha.md").write_text(
        "# Alpha\n\nAlpha is the first letter of the Greek alphabet, and it names the brightest star of a "
        "constellation.\n\n" + SHARED
    )
    (d / "beta.md").write_text(
        "# Beta\n\nBeta is the second letter; in finance it measures how a stock moves with its market, "
        "and in software a release that is almost done.\n\n" + SHARED
    )
    (d / "tiny.txt").write_text("\n\nHello there.\n\n")
    return d


def _figures(conn, run_id: int) -> dict:
    return conn.execute("SELECT quality FROM runs WHERE id = %s", (run_id,)).fetchone()[0]


def test_figures_of_a_small_collection_match_its_rows(small, settings, conn):
    _, run_id, _ = run_ingest([small], settings=settings)
    q = _figures(conn, run_id)
    assert set(q) == {"all", "markdown", "text"}

    # the same figures, counted here from the rows by another route
    rows = conn.execute(
        """SELECT d.doc_type, k.token_count, k.content_hash FROM chunks k
           JOIN documents d ON d.id = k.document_id"""
    ).fetchall()
    hashes = [h for _, _, h in rows]
    for t in ("markdown", "text"):
        mine = [(n, h) for dt, n, h in rows if dt == t]
        f = q[t]
        assert f["chunks"] == len(mine)
        assert f["tiny"] == sum(n < TINY_TOKENS for n, _ in mine)
        assert f["duplicates"] == sum(hashes.count(h) > 1 for _, h in mine)
        assert f["tokens_max"] == max(n for n, _ in mine)
        assert f["budget"] == 144
        assert f["at_budget"] == sum(n >= 0.9 * 144 for n, _ in mine)
        assert sum(f["histogram"]) == f["chunks"]
        assert len(f["histogram"]) == len(HISTOGRAM_EDGES) + 1

    md, txt, al = q["markdown"], q["text"], q["all"]
    # the shared Licence section is one chunk in each markdown file: two copies of one text
    assert (md["duplicates"], md["duplicate_texts"]) == (2, 1)
    assert (txt["chunks"], txt["tiny"], txt["histogram"][0]) == (1, 1, 1)  # "Hello there." is 3 tokens
    assert (md["documents"], txt["documents"], al["documents"]) == (2, 1, 3)
    for key in ("chunks", "tiny", "duplicates", "at_budget", "sections", "text_chars", "uncovered_chars"):
        assert al[key] == md[key] + txt[key], key
    assert all(a == m + t for a, m, t in zip(al["histogram"], md["histogram"], txt["histogram"], strict=True))
    assert al["budget"] is None
    # every character outside the chunks is whitespace (the blank lines between sections, the text file's
    # leading and trailing newlines): nothing a reader could miss
    assert al["uncovered_text_chars"] == 0
    tiny_text = conn.execute("SELECT normalized_text FROM documents WHERE doc_type = 'text'").fetchone()[0]
    assert txt["text_chars"] == len(tiny_text)
    assert txt["uncovered_chars"] == len(tiny_text) - len("Hello there.")
    assert md["empty_sections"] == 0 and md["chunks_per_section_max"] >= 1

    # the view: one typed row per document type, shares derived from the counts
    view = conn.execute(
        """SELECT doc_type, chunks, duplicates, duplicate_share, tiny_share, uncovered_text_share,
                  previous_run_id, collection
           FROM chunkyard_run_quality WHERE run_id = %s ORDER BY doc_type""",
        (run_id,),
    ).fetchall()
    assert [r[0] for r in view] == ["all", "markdown", "text"]
    n_all = al["chunks"]
    assert view[0][1:3] == (n_all, 2)
    assert float(view[0][3]) == pytest.approx(2 / n_all, abs=1e-4)
    assert float(view[0][4]) == pytest.approx(1 / n_all, abs=1e-4)
    assert all(r[5] == 0 and r[6] is None and r[7] == "default" for r in view)


def test_text_that_no_chunk_covers_is_counted_and_flagged(small, settings, conn):
    _, run_id, _ = run_ingest([small], settings=settings)
    # a chunker that dropped text: here, one chunk row taken away
    text = conn.execute(
        """DELETE FROM chunks WHERE id = (SELECT k.id FROM chunks k JOIN documents d ON d.id = k.document_id
                                          WHERE d.source_uri LIKE '%%alpha.md' ORDER BY k.char_start LIMIT 1)
           RETURNING text"""
    ).fetchone()[0]
    coll_id = conn.execute("SELECT id FROM collections").fetchone()[0]
    q = record_quality(conn, run_id, coll_id)
    lost = len("".join(text.split()))
    assert q["markdown"]["uncovered_text_chars"] == q["all"]["uncovered_text_chars"] == lost > 0
    assert q["text"]["uncovered_text_chars"] == 0
    flagged = {(s.doc_type, s.figure) for s in compare(q, None)}
    assert flagged == {("markdown", "uncovered_text_share"), ("all", "uncovered_text_share")}


def _topics(folder: Path, n: int = 12) -> None:
    """A markdown file of n sections of about 60 tokens each: n chunks at the default budget."""
    words = [
        "river",
        "stone",
        "lantern",
        "harbour",
        "meadow",
        "copper",
        "violin",
        "orchard",
        "glacier",
        "compass",
        "falcon",
        "ember",
    ]
    parts = ["# Field notes\n"]
    for i in range(n):
        w = words[i % len(words)]
        parts.append(
            f"## Note {i} on the {w}\n\nThe {w} was recorded on day {i} of the survey. Observers wrote that the "
            f"{w} looked different in the morning light, and that its shape changed with the weather. A second "
            f"visit confirmed the first report, and the team agreed to return to the {w} in the spring.\n"
        )
    folder.mkdir(exist_ok=True)
    (folder / "notes.md").write_text("\n".join(parts))


@pytest.mark.subprocess
def test_a_profile_change_is_flagged_and_an_unchanged_run_is_not(tmp_path, settings, conn, database_url):
    src = tmp_path / "notes"
    _topics(src)
    _, first, _ = run_ingest([src], settings=settings)
    _, second, _ = run_ingest([src], settings=settings)  # nothing changed: no shift
    assert _figures(conn, second) == _figures(conn, first)
    [rep] = store.quality_report(conn)
    assert (rep["run_id"], rep["previous_run_id"]) == (second, first)
    assert rep["types"]["markdown"]["chunks"] >= MIN_CHUNKS
    assert rep["shifts"] == []

    small = Profile(
        markdown=FixedConfig(size=16)
    )  # windows of 16 tokens: nearly every chunk cut at the budget
    _, third, _ = run_ingest([src], settings=settings, profile=small)
    [rep] = store.quality_report(conn, "default")
    assert (rep["run_id"], rep["previous_run_id"]) == (third, second)
    flagged = {(s["doc_type"], s["figure"]) for s in rep["shifts"]}
    for t in ("markdown", "all"):
        assert {
            (t, "tokens_mean"),
            (t, "chunks_per_section_mean"),
            (t, "at_budget_share"),
            (t, "histogram"),
        } <= flagged
    md = rep["types"]["markdown"]
    assert md["budget"] == 16 and md["tokens_max"] <= 16
    assert rep["previous"]["markdown"]["budget"] == 144
    assert md["uncovered_text_chars"] == 0
    assert store.quality_report(conn, "no such collection") == []

    # the CLI shows the same, with the shifts named
    env = dict(os.environ, CHUNKYARD_DATABASE_URL=database_url, COLUMNS="80")
    res = subprocess.run(
        [sys.executable, "-m", "pipeline.cli", "status", "--quality"], capture_output=True, text=True, env=env,
        cwd=tmp_path, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    assert f"chunk quality · default · run {third} (ingest, completed) vs run {second}" in res.stdout
    assert "shift: markdown tokens mean:" in res.stdout
    assert "shift: markdown histogram:" in res.stdout
    assert "uncovered text" in res.stdout and "chunks per token bucket" in res.stdout


def test_a_run_that_changed_nothing_carries_the_figures_over(small, settings, conn):
    _, first, _ = run_ingest([small], settings=settings)
    # changed behind the pipeline's back (no run sees it): a run that changes nothing does not measure again
    conn.execute("DELETE FROM chunks WHERE id = (SELECT min(id) FROM chunks)")
    _, second, _ = run_ingest([small], settings=settings)
    assert _figures(conn, second) == _figures(conn, first)
    # a run after one without figures (crashed) measures, and so does one that changes a file
    conn.execute("UPDATE runs SET quality = NULL WHERE id = %s", (second,))
    _, third, _ = run_ingest([small], settings=settings)
    assert _figures(conn, third)["all"]["uncovered_text_chars"] > 0
    (small / "gamma.md").write_text("# Gamma\n\nThe third letter.\n")
    _, fourth, _ = run_ingest([small], settings=settings)
    q = _figures(conn, fourth)
    assert (
        q["all"]["documents"] == 4
        and q["all"]["uncovered_text_chars"] == _figures(conn, third)["all"]["uncovered_text_chars"]
    )


def test_histogram_distance():
    assert histogram_distance([4, 0], [4, 0]) == 0
    assert histogram_distance([4, 0], [0, 9]) == 1
    assert histogram_distance([2, 2], [4, 0]) == 0.5
    assert histogram_distance([], [1]) == 0


def test_a_failed_measurement_never_fails_the_run(small, settings, conn, monkeypatch, caplog):
    def broken(*a, **k):
        raise psycopg.errors.DivisionByZero("division by zero")

    monkeypatch.setattr(store, "record_quality", broken)
    with caplog.at_level(logging.WARNING, logger="pipeline.run"):
        stats, run_id, status = run_ingest([small], settings=settings)
    assert str(status) == "completed" and not stats.errors
    assert _figures(conn, run_id) is None
    assert "chunk quality not recorded" in caplog.text


def test_a_reader_sees_the_figures_of_its_collections_only(tmp_path, settings, conn, database_url, login):  # noqa: F811
    for name in ("a", "b"):
        d = tmp_path / name
        d.mkdir()
        (d / f"{name}.md").write_text(f"# {name}\n\nA short note about the letter {name}.\n")
        run_ingest([d], settings=settings, collection=name)
    tenant = login("chunkyard_reader")
    conn.execute("SELECT chunkyard_grant('a', %s)", (tenant,))
    # the pipeline as chunkyard_writer measures and records its run
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    d = conninfo_to_dict(database_url)
    d["user"] = login("chunkyard_writer")
    (tmp_path / "a" / "more.md").write_text("# More\n\nAnother note about the letter a.\n")
    _, run_id, _ = run_ingest(
        [tmp_path / "a"], settings=Settings(database_url=make_conninfo(**d)), collection="a"
    )
    assert _figures(conn, run_id)["all"]["documents"] == 2
    conn.execute("SELECT chunkyard_enable_rls()")
    with as_role(database_url, tenant) as c:
        seen = {r[0] for r in c.execute("SELECT DISTINCT collection FROM chunkyard_run_quality")}
    assert seen == {"a"}
    all_rows = {r[0] for r in conn.execute("SELECT DISTINCT collection FROM chunkyard_run_quality")}
    assert all_rows == {"a", "b"}
