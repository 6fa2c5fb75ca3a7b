"""PDF: reading order, pages, sections, tables, hyphens, running headers, OCR, and every bad file named."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from make_files import image_pdf, page_count_pdf, paragraph, scanned_pdf, text_pdf

from pipeline.chunkers.router import Router
from pipeline.config import Profile
from pipeline.errors import InputError
from pipeline.ingest import run_ingest
from pipeline.model import Document
from pipeline.normalize import normalize
from pipeline.parse import pdf_ocr
from pipeline.parse.pdf import _ranges, check_inflated
from pipeline.sources import SourceFile, source_uri

BENCH = Path(__file__).resolve().parents[2] / "shared" / "bench" / "pdf"
needs_bench = pytest.mark.skipif(not BENCH.is_dir(), reason="../shared/bench/pdf is not here")
needs_ocr = pytest.mark.skipif(not pdf_ocr.available(), reason="the ocr extra is not installed")

LOREM = (
    "Chunking decides what a retriever can find. Each paragraph here is plain prose about pipelines, "
    "written so that it wraps across several lines of the generated page. "
)


def _doc(path: Path) -> Document:
    return normalize(SourceFile(path, source_uri(path), "pdf"), path.read_bytes())


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _handbook() -> bytes:
    """Three pages: a title, headings by size, running header and page numbers, a hyphenated word, a table."""
    pages = []
    for n in range(1, 4):
        items = [(72, 760, 9, "ACME Handbook - internal"), (300, 40, 9, str(n))]
        if n == 1:
            items += [(72, 700, 22, "The Handbook")]
        items += [(72, 660, 15, f"Part {n} heading")]
        items += paragraph(LOREM * 3, y=630)
        if n == 2:
            items += [(72, 450, 11, "the experi-"), (72, 435.7, 11, "ment went well.")]
            rows = [("Region", "Revenue", "Growth"), ("North", "10", "5%"), ("South", "12", "7%")]
            items += [
                (x, 380 - 15 * r, 11, cell)
                for r, row in enumerate(rows)
                for x, cell in zip((72, 250, 420), row, strict=True)
            ]
        pages.append(items)
    return text_pdf(pages)


def test_pages_headings_tables_hyphens_and_running_headers(tmp_path):
    doc = _doc(_write(tmp_path, "handbook.pdf", _handbook()))
    assert len(doc.pages) == 3 and doc.pages[0] == 0
    assert "ACME Handbook" not in doc.text  # a header on every page
    assert "\n\n1\n\n" not in doc.text and not doc.text.rstrip().endswith("3")  # page numbers
    assert "experiment went well" in doc.text  # "experi-" + "ment"
    assert "| Region | Revenue | Growth |\n| --- | --- | --- |\n| North | 10 | 5% |" in doc.text
    assert doc.title == "The Handbook"
    paths = [s.heading_path for s in doc.sections if s.kind == "heading"]
    assert ("The Handbook", "Part 2 heading") in paths
    table = doc.text.index("| Region")
    assert any(a == table for s in doc.sections for a, _ in s.atomic)  # kept whole where it fits
    p2 = doc.text.index("Part 2 heading")
    assert doc.pages[1] <= p2 < doc.pages[2]
    assert doc.page_metadata(p2, p2 + 10) == {"page": 2, "page_end": 2}
    assert doc.page_metadata(doc.pages[1] - 5, doc.pages[1] + 5) == {"page": 1, "page_end": 2}


def test_chunks_keep_offsets_and_carry_pages(tmp_path):
    doc = _doc(_write(tmp_path, "handbook.pdf", _handbook()))
    chunker = Router(Profile()).chunker_for("pdf")
    assert chunker.kind == "markdown"
    for _, chunks in chunker.chunk_document(doc):
        for c in chunks:
            assert c.text == doc.text[c.start : c.end] and c.text.strip()
            first = max(i for i, p in enumerate(doc.pages) if p <= c.start) + 1
            assert c.metadata["page"] == first and c.metadata["page_end"] >= first


def test_two_columns_read_column_by_column(tmp_path):
    left = paragraph("Left column sentence number one goes here. " * 8, x=72, y=650, width=40)
    right = paragraph("Right column text follows the left one. " * 8, x=330, y=650, width=40)
    data = text_pdf([[(150, 720, 18, "A Two Column Page"), *left, *right]])
    text = _doc(_write(tmp_path, "cols.pdf", data)).text
    assert text.index("A Two Column Page") < text.index("Left column") < text.index("Right column")
    assert "Left column" not in text[text.index("Right column") :]


def test_outline_makes_the_section_tree(tmp_path):
    pages = [[(72, 700, 11, "Overview of things"), *paragraph(LOREM, y=680)],
             [(72, 700, 11, "Details of things"), *paragraph(LOREM, y=680), (72, 500, 11, "Deeper still"),
              *paragraph(LOREM, y=480)]]  # fmt: skip
    outline = [(1, "Overview", 0, 712), (1, "Details", 1, 712), (2, "Deeper still", 1, 512)]
    doc = _doc(_write(tmp_path, "outlined.pdf", text_pdf(pages, outline=outline)))
    got = {s.heading_path: doc.text[s.start : s.end].split("\n")[0] for s in doc.sections}
    assert got[("Overview",)] == "Overview of things"
    assert got[("Details",)] == "Details of things"
    assert got[("Details", "Deeper still")] == "Deeper still"


def test_bad_pdfs_are_named_with_a_reason_and_the_run_goes_on(tmp_path, settings, monkeypatch):
    folder = tmp_path / "in"
    folder.mkdir()
    good = text_pdf([paragraph(LOREM)])
    _write(folder, "good.pdf", good)
    _write(folder, "locked.pdf", text_pdf([paragraph(LOREM)], password="s3cret"))
    _write(folder, "truncated.pdf", good[: len(good) // 2])
    _write(folder, "garbage.pdf", b"this is not a pdf at all\n" * 10)
    _write(folder, "inflates.pdf", text_pdf([[(72, 700, 11, "y" * 10)] * 40000], compress=True))
    _write(folder, "many.pdf", text_pdf([paragraph("page")] * 6))
    _write(folder, "scan.pdf", scanned_pdf([["Only an image of text"]]))
    monkeypatch.setenv("CHUNKYARD_PDF_MAX_PAGES", "5")
    monkeypatch.setenv("CHUNKYARD_PDF_MAX_DECOMPRESSED_MB", "1")
    monkeypatch.setattr(pdf_ocr, "available", lambda: False)
    # in-process, so that the patch above reaches the parser (not a file worker's fresh interpreter)
    monkeypatch.setenv("CHUNKYARD_FILE_TIMEOUT_S", "0")
    monkeypatch.setenv("CHUNKYARD_FILE_MAX_MB", "0")
    stats = run_ingest([folder], settings=settings).stats
    errors = {Path(u).name: msg for u, _stage, msg in stats.errors}
    assert "encrypted PDF needs a password" in errors["locked.pdf"]
    assert "damaged, truncated or not a PDF" in errors["truncated.pdf"]
    assert "damaged, truncated or not a PDF" in errors["garbage.pdf"]
    assert "6 pages, over the limit of 5" in errors["many.pdf"]
    assert "inflate to over 1 MiB" in errors["inflates.pdf"]
    assert (
        "scanned PDF (no text layer on page 1)" in errors["scan.pdf"]
        and "chunkyard[ocr]" in errors["scan.pdf"]
    )
    assert all("\n" not in m for m in errors.values())
    assert {Path(u).name for u in stats.seen} - set(errors) == {"good.pdf"}
    assert stats.counts["documents_new"] == 1
    # the password opens it on the next run; nothing stored was lost
    monkeypatch.setenv("CHUNKYARD_PDF_PASSWORDS", "wrong,s3cret")
    stats = run_ingest([folder], settings=settings).stats
    assert "locked.pdf" not in {Path(u).name for u, _, _ in stats.errors}
    assert stats.counts["documents_new"] == 1 and stats.counts["documents_unchanged"] == 1


def test_an_image_only_page_without_ocr_is_reported_by_number(tmp_path, monkeypatch):
    monkeypatch.setattr(pdf_ocr, "available", lambda: False)
    import pypdfium2 as pdfium

    text = pdfium.PdfDocument(text_pdf([paragraph(LOREM), paragraph(LOREM)]))
    text.import_pages(pdfium.PdfDocument(scanned_pdf([["scanned"]])))
    path = tmp_path / "mixed.pdf"
    text.save(path)
    doc = _doc(path)
    assert len(doc.pages) == 3
    assert any("page 3: image only, no text layer" in w for w in doc.warnings)


def test_edit_on_one_page_rechunks_that_section_only(tmp_path, settings, conn):
    def book(changed: str) -> bytes:
        pages = [
            [(72, 700, 16, f"Chapter {n}"), *paragraph(f"Chapter {n} says: " + LOREM * 2, y=670)]
            for n in range(1, 5)
        ]
        pages[2] = [(72, 700, 16, "Chapter 3"), *paragraph(changed + LOREM * 2, y=670)]
        return text_pdf(pages)

    path = _write(tmp_path, "book.pdf", book("Chapter 3 says: "))
    first = run_ingest([path], settings=settings).stats
    assert first.counts["sections_rechunked"] >= 4
    path.write_bytes(book("Chapter 3 now says something else: "))
    second = run_ingest([path], settings=settings).stats
    assert second.counts["sections_rechunked"] == 1 and second.counts["sections_kept"] >= 3
    rows = conn.execute(
        """SELECT c.text, c.metadata->>'page' FROM chunks c JOIN documents d ON d.id = c.document_id
           WHERE substr(d.normalized_text, c.char_start + 1, c.char_end - c.char_start) = c.text"""
    ).fetchall()
    assert rows and all(p is not None for _, p in rows)
    assert {int(p) for t, p in rows if "now says" in t} == {3}


@needs_ocr
@pytest.mark.slow
def test_scanned_pages_are_ocred_with_confidence(tmp_path):
    data = scanned_pdf([["Invoices are due within thirty days.", "Late fees apply after that."]])
    doc = _doc(_write(tmp_path, "scan.pdf", data))
    assert "thirty days" in doc.text.lower()
    assert set(doc.ocr_pages) == {1} and doc.ocr_pages[1] > 0.8
    meta = doc.page_metadata(0, len(doc.text))
    assert meta["ocr"] is True and meta["ocr_confidence"] == doc.ocr_pages[1]


# ------------------------------------------------------------------------- golden: real PDFs


@needs_bench
def test_golden_lecture_script_outline_and_pages():
    doc = _doc(BENCH / "009-pdflatex-geotopo" / "GeoTopo-komprimiert.pdf")
    assert len(doc.pages) == 117 and doc.title == "Geometrie und Topologie"
    paths = [s.heading_path for s in doc.sections if s.kind == "heading"]
    assert ("1 Topologische Grundbegriffe", "1.1 Topologische Räume") in paths
    assert ("3 Fundamentalgruppe und Überlagerungen", "3.3 Überlagerungen") in paths
    at = doc.text.index("Seien p : Y → X eine Überlagerung")
    assert doc.page_metadata(at, at + 20)["page"] == 60  # printed page 57
    assert "ÜBERLAGERUNGEN" not in doc.text[doc.pages[59] : doc.pages[60]]  # the running header


@needs_bench
def test_golden_two_column_reading_order():
    text = _doc(BENCH / "026-latex-multicolumn" / "multicolumn.pdf").text
    end_left = text.index("Vivamus viverra fermentum felis. Donec nonummy")
    assert text[end_left:].startswith("Vivamus viverra fermentum felis. Donec nonummy\n\npellentesque ante.")
    assert "consectetuer adipiscing elit" in text  # "adip-" + "iscing" at a line end
    assert "| Austria | 8.9 | 83,879 | Vienna | German |" in text


@needs_bench
def test_golden_encrypted_file_opens_with_its_password(monkeypatch):
    path = BENCH / "005-libreoffice-writer-password" / "libreoffice-writer-password.pdf"
    with pytest.raises(InputError, match="encrypted PDF needs a password"):
        _doc(path)
    monkeypatch.setenv("CHUNKYARD_PDF_PASSWORDS", "openpassword")
    assert _doc(path).text.strip()


def _returns(fn, seconds: float = 300):
    """fn's result, called in a thread: a hang fails the test instead of stopping the suite."""
    out: dict = {}

    def call() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # re-raised in the test's thread
            out["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} did not return within {seconds} s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def test_a_blank_scan_background_is_inflated_to_its_end_and_ingested(tmp_path, settings):
    # a valid 9 KB page over a blank A4 300-dpi image: its stream inflates 1000:1 and ends inside the read
    # window, which used to spin check_inflated forever (the stream's end fed again and again)
    data = image_pdf(2480, 3508)
    assert len(data) < 16_000
    assert _returns(lambda: check_inflated(data, "bg.pdf", limit_mb=1024)) == 2480 * 3508
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder, "bg.pdf", data)
    _write(folder, "good.pdf", text_pdf([paragraph(LOREM)]))
    stats = _returns(lambda: run_ingest([folder], settings=settings).stats)
    assert not stats.errors and stats.counts["documents_new"] == 2


