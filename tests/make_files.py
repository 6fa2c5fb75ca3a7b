"""Test inputs made from generated text: small PDFs (text, outline, encrypted, bomb), scans and .docx files.

The PDF writer is deliberately tiny (Helvetica, one text run per item, RC4-40 encryption): the suite needs
no PDF library beyond the one the pipeline reads with, and no file from outside the repository.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
import zlib

#: (x, y, font size, text) in PDF points, y up from the bottom of a 612 x 792 page.
Item = tuple[float, float, float, str]

_PAD = bytes.fromhex("28BF4E5E4E758A4164004E56FFFA01082E2E00B6D0683E802F0CA9FE6453697A")


def _rc4(key: bytes, data: bytes) -> bytes:
    s = list(range(256))
    j = 0
    for i in range(256):
        j = (j + s[i] + key[i % len(key)]) % 256
        s[i], s[j] = s[j], s[i]
    out = bytearray()
    i = j = 0
    for byte in data:
        i = (i + 1) % 256
        j = (j + s[i]) % 256
        s[i], s[j] = s[j], s[i]
        out.append(byte ^ s[(s[i] + s[j]) % 256])
    return bytes(out)


def _pdf_string(text: str) -> bytes:
    raw = text.encode("cp1252", errors="replace")
    return b"(" + raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)") + b")"


def text_pdf(
    pages: list[list[Item]],
    *,
    outline: list[tuple[int, str, int, float]] = (),  # (level 1.., title, page index, y)
    password: str | None = None,
    compress: bool = False,
) -> bytes:
    """A PDF with the given text items per page, an optional outline, optionally encrypted (RC4, 40 bit)."""
    objs: dict[int, bytes] = {}
    streams: dict[int, bytes] = {}
    n_pages = len(pages)
    page_ids = [4 + 2 * i for i in range(n_pages)]
    objs[3] = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"
    for pid, items in zip(page_ids, pages, strict=True):
        content = b"".join(
            b"BT /F1 %.1f Tf %.2f %.2f Td %s Tj ET\n" % (size, x, y, _pdf_string(text))
            for x, y, size, text in items
        )
        objs[pid] = (
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R >> >> "
            b"/Contents %d 0 R >>" % (pid + 1)
        )
        streams[pid + 1] = zlib.compress(content) if compress else content
    objs[2] = b"<< /Type /Pages /Kids [%s] /Count %d >>" % (
        b" ".join(b"%d 0 R" % p for p in page_ids),
        n_pages,
    )
    catalog = b"<< /Type /Catalog /Pages 2 0 R"
    if outline:
        catalog += b" /Outlines %d 0 R" % _outline(objs, outline, page_ids, first_id=4 + 2 * n_pages)
    objs[1] = catalog + b" >>"
    file_id = hashlib.md5(b"chunkyard-test").digest()
    key = None
    trailer_extra = b""
    if password is not None:
        assert not outline, "the test writer encrypts streams only"
        o = _rc4(hashlib.md5(_PAD).digest()[:5], (password.encode("latin-1") + _PAD)[:32])
        p = (-44).to_bytes(4, "little", signed=True)
        key = hashlib.md5((password.encode("latin-1") + _PAD)[:32] + o + p + file_id).digest()[:5]
        u = _rc4(key, _PAD)
        enc_id = max([*objs, *streams]) + 1
        objs[enc_id] = b"<< /Filter /Standard /V 1 /R 2 /O <%s> /U <%s> /P -44 >>" % (
            o.hex().encode(),
            u.hex().encode(),
        )
        trailer_extra = b" /Encrypt %d 0 R" % enc_id
    for num, data in streams.items():
        if key is not None:
            data = _rc4(hashlib.md5(key + num.to_bytes(3, "little") + b"\0\0").digest()[:10], data)
        flt = b" /Filter /FlateDecode" if compress else b""
        objs[num] = b"<< /Length %d%s >>\nstream\n%s\nendstream" % (len(data), flt, data)
    fid = file_id.hex().encode()
    return _write_pdf(objs, b" /ID [<%s> <%s>]%s" % (fid, fid, trailer_extra))


def _write_pdf(objs: dict[int, bytes], trailer_extra: bytes = b"") -> bytes:
    """The objects numbered as given, an xref table (gaps as free entries) and a trailer rooted at object 1."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = {}
    for num in sorted(objs):
        offsets[num] = out.tell()
        out.write(b"%d 0 obj\n%s\nendobj\n" % (num, objs[num]))
    xref = out.tell()
    size = max(objs) + 1
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % size)
    for num in range(1, size):
        out.write(b"%010d 00000 n \n" % offsets[num] if num in offsets else b"0000000000 65535 f \n")
    out.write(b"trailer\n<< /Size %d /Root 1 0 R%s >>\n" % (size, trailer_extra))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def _outline(
    objs: dict[int, bytes], items: list[tuple[int, str, int, float]], page_ids: list[int], *, first_id: int
) -> int:
    """Outline item objects (nested by level); returns the outline root's object number."""
    root = first_id
    ids = [first_id + 1 + i for i in range(len(items))]
    parent: list[int] = []
    parents: list[int] = []
    for level, *_ in items:
        del parent[level - 1 :]
        parents.append(parent[-1] if parent else -1)
        parent.append(len(parents) - 1)
    kids: dict[int, list[int]] = {}
    for i, p in enumerate(parents):
        kids.setdefault(p, []).append(i)
    for i, (_level, title, page, y) in enumerate(items):
        sib = kids[parents[i]]
        k = sib.index(i)
        d = b"<< /Title %s /Parent %d 0 R /Dest [%d 0 R /XYZ 0 %.1f 0]" % (
            _pdf_string(title),
            ids[parents[i]] if parents[i] >= 0 else root,
            page_ids[page],
            y,
        )
        if k > 0:
            d += b" /Prev %d 0 R" % ids[sib[k - 1]]
        if k + 1 < len(sib):
            d += b" /Next %d 0 R" % ids[sib[k + 1]]
        if i in kids:
            d += b" /First %d 0 R /Last %d 0 R /Count %d" % (ids[kids[i][0]], ids[kids[i][-1]], len(kids[i]))
        objs[ids[i]] = d + b" >>"
    top = kids[-1]
    objs[root] = b"<< /Type /Outlines /First %d 0 R /Last %d 0 R /Count %d >>" % (
        ids[top[0]],
        ids[top[-1]],
        len(top),
    )
    return root


