"""PDF: text in reading order with pages, a section tree from the outline (or from heading sizes), and OCR.

PDFium (pypdfium2, Apache-2.0/BSD) reads the text layer, the outline and passwords, and renders pages for
OCR; the layout (columns, paragraphs, tables, running headers) is ours (`pdf_layout`, `pdf_pages`). Pages
without a text layer are OCRed when the `ocr` extra is installed, and reported by number when it is not.
Bad files raise InputError with the reason: encrypted, damaged, or over the bomb limits in `Settings`.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from pipeline.errors import InputError, SkipFile
from pipeline.parse import Parsed, parser
from pipeline.parse.builder import TextBuilder
from pipeline.parse.pdf_columns import page_blocks
from pipeline.parse.pdf_layout import Block
from pipeline.parse.pdf_pages import PageText, body_size, drop_running, text_runs
from pipeline.parse.sections import Head

#: A heading is a short block this much larger than the body text.
HEADING_RATIO = 1.15


@parser("pdf", mime="application/pdf", binary=True)
def parse_pdf(data: bytes, *, language: str | None, filename: str) -> Parsed:
    """Pages in reading order, one section tree, OCR where a page has no text layer."""
    from pipeline.config import Settings

    settings = Settings()
    check_inflated(data, filename, limit_mb=settings.pdf_max_decompressed_mb)
    pdf = open_pdf(data, filename, passwords(settings))
    try:
        n = len(pdf)
        if n > settings.pdf_max_pages:
            raise InputError(
                filename, f"PDF has {n} pages, over the limit of {settings.pdf_max_pages} "
                "(CHUNKYARD_PDF_MAX_PAGES); refused as a possible PDF bomb"
            )  # fmt: skip
        unreadable: dict[str, list[int]] = {}
        pages = [_read_page(pdf, i, unreadable) for i in range(n)]
        warnings = _unreadable_warnings(unreadable)
        _ocr_pages(pdf, pages, filename, warnings)
        outline = _outline(pdf)
        meta_title = _meta_title(pdf)
    finally:
        pdf.close()
    drop_running(pages)
    return _assemble(pages, outline, meta_title, warnings)


# ---------------------------------------------------------------------------------------- opening


def passwords(settings: Any) -> list[str]:
    """CHUNKYARD_PDF_PASSWORDS as a list: comma-separated, or @FILE with one password per line."""
    if settings.pdf_passwords is None:
        return []
    raw = settings.pdf_passwords.get_secret_value()
    if raw.startswith("@"):
        try:
            return [ln.rstrip("\r\n") for ln in Path(raw[1:]).expanduser().read_text().splitlines() if ln]
        except OSError as exc:
            raise InputError(raw, f"cannot read the PDF password file ({exc.strerror or exc})") from exc
    return [p.strip() for p in raw.split(",") if p.strip()]


def open_pdf(data: bytes, filename: str, candidates: list[str]) -> Any:
    """The opened document: without a password, then with each candidate in turn."""
    import pypdfium2 as pdfium

    for password in [None, *candidates]:
        try:
            return pdfium.PdfDocument(data, password=password)
        except pdfium.PdfiumError as exc:
            code = getattr(exc, "err_code", None)
            if code == 4:  # FPDF_ERR_PASSWORD: try the next one
                continue
            why = {3: "damaged, truncated or not a PDF", 6: "uses an unsupported security handler"}
            raise InputError(filename, f"cannot open PDF: {why.get(code, str(exc))}") from exc
    tried = f"none of the {len(candidates)} password(s) in CHUNKYARD_PDF_PASSWORDS opens it" if candidates else (
        "set CHUNKYARD_PDF_PASSWORDS (comma-separated, or @FILE with one per line)"
    )  # fmt: skip
    raise InputError(filename, f"encrypted PDF needs a password: {tried}")


_STREAM = re.compile(rb"(?<!end)stream\r?\n")
#: The stream's /Filter entry in the dictionary before it: a name or an array of names.
_FILTER = re.compile(rb"/Filter\s*(\[[^\]]*\]|/[A-Za-z0-9]+)")
_NAME = re.compile(rb"/([A-Za-z0-9]+)")
#: How far before `stream` its dictionary is looked for, and how much input is inflated per step.
_DICT_WINDOW = 4096
_STEP = 2**16
_OUT_STEP = 2**20


def check_inflated(data: bytes, filename: str, *, limit_mb: int) -> int:
    """Inflate every Flate stream, through each of its Flate layers, without keeping it; refuse the file
    when their output together passes the limit (a PDF bomb). Memory stays at about a megabyte a layer,
    and every step consumes input or ends the stream, so no stream can keep it looping."""
    limit = limit_mb * 2**20
    total = 0
    for m in _STREAM.finditer(data):
        layers = _flate_layers(data[max(0, m.start() - _DICT_WINDOW) : m.start()])
        if not layers:
            continue
        chunks: Iterator[bytes] = (data[p : p + _STEP] for p in range(m.end(), len(data), _STEP))
        for _ in range(layers):
            chunks = _inflate(chunks)
        try:
            for out in chunks:
                total += len(out)
                if total > limit:
                    raise InputError(
                        filename, f"PDF streams inflate to over {limit_mb} MiB (CHUNKYARD_PDF_MAX_DECOMPRESSED_MB); "
                        "refused as a possible PDF bomb"
                    )  # fmt: skip
        except zlib.error:
            pass  # not Flate after all (an image, an encrypted stream): PDFium decides
    return total


def _flate_layers(before: bytes) -> int:
    """How many Flate layers the stream's filter chain starts with (1 when no /Filter is seen: tried)."""
    head = before[before.rfind(b"obj") + 3 :] if b"obj" in before else before
    found = list(_FILTER.finditer(head))
    if not found:
        return 1
    names = _NAME.findall(found[-1].group(1))
    n = 0
    for name in names:
        if name not in (b"FlateDecode", b"Fl"):
            break
        n += 1
    return n