def test_the_bomb_limit_counts_every_flate_layer(tmp_path, settings, monkeypatch):
    # 100 MiB of pixels compressed twice is about a kilobyte: the limit is on what all layers inflate to
    nested, single = image_pdf(10_000, 10_000, layers=2), image_pdf(10_000, 10_000)
    assert len(nested) < 4_000
    for data in (nested, single):
        with pytest.raises(InputError, match="inflate to over 10 MiB"):
            _returns(lambda data=data: check_inflated(data, "bomb.pdf", limit_mb=10))
    folder = tmp_path / "in"
    folder.mkdir()
    _write(folder, "nested.pdf", nested)
    _write(folder, "good.pdf", text_pdf([paragraph(LOREM)]))
    monkeypatch.setenv("CHUNKYARD_PDF_MAX_DECOMPRESSED_MB", "10")
    stats = run_ingest([folder], settings=settings).stats
    errors = {Path(u).name: msg for u, _stage, msg in stats.errors}
    assert set(errors) == {"nested.pdf"} and "possible PDF bomb" in errors["nested.pdf"]
    assert stats.counts["documents_new"] == 1


def test_a_page_tree_claiming_4999_broken_pages_makes_one_warning_line(tmp_path, settings, conn):
    """A 600-byte file whose page tree says /Count 4999 over one real page (or none): one warning with the
    page range, not one per page (it was 4,998 lines and 300 KB of stored warnings), and the real page kept."""
    one = page_count_pdf(4999)
    assert len(one) < 700
    doc = _doc(_write(tmp_path, "claims.pdf", one))
    assert doc.warnings == ["page 2-4999: cannot be read (Failed to load page.); left empty"]
    assert "The only real page of this file." in doc.text
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "claims.pdf").write_bytes(one)
    (folder / "hollow.pdf").write_bytes(page_count_pdf(4999, real_pages=0))
    stats = run_ingest([folder], settings=settings).stats
    assert [(Path(u).name, w) for u, w in stats.warnings] == [("claims.pdf", doc.warnings[0])]
    assert [Path(u).name for u, _ in stats.skipped] == ["hollow.pdf"] and not stats.errors
    stored = conn.execute("SELECT length(metadata->>'warnings') FROM documents").fetchall()
    conn.commit()
    assert len(stored) == 1 and stored[0][0] < 200


def test_page_ranges_in_a_warning_are_capped():
    assert _ranges([1, 2, 3, 7, 9, 10]) == "1-3, 7, 9-10"
    every_other = _ranges(list(range(1, 5000, 2)))
    assert every_other.startswith("1, 3, 5") and every_other.endswith("... (2500 pages in all)")
    assert len(every_other) < 100
