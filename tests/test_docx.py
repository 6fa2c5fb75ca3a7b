"""Word .docx: headings as sections, lists, tables, footnotes; offsets in the database; bad files named."""

from __future__ import annotations

import io
import tracemalloc
import zipfile
from pathlib import Path

import docx
import pytest
from docx.oxml import OxmlElement
from docx.oxml.ns import qn
from make_files import with_forged_member, zip_of

from pipeline.chunkers.router import Router
from pipeline.config import Profile
from pipeline.errors import InputError
from pipeline.ingest import run_ingest
from pipeline.model import Document
from pipeline.normalize import normalize
from pipeline.parse import docx as docx_parser
from pipeline.sources import SourceFile, source_uri

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
FOOTNOTES = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<w:footnotes xmlns:w="{W}">
<w:footnote w:type="separator" w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote>
<w:footnote w:type="continuationSeparator" w:id="0"><w:p><w:r><w:continuationSeparator/></w:r></w:p></w:footnote>
<w:footnote w:id="1"><w:p><w:r><w:t>Measured on the 2024 test fleet.</w:t></w:r></w:p></w:footnote>
</w:footnotes>"""


def report_docx() -> bytes:
    """A report with a title, Heading 1-3, bullets and numbers, a table and a footnote."""
    d = docx.Document()
    d.add_paragraph("Fleet Report", style="Title")
    d.add_heading("Summary", level=1)
    p = d.add_paragraph("Battery life improved by a third.")
    ref = OxmlElement("w:footnoteReference")
    ref.set(qn("w:id"), "1")
    p.add_run()._r.append(ref)
    d.add_paragraph("charging is faster", style="List Bullet")
    d.add_paragraph("range is longer", style="List Bullet")
    d.add_heading("Method", level=2)
    d.add_paragraph("collect the logs", style="List Number")
    d.add_paragraph("compare the quarters", style="List Number")
    table = d.add_table(rows=3, cols=3)
    for r, row in enumerate(
        [("Quarter", "Range", "Charge"), ("Q1", "410 km", "38 min"), ("Q2", "455 km", "31 min")]
    ):
        for c, value in enumerate(row):
            table.cell(r, c).text = value
    d.add_heading("Caveats", level=3)
    d.add_paragraph("Winter numbers are lower. " * 30)
    buf = io.BytesIO()
    d.save(buf)
    return _with_footnotes(buf.getvalue())


def _with_footnotes(data: bytes) -> bytes:
    """python-docx writes no footnotes part: add word/footnotes.xml, its relationship and content type."""
    src = zipfile.ZipFile(io.BytesIO(data))
    files = {n: src.read(n) for n in src.namelist()}
    files["word/footnotes.xml"] = FOOTNOTES.encode()
    rels = "word/_rels/document.xml.rels"
    files[rels] = files[rels].replace(
        b"</Relationships>",
        b'<Relationship Id="rIdFn1" Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/'
        b'footnotes" Target="footnotes.xml"/></Relationships>',
    )
    files["[Content_Types].xml"] = files["[Content_Types].xml"].replace(
        b"</Types>",
        b'<Override PartName="/word/footnotes.xml" ContentType="application/vnd.openxmlformats-officedocument.'
        b'wordprocessingml.footnotes+xml"/></Types>',
    )
    return zip_of(files)


def _doc(path: Path) -> Document:
    return normalize(SourceFile(path, source_uri(path), "docx"), path.read_bytes())


def test_headings_lists_tables_and_footnotes(tmp_path):
    path = tmp_path / "report.docx"
    path.write_bytes(report_docx())
    doc = _doc(path)
    assert doc.title == "Fleet Report"
    paths = [s.heading_path for s in doc.sections]
    assert (
        ("Summary",) in paths and ("Summary", "Method") in paths and ("Summary", "Method", "Caveats") in paths
    )
    assert "Battery life improved by a third.[^1]\n\n[^1]: Measured on the 2024 test fleet." in doc.text
    assert "- charging is faster\n\n- range is longer" in doc.text
    assert "1. collect the logs\n\n2. compare the quarters" in doc.text
    table = "| Quarter | Range | Charge |\n| --- | --- | --- |\n| Q1 | 410 km | 38 min |\n| Q2 | 455 km | 31 min |"
    at = doc.text.index(table)
    assert (at, at + len(table)) in [a for s in doc.sections for a in s.atomic]
    assert doc.pages == [] and doc.mime.endswith("wordprocessingml.document")


def test_chunks_hold_the_offset_contract(tmp_path):
    path = tmp_path / "report.docx"
    path.write_bytes(report_docx())
    doc = _doc(path)
    chunker = Router(Profile()).chunker_for("docx")
    chunks = [c for _, cs in chunker.chunk_document(doc) for c in cs]
    assert chunks and all(c.text == doc.text[c.start : c.end] and c.text.strip() for c in chunks)
    assert all("page" not in c.metadata for c in chunks)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"PK\x03\x04 but truncated garbage", "not a zip archive"),
        (b"just some text", "not a zip archive"),
        (zip_of({"photo.jpg": b"\xff\xd8\xff", "notes.txt": b"hi"}), "a zip archive but not a Word document"),
        (zip_of({"word/document.xml": b"<nonsense/>"}), "not a readable Word document"),
    ],
)
def test_bad_docx_files_say_what_they_are(tmp_path, data, reason):
    path = tmp_path / "bad.docx"
    path.write_bytes(data)
    with pytest.raises(InputError, match=reason) as err:
        _doc(path)
    assert err.value.source == source_uri(path) and err.value.stage == "normalize"


def test_ingest_stores_docx_chunks_at_their_offsets(tmp_path, settings, conn):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "report.docx").write_bytes(report_docx())
    (folder / "fake.docx").write_bytes(zip_of({"mimetype": b"application/epub+zip"}))
    stats = run_ingest([folder], settings=settings).stats
    assert [Path(u).name for u, _, _ in stats.errors] == ["fake.docx"]
    assert stats.counts["documents_new"] == 1
    rows = conn.execute(
        """SELECT c.text = substr(d.normalized_text, c.char_start + 1, c.char_end - c.char_start), s.heading_path
           FROM chunks c JOIN documents d ON d.id = c.document_id JOIN sections s ON s.id = c.section_id"""
    ).fetchall()
    assert rows and all(ok for ok, _ in rows)
    assert ["Summary", "Method", "Caveats"] in [p for _, p in rows]


def test_a_member_that_lies_about_its_size_is_inflated_no_further_than_the_limit(tmp_path, monkeypatch):
    """word/document.xml declares 5000 bytes and inflates to 64 MiB (spaces after its root element), under a
    4 MiB limit: refused as a zip bomb, and memory stays near one window (python-docx never reads it: zipfile
    would inflate the whole member in one call, then fail on its CRC)."""
    monkeypatch.setattr(docx_parser, "MAX_UNZIPPED_MB", 4)
    path = tmp_path / "forged.docx"
    forged = with_forged_member(report_docx(), "word/document.xml", real=64 << 20, declared=5000, fill=b" ")
    path.write_bytes(forged)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=r"more than 4 MiB \(member word/document.xml .*zip bomb") as err:
            _doc(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 12 << 20, f"{peak / 2**20:.0f} MiB in use while reading a 4 MiB-limited file"
    assert err.value.stage == "normalize"


def test_a_member_whose_size_is_forged_under_the_limit_is_named(tmp_path):
    path = tmp_path / "forged.docx"
    path.write_bytes(with_forged_member(report_docx(), "word/media/blob.bin", real=10_000, declared=100))
    with pytest.raises(InputError, match="forged zip: member word/media/blob.bin declares 100 bytes unzipped "
                       "but holds 10000"):  # fmt: skip
        _doc(path)


def test_a_forged_docx_fails_alone_and_a_good_one_beside_it_is_stored(tmp_path, settings, monkeypatch):
    monkeypatch.setattr(docx_parser, "MAX_UNZIPPED_MB", 4)
    # parsed in this process (both file bounds off), where the lowered limit applies
    monkeypatch.setenv("CHUNKYARD_FILE_TIMEOUT_S", "0")
    monkeypatch.setenv("CHUNKYARD_FILE_MAX_MB", "0")
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "report.docx").write_bytes(report_docx())
    forged = with_forged_member(report_docx(), "word/document.xml", real=32 << 20, declared=5000, fill=b" ")
    (folder / "forged.docx").write_bytes(forged)
    stats = run_ingest([folder], settings=settings).stats
    assert [(Path(u).name, "zip bomb" in m) for u, _, m in stats.errors] == [("forged.docx", True)]
    assert stats.counts["documents_new"] == 1
