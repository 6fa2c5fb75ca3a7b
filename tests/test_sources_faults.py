"""How files are found and read, under faults and races: nothing stored is lost, nothing outside is read."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pipeline.errors import InputError
from pipeline.ingest import run_ingest, run_prune, run_reindex
from pipeline.model import RunStatus
from pipeline.normalize import decode, normalize
from pipeline.run import Run
from pipeline.sources import SourceFile, source_uri, uri_path

SECRET = "# Secret\n\nThe launch code is swordfish.\n"


def _chunks_of(conn, name: str) -> int:
    return conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.source_uri LIKE %s",
        ("%/" + name,),
    ).fetchone()[0]


def _stored(conn) -> set[str]:
    return {r[0].rsplit("/", 1)[-1] for r in conn.execute("SELECT source_uri FROM documents")}


def swap_before_reading(monkeypatch, swap: Callable[[], None]) -> None:
    """Runs `swap` after discovery, just before the run's one read of each file (resume reads the stored
    ones, the batches the new ones): a file changed in between."""
    real = Run.resume

    def resume(self, files):
        swap()
        return real(self, files)

    monkeypatch.setattr(Run, "resume", resume)


# ------------------------------------------------------------------- defect 5: a folder that cannot be listed


@contextmanager
def _without_read_override(database_url: str) -> Iterator[tuple[list[str], str]]:
    """(command prefix, database URL) under which root no longer reads past permissions, so a chmod 000
    folder really cannot be listed: setpriv drops the two capabilities; the server's socket, in a folder
    only its owner may enter, is reached through a hard link in an open folder."""
    if os.geteuid() != 0:
        yield [], database_url
        return
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    info = conninfo_to_dict(database_url)
    sock = Path(str(info.get("host", ""))) / f".s.PGSQL.{info.get('port') or 5432}"
    if shutil.which("setpriv") is None or not sock.is_socket():
        pytest.skip("root lists a chmod 000 folder anyway, and setpriv or a socket is missing to stop that")
    caps = "-dac_override,-dac_read_search"
    with tempfile.TemporaryDirectory(prefix="cy-sock-") as tmp:
        os.link(sock, Path(tmp) / sock.name)
        yield (
            ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"],
            make_conninfo(**(info | {"host": tmp})),
        )


@pytest.mark.subprocess
def test_a_folder_that_cannot_be_listed_keeps_its_stored_documents(tmp_path, settings, database_url, conn):
    d = tmp_path / "src"
    (d / "sub").mkdir(parents=True)
    (d / "top.md").write_text("# Top\n\nPelicans.\n")
    (d / "sub" / "inner.md").write_text("# Inner\n\nWalruses on the ice.\n")
    run_ingest([d], settings=settings)
    (d / "sub").chmod(0)
    try:
        with _without_read_override(database_url) as (prefix, url):
            res = subprocess.run(
                [*prefix, sys.executable, "-m", "pipeline.cli", "ingest", str(d), "--no-prefect"],
                capture_output=True, text=True, timeout=600, env=dict(os.environ, CHUNKYARD_DATABASE_URL=url),
            )  # fmt: skip
    finally:
        (d / "sub").chmod(0o755)
    assert res.returncode == 1, res.stderr
    assert "src/sub: cannot list directory (Permission denied)" in res.stderr
    assert "Traceback" not in res.stderr
    assert _chunks_of(conn, "sub/inner.md") == 1
    assert conn.execute("SELECT counts->>'documents_deleted' FROM runs ORDER BY id DESC").fetchone()[0] == "0"


def test_a_folder_whose_path_is_too_long_to_list_keeps_its_stored_documents(tmp_path, settings, conn):
    """A listing that really fails, for root too: the folder's path is over PATH_MAX (ENAMETOOLONG) when
    the run is given the same folder spelled with `pad/..` steps; its stored documents must stay."""
    d = tmp_path / "src"
    sub = d / ("s" * 200)
    sub.mkdir(parents=True)
    (d / "pad").mkdir()
    (d / "top.md").write_text("# Top\n\nPelicans.\n")
    (sub / "inner.md").write_text("# Inner\n\nWalruses on the ice.\n")
    run_ingest([d], settings=settings)
    assert _chunks_of(conn, "inner.md") == 1
    long = str(d) + "/pad/.." * ((3990 - len(str(d))) // 7)  # the folder itself: under 4096 bytes
    assert len(long) < 4000 and len(long + "/" + sub.name) > 4096
    (d / "top.md").write_text("# Top\n\nPelicans and herons.\n")  # an edit still gets in
    stats, _, status = run_ingest([long], settings=settings)
    assert status is RunStatus.FAILED
    [err] = stats.errors
    assert err.uri == source_uri(sub) and "cannot list directory (File name too long)" in err.message
    assert _chunks_of(conn, "inner.md") == 1 and stats.counts["documents_deleted"] == 0
    assert stats.counts["documents_changed"] == 1
    # once it can be listed again, a file really gone from it is pruned as before
    (sub / "inner.md").unlink()
    stats, _, status = run_ingest([d], settings=settings)
    assert status is RunStatus.COMPLETED and _chunks_of(conn, "inner.md") == 0


# ---------------------------------------------------------------------------- defect 6: a symlink loop


def test_a_symlink_loop_is_one_error_and_the_run_goes_on(tmp_path, settings, conn):
    d = tmp_path / "src"
    d.mkdir()
    (d / "good.md").write_text("# Good\n\nPelicans.\n")
    run_ingest([d], settings=settings)
    (d / "good.md").write_text("# Good\n\nPelicans and their pouches.\n")
    (d / "new.md").write_text("# New\n\nHerons.\n")
    (d / "x.md").symlink_to("x.md")
    (d / "a.md").symlink_to("b.md")
    (d / "b.md").symlink_to("a.md")
    stats, _, status = run_ingest([d], settings=settings)
    assert status is RunStatus.FAILED
    assert sorted((e.uri.rsplit("/", 1)[-1], e.stage) for e in stats.errors) == [
        ("a.md", "load"), ("b.md", "load"), ("x.md", "load")
    ]  # fmt: skip
    assert all("symlink loop" in e.message for e in stats.errors)
    assert _stored(conn) == {"good.md", "new.md"}
    assert conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%pouches%'").fetchone()[0] == 1


# ------------------------------------------------------- defect 7: a link swapped in after discovery


def _swap_for_link(path: Path, target: Path) -> Callable[[], None]:
    def swap() -> None:
        path.unlink()
        path.symlink_to(target)

    return swap


@pytest.fixture
def src_and_secret(tmp_path) -> tuple[Path, Path]:
    """A folder to ingest, and a secret file in a folder beside it (outside it)."""
    d, outside = tmp_path / "src", tmp_path / "outside"
    d.mkdir()
    outside.mkdir()
    (outside / "secret.md").write_text(SECRET)
    return d, outside / "secret.md"


def test_a_file_swapped_for_an_outside_link_after_discovery_is_not_read(
    src_and_secret, settings, conn, monkeypatch
):
    d, secret = src_and_secret
    (d / "good.md").write_text("# Good\n\nPelicans.\n")
    (d / "note.md").write_text("# Note\n\nHerons.\n")
    swap_before_reading(monkeypatch, _swap_for_link(d / "note.md", secret))
    stats, _, status = run_ingest([d], settings=settings)
    assert status is RunStatus.COMPLETED
    assert conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%swordfish%'").fetchone()[0] == 0
    assert _stored(conn) == {"good.md"}
    assert [(u.rsplit("/", 1)[-1], "outside the folder" in w) for u, w in stats.skipped] == [
        ("note.md", True)
    ]


def test_a_stored_file_swapped_for_an_outside_link_mid_run_loses_its_rows(
    src_and_secret, settings, conn, monkeypatch
):
    d, secret = src_and_secret
    (d / "note.md").write_text("# Note\n\nHerons.\n")
    run_ingest([d], settings=settings)
    (d / "note.md").write_text("# Note\n\nHerons, edited.\n")  # changed: its one read is resume's
    swap_before_reading(monkeypatch, _swap_for_link(d / "note.md", secret))
    stats, _, status = run_ingest([d], settings=settings)
    assert status is RunStatus.COMPLETED
    assert conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%swordfish%'").fetchone()[0] == 0
    assert _stored(conn) == set() and stats.counts["documents_deleted"] == 1


def test_a_folder_on_the_way_swapped_for_an_outside_link_is_not_read(tmp_path, settings, conn, monkeypatch):
    d, outside = tmp_path / "src", tmp_path / "outside"
    (d / "sub").mkdir(parents=True)
    (outside / "sub").mkdir(parents=True)
    (outside / "sub" / "note.md").write_text(SECRET)
    (d / "sub" / "note.md").write_text("# Note\n\nHerons.\n")

    def swap() -> None:
        (d / "sub" / "note.md").unlink()
        (d / "sub").rmdir()
        (d / "sub").symlink_to(outside / "sub", target_is_directory=True)

    swap_before_reading(monkeypatch, swap)
    stats, _, _ = run_ingest([d], settings=settings)
    assert conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%swordfish%'").fetchone()[0] == 0
    assert [u.rsplit("/", 1)[-1] for u, w in stats.skipped if "outside the folder" in w] == ["note.md"]


def test_a_later_run_removes_the_rows_of_a_file_that_became_an_outside_link(src_and_secret, settings, conn):
    d, secret = src_and_secret
    (d / "note.md").write_text("# Note\n\nHerons.\n")
    (d / "keep.md").write_text("# Keep\n\nPelicans.\n")
    run_ingest([d], settings=settings)
    _swap_for_link(d / "note.md", secret)()
    stats, _, status = run_ingest([d], settings=settings)
    assert status is RunStatus.COMPLETED
    assert _stored(conn) == {"keep.md"} and stats.counts["documents_deleted"] == 1


# --------------------------------------------------------------------- defect 8: names that are not UTF-8


def test_a_file_name_that_is_not_utf8_round_trips_through_its_uri(tmp_path, settings, conn):
    d = tmp_path / "src"
    d.mkdir()
    names = [b"caf\xe9-\xff\xfe.md", b"mod\xe9le.py"]
    for raw in names:
        with open(os.path.join(os.fsencode(d), raw), "wb") as f:
            f.write(
                b"# Title\n\nText about otters.\n" if raw.endswith(b".md") else b"def f():\n    return 1\n"
            )
    stats, _, status = run_ingest([d], settings=settings, collection="bytes")
    assert status is RunStatus.COMPLETED, stats.errors
    uris = sorted(r[0] for r in conn.execute("SELECT source_uri FROM documents"))
    assert [u.rsplit("/", 1)[-1] for u in uris] == ["caf%E9-%FF%FE.md", "mod%E9le.py"]
    assert sorted(os.fsencode(uri_path(u).name) for u in uris) == sorted(names)
    stats, _, status = run_prune("bytes", settings=settings)
    assert status is RunStatus.COMPLETED and stats.counts["documents_deleted"] == 0
    assert len(_stored(conn)) == 2
    stats, _, status = run_reindex("bytes", settings=settings)
    assert status is RunStatus.COMPLETED and not stats.errors
    assert stats.counts["documents_unchanged"] == 2


# ------------------------------------------------------------------------------- weak cases


@pytest.mark.parametrize("enc", ["utf-16-le", "utf-16-be"])
def test_utf16_without_a_bom_is_read_as_text(enc):
    text = "Hello from UTF-16 without a mark, naïve café.\nSecond line.\n"
    got, warnings = decode(text.encode(enc), "file:///x.txt")
    assert got == text and enc.upper() in warnings[0]


@pytest.mark.parametrize(
    "data",
    [
        b"hello\x00world" * 100,
        b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01" + bytes(range(256)) * 4,
        b"\x01\x00\x02\x00\x03\x00\x04\x00" * 200,  # the NUL pattern, but control codes, not text
    ],
)
def test_binary_is_still_refused(data):
    with pytest.raises(InputError, match="binary"):
        decode(data, "file:///x.txt")


def test_utf16_without_a_bom_is_ingested(tmp_path, settings, conn):
    (tmp_path / "u16.txt").write_bytes("Pelicans glide over the bay in UTF-16.".encode("utf-16-le"))
    stats, _, status = run_ingest([tmp_path], settings=settings)
    assert status is RunStatus.COMPLETED
    assert conn.execute("SELECT count(*) FROM chunks WHERE text LIKE '%Pelicans glide%'").fetchone()[0] == 1
    doc = normalize(
        SourceFile(tmp_path / "u16.txt", "file:///u16.txt", "text"), "Hi there".encode("utf-16-be")
    )
    assert doc.text == "Hi there"


def test_a_file_caught_empty_mid_rewrite_keeps_its_rows(tmp_path, settings, conn):
    d = tmp_path / "src"
    d.mkdir()
    (d / "note.md").write_text("# Note\n\nHerons.\n")
    run_ingest([d], settings=settings)
    (d / "note.md").write_bytes(b"")  # a writer truncated it and has not written yet
    stats, _, status = run_ingest([d], settings=settings)
    assert status is RunStatus.COMPLETED and _chunks_of(conn, "note.md") == 1
    assert [(u.rsplit("/", 1)[-1], "being rewritten" in w) for u, w in stats.warnings] == [("note.md", True)]
    old = time.time() - 3600  # empty for an hour: emptied for real, its rows go
    os.utime(d / "note.md", (old, old))
    stats, _, status = run_ingest([d], settings=settings)
    assert _chunks_of(conn, "note.md") == 0 and stats.counts["documents_deleted"] == 1
