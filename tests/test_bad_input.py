"""Bad input: each bad file gets one clear line, the run goes on, nothing stored is lost."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.errors import ConfigError, InputError
from pipeline.ingest import run_ingest
from pipeline.model import RunStatus
from pipeline.normalize import decode

pytestmark = pytest.mark.subprocess

PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01"


def _cli(*args: str, env_url: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, CHUNKYARD_DATABASE_URL=env_url, COLUMNS="200")
    return subprocess.run(
        [sys.executable, "-m", "pipeline.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=600,
    )


def test_bad_files_are_reported_and_the_run_goes_on(tmp_path, database_url, conn):
    d = tmp_path / "src"
    d.mkdir()
    (d / "good.md").write_text("# Good\n\nThe good file about pelicans.\n")
    (d / "binary.md").write_text("# Was fine\n\nOnce upon a time this was text about walruses.\n")
    (d / "latin1.txt").write_bytes("Grüße aus Köln, sagte der Bäcker.".encode("cp1252"))
    (d / "empty.md").write_bytes(b"")
    (d / "picture.png").write_bytes(PNG)
    # first run: everything good
    first = _cli("ingest", str(d), "--no-prefect", env_url=database_url, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    assert "warning: src/latin1.txt: invalid UTF-8 at byte 2 (0xfc); decoded as" in first.stderr
    assert "skipped: src/empty.md: empty file" in first.stderr
    walrus_chunks = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.source_uri LIKE '%binary.md'"
    ).fetchone()[0]
    assert walrus_chunks == 1
    # now break things
    (d / "binary.md").write_bytes(PNG)
    os.mkfifo(d / "pipe.txt")
    (d / "broken.md").symlink_to(d / "nowhere.md")
    res = _cli(
        "ingest", str(d), str(tmp_path / "missing-dir"), "--no-prefect", env_url=database_url, cwd=tmp_path
    )
    assert res.returncode == 1, res.stderr
    err = res.stderr
    assert "Traceback" not in err
    assert "error: src/binary.md: looks like a binary file" in err
    assert "error: src/pipe.txt: not a regular file" in err
    assert "error: src/broken.md: file vanished or is a broken link" in err
    assert "missing-dir: no such file or directory" in err
    assert "picture.png" not in err  # unsupported types are counted, not shouted about
    # nothing stored was lost: the now-binary file keeps its old rows
    still = conn.execute(
        "SELECT count(*) FROM chunks c JOIN documents d ON d.id = c.document_id WHERE d.source_uri LIKE '%binary.md'"
    ).fetchone()[0]
    assert still == 1
    # the ledger says what failed
    run_id, status, counts = conn.execute(
        "SELECT id, status, counts FROM runs ORDER BY id DESC LIMIT 1"
    ).fetchone()
    assert status == "failed"
    assert counts["documents_failed"] == 4
    errors = conn.execute(
        "SELECT source_uri, stage FROM ingest_errors WHERE run_id = %s", (run_id,)
    ).fetchall()
    assert len(errors) == 4


def test_missing_path_and_empty_folder(tmp_path, settings):
    empty = tmp_path / "empty"
    empty.mkdir()
    stats, _, status = run_ingest([empty], settings=settings)
    assert status == "completed" and stats.counts["documents_seen"] == 0
    # nothing given exists: a usage error before any collection or ledger row is made (issue 15)
    with pytest.raises(ConfigError, match="nothing to ingest"):
        run_ingest([tmp_path / "nope"], settings=settings)
    # one of several paths missing: that path is the run's failure, the rest is ingested
    (empty / "a.md").write_text("# A\n\nText about otters.\n")
    stats, _, status = run_ingest([empty, tmp_path / "nope"], settings=settings)
    assert status == "failed" and stats.counts["documents_new"] == 1
    assert stats.errors[0][2] == "no such file or directory"


def test_usage_errors_exit_2_with_one_line(tmp_path, database_url):
    prof = tmp_path / "p.toml"
    prof.write_text('[text]\nkind = "recursive"\nsize = 100\noverlapp = 5\n')
    res = _cli("ingest", str(tmp_path), "--profile", str(prof), env_url=database_url, cwd=tmp_path)
    assert res.returncode == 2
    assert "text.recursive.overlapp: Extra inputs are not permitted" in res.stderr
    assert "Traceback" not in res.stderr


# -------------------------------------------------------------------- UTF-16 without a byte-order mark

ZH = "全文搜索应该在每种语言中都有效。\n这是第二行，包含标点符号和数字 2024。\n" * 3
RU = "Полнотекстовый поиск должен работать на каждом языке.\nВторая строка, с цифрами 2024.\n" * 3


@pytest.mark.parametrize("text", [ZH, RU], ids=["chinese", "russian"])
@pytest.mark.parametrize("enc", ["utf-16-le", "utf-16-be"])
def test_utf16_of_other_scripts_without_a_bom_is_read_as_text(text, enc):
    data = text.encode(enc)
    assert data.count(0) < len(data) / 8  # few NULs: not the pattern of Latin text
    got, warnings = decode(data, "file:///x.txt")
    assert got == text and enc.upper() in warnings[0]


@pytest.mark.parametrize(
    "text,enc", [(ZH, "gbk"), (ZH, "big5"), (RU, "cp1251"), (RU, "koi8_r"), (ZH + "。", "gbk")]
)
def test_legacy_encodings_are_not_read_as_utf16(text, enc):
    data = text.encode(enc, errors="ignore")  # no NUL byte, whatever the letters' codes
    got, warnings = decode(data, "file:///x.txt")
    assert not any("UTF-16" in w for w in warnings) and got.count("\n") == text.count("\n")


@pytest.mark.parametrize(
    "data",
    [
        bytes(range(256)) * 8,  # every byte, NULs on both sides
        # text, then bytes: NULs on both sides
        "全文搜索".encode("utf-16-le") + b"\x00\x00" + os.urandom(64).replace(b"\x00", b"\x01") * 8,
        ("\ue000\ue001 \ue002" * 50).encode("utf-16-le"),  # private-use code units, not letters
        ("\u4e2d\u0416\u05d0\u0627 " * 50).encode("utf-16-le"),  # letters of four scripts
    ],
    ids=["bytes", "random", "private-use", "mixed"],
)
def test_binary_with_a_few_nuls_is_still_refused(data):
    with pytest.raises(InputError, match="binary"):
        decode(data, "file:///x.txt")


def test_random_bytes_with_a_few_nuls_are_not_read_as_utf16():
    rnd = random.Random(24)
    for n in range(16, 216):  # 32 to 430 bytes: NULs here and there, as in UTF-16 text of other scripts
        try:  # refused as binary, or read as a legacy code page: never as UTF-16
            _, warnings = decode(rnd.randbytes(2 * n), "file:///x.bin")
        except InputError as exc:
            assert "binary" in exc.reason
            continue
        assert not any("UTF-16" in w for w in warnings)


def test_utf16_russian_without_a_bom_is_ingested_in_russian(tmp_path, settings, conn):
    (tmp_path / "ru.txt").write_bytes(RU.encode("utf-16-be"))
    stats, _, status = run_ingest([tmp_path], settings=settings)
    assert status is RunStatus.COMPLETED and not stats.errors
    row = conn.execute(
        "SELECT d.language, c.text FROM documents d JOIN chunks c ON c.document_id = d.id"
    ).fetchone()
    assert row[0] == "ru" and "Полнотекстовый" in row[1]