def _inflate(chunks: Iterable[bytes]) -> Iterator[bytes]:
    """Inflate a stream fed in pieces, yielding at most a megabyte at a time; stops at the stream's end
    (the bytes after it, `endstream` and the rest of the file, are never fed again)."""
    z = zlib.decompressobj()
    for chunk in chunks:
        while chunk and not z.eof:
            out = z.decompress(chunk, _OUT_STEP)
            rest = z.unconsumed_tail
            if out:
                yield out
            elif len(rest) >= len(chunk):
                return  # neither output nor input consumed: a stream that goes nowhere
            chunk = rest
        if z.eof:
            return
    tail = z.flush()
    if tail:
        yield tail


# ------------------------------------------------------------------------------------------ pages


def _read_page(pdf: Any, i: int, unreadable: dict[str, list[int]]) -> PageText:
    """One page's text runs; a page PDFium cannot read is left empty, its number filed under the reason (one
    warning per reason, not per page: a 600-byte file can claim 4999 broken pages)."""
    import pypdfium2.raw as pdfium_c

    try:
        page = pdf[i]
    except Exception as exc:  # PDFium raises its own error types for broken page objects
        unreadable.setdefault(str(exc)[:200], []).append(i + 1)
        return PageText(i + 1, 0.0, 0.0)
    try:
        width, height = page.get_size()
        segs = text_runs(page.get_textpage())
        scanned = not segs and any(
            True for _ in page.get_objects(filter=(pdfium_c.FPDF_PAGEOBJ_IMAGE,), max_depth=3)
        )
        return PageText(i + 1, width, height, segs, scanned)
    finally:
        page.close()


#: Reasons of unreadable pages given one warning each; pages of any further reason share one more.
MAX_REASONS = 4


def _unreadable_warnings(unreadable: dict[str, list[int]]) -> list[str]:
    """One line per reason pages could not be read, with their page ranges; a few lines at most."""
    reasons = list(unreadable.items())
    lines = [
        f"page {_ranges(nums)}: cannot be read ({why}); left empty" for why, nums in reasons[:MAX_REASONS]
    ]
    if rest := reasons[MAX_REASONS:]:
        nums = sorted(n for _, ns in rest for n in ns)
        lines.append(f"page {_ranges(nums)}: cannot be read ({len(rest)} other reasons); left empty")
    return lines


def _ocr_pages(pdf: Any, pages: list[PageText], filename: str, warnings: list[str]) -> None:
    """OCR the pages that have images but no text layer; without the extra, say which pages stay empty."""
    from pipeline.parse import pdf_ocr

    scanned = [p for p in pages if p.scanned]
    if not scanned:
        return
    if not pdf_ocr.available():
        nums = _ranges([p.number for p in scanned])
        if len(scanned) == len(pages) or not any(p.segs for p in pages):
            raise InputError(
                filename, f"scanned PDF (no text layer on page {nums}): install the OCR extra, "
                "pip install 'chunkyard[ocr]', to read it"
            )  # fmt: skip
        warnings.append(f"page {nums}: image only, no text layer; left empty (pip install 'chunkyard[ocr]')")
        return
    blank = []
    for p in scanned:
        page = pdf[p.number - 1]
        try:
            p.segs, p.ocr_confidence = pdf_ocr.ocr_page(page, p.height)
        finally:
            page.close()
        if not p.segs:
            blank.append(p.number)
    if blank:
        warnings.append(f"page {_ranges(blank)}: OCR found no text on these image-only pages")


#: Page ranges one warning lists before it only counts the rest (a warning is stored with its document).
MAX_RANGES = 12


def _ranges(nums: list[int]) -> str:
    """[1, 2, 3, 7] as "1-3, 7"; past MAX_RANGES ranges, the first ones and how many pages in all."""
    out: list[list[int]] = []
    for n in nums:
        if out and out[-1][1] == n - 1:
            out[-1][1] = n
        else:
            out.append([n, n])
    text = ", ".join(f"{a}-{b}" if b > a else str(a) for a, b in out[:MAX_RANGES])
    return text if len(out) <= MAX_RANGES else f"{text}, ... ({len(nums)} pages in all)"


