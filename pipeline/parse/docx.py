"""Word (.docx, python-docx): Heading 1-6 styles as sections, lists, tables as markdown, footnotes in place.

A footnote's text follows the paragraph that cites it (`[^3]` in the text, `[^3]: ...` after it), so it
lands in the same chunk or the next. Tables become markdown tables (atomic: the markdown chunker keeps them
whole where they fit). A file that is no zip, a zip of something else, or a zip bomb is an InputError.
"""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from typing import Any

from pipeline.errors import InputError, SkipFile
from pipeline.parse import Parsed, parser
from pipeline.parse.builder import TextBuilder

#: Refuse a .docx whose parts unzip to more than this (a zip bomb).
MAX_UNZIPPED_MB = 512

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_HEADING = re.compile(r"^heading\s*([1-9])$", re.I)


@parser("docx", mime="application/vnd.openxmlformats-officedocument.wordprocessingml.document", binary=True)
def parse_docx(data: bytes, *, language: str | None, filename: str) -> Parsed:
    """Paragraphs, headings, lists and tables in document order; footnotes after the paragraph citing them."""
    doc = _open(data, filename)
    notes = _footnotes(doc)
    numbering = _Numbering(doc)
    tb = TextBuilder()
    title = ""
    for block in doc.iter_inner_content():
        el = block._element
        if el.tag == f"{_W}tbl":
            tb.add(_table(el), atomic=True)
            continue
        text, cited = _runs_text(el)
        style = _style_name(block)
        level = _heading_level(style, el)
        if level:
            tb.heading(text, level)
        elif style.lower() == "title" and not title:
            title = " ".join(text.split())
            tb.add(text)
        else:
            tb.add(numbering.prefix(el, _style_element(block)) + text)
        for n in cited:
            if n in notes:
                tb.add(f"[^{n}]: {notes[n]}")
    if not tb.text.strip():
        raise SkipFile("", "Word document has no text")
    return Parsed(tb.text, tb.sections(), title, metadata={"footnotes": len(notes)} if notes else {})


def _open(data: bytes, filename: str) -> Any:
    """The python-docx Document, or an InputError that says what the file really is."""
    if not zipfile.is_zipfile(io.BytesIO(data)):
        raise InputError(
            filename, "not a Word .docx file: not a zip archive (damaged, or another format renamed)"
        )
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        names = zf.namelist()
        _check_members(data, zf.infolist(), filename, limit=MAX_UNZIPPED_MB * 2**20)
    if "word/document.xml" not in names:
        held = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
        raise InputError(
            filename, f"a zip archive but not a Word document (no word/document.xml; holds {held})"
        )
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    try:
        return docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, ValueError, KeyError) as exc:
        raise InputError(filename, f"not a readable Word document ({exc})") from exc


def _check_members(data: bytes, members: list[zipfile.ZipInfo], filename: str, *, limit: int) -> None:
    """Inflate every member here, counting the bytes that really come out, before python-docx reads any: the
    sizes a zip declares are the attacker's to write, and zipfile inflates a member's whole stream in one call
    (a forged small size let a .docx reach 1.3 GB before it failed). Memory stays at one window; an InputError
    as soon as the members pass `limit` together, or when one holds another size than it declares."""
    total = 0
    for info in members:
        if info.flag_bits & 0x1:
            raise InputError(filename, f"not a readable Word document (member {info.filename} is encrypted)")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise InputError(
                filename, f"not a Word document (member {info.filename} uses zip compression method "
                f"{info.compress_type}; Word writes only stored or deflated members)"
            )  # fmt: skip
        real = _member_size(data, info, filename, budget=limit - total)
        if real is None:
            raise InputError(
                filename, f"unzips to more than {limit / 2**20:.0f} MiB (member {info.filename} alone goes on "
                f"past that, whatever size it declares): refused as a zip bomb"
            )  # fmt: skip
        if real != info.file_size:
            raise InputError(
                filename, f"damaged or forged zip: member {info.filename} declares {info.file_size} bytes "
                f"unzipped but holds {real}"
            )  # fmt: skip
        total += real


#: Compressed bytes fed to zlib at a time, and the most it may hand back per call.
_WINDOW = 64 * 1024
_OUT = 1024 * 1024


def _member_size(data: bytes, info: zipfile.ZipInfo, filename: str, *, budget: int) -> int | None:
    """The bytes a member really unzips to, read from its local header on; None once past `budget`."""
    off = info.header_offset
    if data[off : off + 4] != b"PK\x03\x04":
        raise InputError(filename, f"damaged zip: no local header for member {info.filename}")
    name_len, extra_len = struct.unpack("<HH", data[off + 26 : off + 30])
    start = off + 30 + name_len + extra_len
    if info.compress_type == zipfile.ZIP_STORED:
        if start + info.compress_size > len(data):
            raise InputError(filename, f"damaged zip: member {info.filename} is cut short")
        return info.compress_size if info.compress_size <= budget else None
    inflate = zlib.decompressobj(-zlib.MAX_WBITS)
    view = memoryview(data)
    pos, n = start, 0
    while not inflate.eof:
        if inflate.unconsumed_tail:
            chunk = inflate.unconsumed_tail
        elif pos < len(data):
            chunk, pos = view[pos : pos + _WINDOW], pos + _WINDOW
        else:
            raise InputError(filename, f"damaged zip: member {info.filename} is cut short")
        try:
            n += len(inflate.decompress(chunk, _OUT))
        except zlib.error as exc:
            raise InputError(filename, f"damaged zip: member {info.filename} ({exc})") from exc
        if n > budget:
            return None
    return n