def paragraph(text: str, *, x: float = 72, y: float = 700, size: float = 11, width: int = 80) -> list[Item]:
    """Text wrapped at `width` characters into lines 1.3 sizes apart, starting at y."""
    import textwrap

    return [(x, y - k * size * 1.3, size, line) for k, line in enumerate(textwrap.wrap(text, width))]


def scanned_pdf(lines_per_page: list[list[str]]) -> bytes:
    """Image-only pages: text drawn on a white bitmap with PIL and saved as PDF (no text layer)."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=36)
    images = []
    for lines in lines_per_page:
        img = Image.new("RGB", (1275, 1650), "white")  # US letter at 150 dpi
        draw = ImageDraw.Draw(img)
        for k, line in enumerate(lines):
            draw.text((120, 150 + k * 60), line, fill="black", font=font)
        images.append(img)
    buf = io.BytesIO()
    images[0].save(buf, "PDF", resolution=150, save_all=True, append_images=images[1:])
    return buf.getvalue()


def zip_of(files: dict[str, bytes]) -> bytes:
    """A zip archive holding the given files (a .docx that is really something else)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return buf.getvalue()


def image_pdf(width: int, height: int, *, layers: int = 1, text: str = "A page with a blank background.") -> bytes:
    """One page: a line of text over a white grayscale image XObject of width x height pixels, its bytes
    Flate-compressed `layers` times (/Filter [/FlateDecode ...]): a blank A4 scan at 300 dpi is 2480 x 3508."""
    pixels = b"\xff" * (width * height)
    for _ in range(layers):
        pixels = zlib.compress(pixels, 9)
    flt = b"/FlateDecode" if layers == 1 else b"[" + b" ".join([b"/FlateDecode"] * layers) + b"]"
    content = b"q 595 0 0 842 0 0 cm /Im1 Do Q BT /F1 12 Tf 72 760 Td %s Tj ET\n" % _pdf_string(text)
    objs = {
        1: b"<< /Type /Catalog /Pages 2 0 R >>",
        2: b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        3: b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Resources << /Font << /F1 4 0 R >> "
        b"/XObject << /Im1 5 0 R >> >> /Contents 6 0 R >>",
        4: b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        5: b"<< /Type /XObject /Subtype /Image /Width %d /Height %d /ColorSpace /DeviceGray /BitsPerComponent 8 "
        b"/Filter %s /Length %d >>\nstream\n%s\nendstream" % (width, height, flt, len(pixels), pixels),
        6: b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content),
    }
    return _write_pdf(objs)