# ---------------------------------------------------------------------------------- outline, title


def _outline(pdf: Any) -> list[tuple[int, int, float | None, str]]:
    """Bookmarks as (level, page index, y of the destination or None, title)."""
    out = []
    try:
        for bm in pdf.get_toc(max_depth=6):
            dest = bm.get_dest()
            index = dest.get_index() if dest is not None else None
            if index is None:
                continue
            y = None
            try:
                mode, view = dest.get_view()
                y = float(view[1]) if mode == 1 and len(view) > 1 and view[1] else None  # XYZ: left, top
            except Exception:  # a malformed view leaves the page start
                y = None
            title = " ".join((bm.get_title() or "").split())
            if title:
                out.append((bm.level + 1, index, y, title))
    except Exception:  # a broken outline costs the tree, not the document
        return []
    return out


def _meta_title(pdf: Any) -> str:
    """The document information Title, unless it is a file name a converter left there."""
    try:
        title = " ".join((pdf.get_metadata_value("Title") or "").split())
    except Exception:
        return ""
    if re.search(r"\.(pdf|docx?|tex|dvi|odt|rtf|txt)$|^microsoft word|^untitled", title, re.I):
        return ""
    return title[:200]


# ---------------------------------------------------------------------------------------- assembly


def _assemble(
    pages: list[PageText], outline: list[tuple[int, int, float | None, str]], title: str, warnings: list[str]
) -> Parsed:
    """Blocks of every page into one text: pages, headings (outline first), tables atomic."""
    body = body_size(pages)
    laid = [(p, page_blocks(p.segs)) for p in pages]
    sizes = sorted(
        {round(b.size * 2) / 2 for _, bs in laid for b in bs if _is_heading(b, body)}, reverse=True
    )
    level = {s: min(i + 1, 6) for i, s in enumerate(sizes)}
    tb = TextBuilder()
    placed: list[tuple[int, float, int, str]] = []  # (page index, top, offset, text) of every block
    for p, blocks in laid:
        tb.page()
        for b in blocks:
            if b.kind == "para" and not outline and _is_heading(b, body):
                span = tb.heading(b.text, level[round(b.size * 2) / 2])
            else:
                span = tb.add(b.text, atomic=b.kind == "table")
            if span[1] > span[0]:
                placed.append((p.number - 1, b.top, span[0], b.text))
    text = tb.text
    if not text.strip():
        raise SkipFile("", "PDF has no text (no text layer and nothing to OCR)")
    heads = _outline_heads(outline, placed) if outline else None
    if not title:
        first = [h for h in tb.heads if h[0] < (tb.pages[1] if len(tb.pages) > 1 else len(text))]
        title = min(first, key=lambda h: h[1])[2] if first else ""
    ocr = {p.number: round(p.ocr_confidence, 3) for p in pages if p.ocr_confidence is not None}
    meta: dict[str, Any] = {"pages": len(pages)}
    if ocr:
        meta["ocr_pages"] = sorted(ocr)
    if outline:
        meta["outline"] = len(outline)
    return Parsed(text, tb.sections(heads), title, pages=tb.pages, ocr_pages=ocr, warnings=warnings,
                  metadata=meta)  # fmt: skip


def _is_heading(b: Block, body: float) -> bool:
    """Short, clearly larger than the body text, and not a sentence that ends in a full stop."""
    return (
        b.kind == "para"
        and b.lines <= 3
        and len(b.text) <= 150
        and b.size >= HEADING_RATIO * body
        and any(c.isalpha() for c in b.text)
        and not b.text.endswith(".")
    )


def _outline_heads(
    outline: list[tuple[int, int, float | None, str]], placed: list[tuple[int, float, int, str]]
) -> list[Head]:
    """Each bookmark at the block it points to: its title on that page near its y, else the nearest below."""
    heads: list[Head] = []
    by_page: dict[int, list[tuple[float, int, str]]] = {}
    for page, top, off, text in placed:
        by_page.setdefault(page, []).append((top, off, text))
    starts = sorted(by_page)
    for level, index, y, title in outline:
        blocks = by_page.get(index)
        if not blocks:
            later = [p for p in starts if p > index]
            if later:
                heads.append((by_page[later[0]][0][1], level, title))
            continue
        want = _squash(title)[:24]
        named = [b for b in blocks if want and _squash(b[2]).startswith(want)]
        pool = named or [b for b in blocks if y is None or b[0] <= y + 4] or blocks
        best = min(pool, key=lambda b: abs(y - b[0]) if y is not None else b[1])
        heads.append((best[1], level, title))
    return heads


def _squash(s: str) -> str:
    return re.sub(r"\W+", "", s.lower())