def _runs_text(el: Any) -> tuple[str, list[str]]:
    """A paragraph's text from its runs (hyperlinks included), with `[^n]` where a footnote is cited."""
    parts: list[str] = []
    cited: list[str] = []
    for node in el.iter():
        tag = node.tag
        if tag == f"{_W}t":
            parts.append(node.text or "")
        elif tag == f"{_W}tab":
            parts.append("\t")
        elif tag in (f"{_W}br", f"{_W}cr"):
            parts.append("\n")
        elif tag == f"{_W}footnoteReference":
            n = node.get(f"{_W}id", "")
            parts.append(f"[^{n}]")
            cited.append(n)
    return "".join(parts), cited


def _style_name(block: Any) -> str:
    try:
        return (block.style.name or "") if block.style is not None else ""
    except (KeyError, AttributeError):  # a style id missing from styles.xml
        return ""


def _style_element(block: Any) -> Any:
    try:
        return block.style.element if block.style is not None else None
    except (KeyError, AttributeError):
        return None


def _heading_level(style: str, el: Any) -> int:
    """1-6 for Heading 1-6 styles (or a paragraph's own outline level), else 0."""
    m = _HEADING.match(style.strip())
    if m:
        return min(int(m.group(1)), 6)
    lvl = el.find(f"{_W}pPr/{_W}outlineLvl")
    if lvl is not None and (v := lvl.get(f"{_W}val", "")).isdigit() and int(v) < 6:
        return int(v) + 1
    return 0


def _table(tbl: Any) -> str:
    """A Word table as a markdown table: the first row is the header, cell paragraphs joined by spaces."""
    rows = []
    for tr in tbl.iter(f"{_W}tr"):
        if tr.getparent() is not tbl:
            continue  # a nested table's rows are part of their cell's text
        cells = [" ".join(_runs_text(tc)[0].split()).replace("|", "\\|") for tc in tr.iterchildren(f"{_W}tc")]
        rows.append(cells)
    if not rows:
        return ""
    width = max(len(r) for r in rows)
    rows = [r + [""] * (width - len(r)) for r in rows]
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + " --- |" * width]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows[1:]])


def _footnotes(doc: Any) -> dict[str, str]:
    """Footnote id -> text, from word/footnotes.xml (python-docx has no API for them)."""
    from lxml import etree

    for rel in doc.part.rels.values():
        if rel.reltype.endswith("/footnotes") and not rel.is_external:
            root = etree.fromstring(rel.target_part.blob)
            out = {}
            for fn in root.iterchildren(f"{_W}footnote"):
                if fn.get(f"{_W}type") in ("separator", "continuationSeparator", "continuationNotice"):
                    continue
                text = " ".join(" ".join(_runs_text(p)[0].split()) for p in fn.iter(f"{_W}p")).strip()
                if text:
                    out[fn.get(f"{_W}id", "")] = text
            return out
    return {}


class _Numbering:
    """List items as "- " or "1. " by their numbering format, indented two spaces per level."""

    def __init__(self, doc: Any) -> None:
        self.formats: dict[tuple[str, int], str] = {}
        self.counts: dict[tuple[str, int], int] = {}
        try:
            root = doc.part.numbering_part.element
        except (NotImplementedError, KeyError, AttributeError):
            return
        abstract = {
            a.get(f"{_W}abstractNumId"): {
                int(lvl.get(f"{_W}ilvl", "0")): (lvl.find(f"{_W}numFmt").get(f"{_W}val", "bullet")
                                                 if lvl.find(f"{_W}numFmt") is not None else "bullet")
                for lvl in a.iterchildren(f"{_W}lvl")
            }
            for a in root.iterchildren(f"{_W}abstractNum")
        }  # fmt: skip
        for num in root.iterchildren(f"{_W}num"):
            ref = num.find(f"{_W}abstractNumId")
            levels = abstract.get(ref.get(f"{_W}val") if ref is not None else None, {})
            for ilvl, fmt in levels.items():
                self.formats[(num.get(f"{_W}numId", ""), ilvl)] = fmt

    def prefix(self, p: Any, style: Any) -> str:
        """The marker a list paragraph gets ("" for any other paragraph); a list style numbers too."""
        num_pr = p.find(f"{_W}pPr/{_W}numPr")
        if num_pr is None and style is not None:
            num_pr = style.find(f"{_W}pPr/{_W}numPr")
        if num_pr is None:
            return ""
        num_id_el, ilvl_el = num_pr.find(f"{_W}numId"), num_pr.find(f"{_W}ilvl")
        num_id = num_id_el.get(f"{_W}val", "") if num_id_el is not None else ""
        ilvl = int(ilvl_el.get(f"{_W}val", "0")) if ilvl_el is not None else 0
        if num_id == "0":
            return ""  # numbering switched off
        key = (num_id, ilvl)
        for deeper in [k for k in self.counts if k[0] == num_id and k[1] > ilvl]:
            del self.counts[deeper]  # a new item restarts the numbering below it
        self.counts[key] = self.counts.get(key, 0) + 1
        fmt = self.formats.get(key, "bullet")
        marker = "-" if fmt in ("bullet", "none", "") else f"{self.counts[key]}."
        return "  " * ilvl + marker + " "