def with_forged_member(base: bytes, name: str, *, real: int, declared: int, fill: bytes = b"\0") -> bytes:
    """`base` (a zip) with member `name` deflated to `real` bytes (its own bytes, then `fill` repeated; a new
    member when it has none) while its local and central headers both say it unzips to `declared` bytes: a
    zip bomb that lies about its size. Whitespace after the root element of word/document.xml is valid XML."""
    src = zipfile.ZipFile(io.BytesIO(base))
    head = src.read(name) if name in src.namelist() else b""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for info in src.infolist():
            if info.filename != name:
                zf.writestr(info, src.read(info))
        with zf.open(name, "w") as member:
            member.write(head)
            block = fill * ((1 << 20) // len(fill))
            for left in range(real - len(head), 0, -len(block)):
                member.write(block[: min(left, len(block))])
    data = bytearray(buf.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(data))) as zf:
        info = zf.getinfo(name)
        data[info.header_offset + 22 : info.header_offset + 26] = declared.to_bytes(4, "little")
        pos = zf.start_dir
    while data[pos : pos + 4] == b"PK\x01\x02":  # the central directory's entries
        n, m, k = (int.from_bytes(data[pos + i : pos + i + 2], "little") for i in (28, 30, 32))
        if data[pos + 46 : pos + 46 + n] == name.encode():
            data[pos + 24 : pos + 28] = declared.to_bytes(4, "little")
        pos += 46 + n + m + k
    return bytes(data)


def page_count_pdf(count: int, *, real_pages: int = 1) -> bytes:
    """A PDF whose page tree says /Count `count` but holds `real_pages` (0 or 1) pages: every other page
    PDFium is asked for is missing (a few hundred bytes that claimed thousands of broken pages)."""
    page = b"<</Type/Page/Parent 2 0 R/MediaBox[0 0 612 792]/Contents 4 0 R/Resources<</Font<</F1 5 0 R>>>>>>"
    stream = b"BT /F1 12 Tf 72 700 Td (The only real page of this file.) Tj ET"
    objs = [
        b"<</Type/Catalog/Pages 2 0 R>>",
        b"<</Type/Pages/Kids[" + (b"3 0 R" if real_pages else b"") + b"]/Count %d>>" % count,
        page,
        b"<</Length %d>>stream\n" % len(stream) + stream + b"\nendstream",
        b"<</Type/Font/Subtype/Type1/BaseFont/Helvetica>>",
    ]
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for i, body in enumerate(objs, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % i + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objs) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<</Size %d/Root 1 0 R>>\nstartxref\n%d\n%%%%EOF\n" % (len(objs) + 1, xref)
    return bytes(out)
