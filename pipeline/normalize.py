"""Decode bytes, clean the text, and parse it into a section tree (the parents chunks hang from).

The parsers, one per document type, live in `pipeline.parse`; this module is the stage around them.
"""

from __future__ import annotations

import codecs
import re
import unicodedata
from collections import Counter

from pipeline.errors import InputError, SkipFile
from pipeline.model import Document, Section, sha256, strip_span
from pipeline.parse import is_binary, parse
from pipeline.parse.sections import link_parents, split_large_sections
from pipeline.sources import SourceFile, shown

# --------------------------------------------------------------------------------------------- decode

_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
]


def decode(data: bytes, uri: str) -> tuple[str, list[str]]:
    """Bytes to str: BOM, then UTF-16 without one, then strict UTF-8, then a detected encoding with a
    recorded warning."""
    warnings: list[str] = []
    for bom, enc in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(enc), warnings
            except UnicodeDecodeError as exc:
                raise InputError(
                    uri, f"has a {enc} byte-order mark but is not valid {enc} ({exc.reason})"
                ) from exc
    if (found := _utf16_without_bom(data)) is not None:
        enc, text = found
        warnings.append(
            f"no byte-order mark; decoded as {enc.upper()} (NUL bytes on one side of each pair only) — "
            "re-save the file as UTF-8 to silence this"
        )
        return text, warnings
    if _looks_binary(data):
        raise InputError(uri, "looks like a binary file (NUL bytes or mostly control bytes), not text")
    try:
        return data.decode("utf-8"), warnings
    except UnicodeDecodeError as exc:
        bad = f"invalid UTF-8 at byte {exc.start} (0x{data[exc.start]:02x})"
    text = data.decode("utf-8", errors="replace")
    n_bad = text.count("\ufffd") - data.count(b"\xef\xbf\xbd")
    n_multi = sum(1 for ch in text if ord(ch) > 127) - text.count("\ufffd")
    if n_multi >= n_bad and n_bad <= max(3, len(data) // 1000):
        # UTF-8 with a few stray bytes: decoding it all as a legacy code page would garble every
        # correct accented letter ("RÃ©sumÃ©") to save a few wrong ones
        more = f" and {n_bad - 1} more" if n_bad > 1 else ""
        warnings.append(
            f"{bad}{more}; decoded as UTF-8 with U+FFFD for the bad bytes — fix them to silence this"
        )
        return text, warnings
    enc = legacy_encoding(data)
    try:
        text = data.decode(enc)
    except (UnicodeDecodeError, LookupError):
        enc, text = "latin-1", data.decode("latin-1")
    warnings.append(f"{bad}; decoded as {enc} — re-save the file as UTF-8 to silence this")
    return text, warnings


#: Among code pages the detector finds equally good: Western European first (the likeliest for text whose
#: language it cannot tell), then Central European before rarer ones such as Nordic iso8859_10.
_WESTERN = ("cp1252", "latin_1", "iso8859_15")
_CENTRAL = ("iso8859_2", "cp1250")


def legacy_encoding(data: bytes) -> str:
    """The 8-bit encoding of non-UTF-8 text: charset-normalizer's pick, but cp1252 among equals.

    On short texts the detector ranks Central European code pages first for plain French or German
    ("è" read as "č"); when candidates tie, or no language was recognised, cp1252 wins if it decodes.
    """
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data))
    if not matches:
        return "cp1252" if _decodes(data, "cp1252") else "latin-1"
    best = matches[0]
    tied = {
        m.encoding for m in matches if m.chaos <= best.chaos + 0.01 and m.coherence >= best.coherence - 0.01
    }
    for enc in _WESTERN:
        if enc in tied and _decodes(data, enc):
            return enc
    if best.language == "Unknown" and _decodes(data, "cp1252"):
        return "cp1252"
    return next((enc for enc in _CENTRAL if enc in tied and _decodes(data, enc)), best.encoding)


def _decodes(data: bytes, enc: str) -> bool:
    try:
        data.decode(enc)
    except UnicodeDecodeError:
        return False
    return True


def _utf16_without_bom(data: bytes) -> tuple[str, str] | None:
    """(codec, text) of UTF-16 text saved without a byte-order mark, else None.

    Text in UTF-16 has a NUL as the high byte of every ASCII character (spaces, newlines, digits, Latin
    letters): Latin text has NULs on one side (odd bytes for little-endian, even for big-endian) at nearly
    every code unit and almost never on the other, and a strict decode must give mostly printable text.
    Text mostly of other letters (CJK, Cyrillic, Greek, ...) has fewer NULs, from its spaces and newlines;
    they must be at least twice as frequent on the high side as on the low one (text read in the wrong
    byte order has them the other way round), and the printable text mostly letters of one script
    (`_one_script`). UTF-8 and 8-bit or double-byte legacy text have no NUL at all; binary data fails the
    decode, the printable share or the letters. A file of such letters under 16 characters, or without a
    single ASCII character (not even a newline), is not recognised.
    """
    head = data[:8192]
    if len(data) % 2 or len(head) < 4:
        return None
    even, odd = head[0::2], head[1::2]
    nul_even, nul_odd = even.count(0) / len(even), odd.count(0) / len(odd)
    for enc, high, low in (("utf-16-le", nul_odd, nul_even), ("utf-16-be", nul_even, nul_odd)):
        latin = high >= 0.25 and low <= 0.02
        if not latin and not (2 * low < high and len(data) >= 32):
            continue
        try:
            text = data.decode(enc)
        except UnicodeDecodeError:
            continue
        sample = text[:4096]
        printable = sum(1 for ch in sample if ch.isprintable() or ch in "\t\n\r\f")
        if printable >= 0.95 * len(sample) and (latin or _one_script(sample)):
            return enc, text
    return None


#: Scripts written together, counted as one (the first word of a letter's Unicode name otherwise). Hangul
#: stays apart: with Han it would cover 60% of all code units, so random bytes would read as one script.
_SCRIPT_OF = {"HIRAGANA": "CJK", "KATAKANA": "CJK", "HALFWIDTH": "CJK", "FULLWIDTH": "CJK"}


def _one_script(sample: str) -> bool:
    """An ASCII space or line break (what text has, and random code units almost never are), at least
    half of the other characters letters, and 80% of the letters of one script (Han and kana count as
    one)."""
    if not any(ch in " \t\n\r" for ch in sample):
        return False
    chars = [ch for ch in sample if not ch.isspace()]
    letters = [ch for ch in chars if ch.isalpha()]
    if not letters or len(letters) < 0.5 * len(chars):
        return False
    scripts = Counter(_script(ch) for ch in letters)
    return scripts.most_common(1)[0][1] >= 0.8 * len(letters)


def _script(letter: str) -> str:
    first = unicodedata.name(letter, "?").split(" ", 1)[0]
    return _SCRIPT_OF.get(first, first)


def _looks_binary(data: bytes) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return True
    if not head:
        return False
    ctrl = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return ctrl / len(head) > 0.1


# ---------------------------------------------------------------------------------------------- clean

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\u200b\u200e\u200f\u2060\ufeff]")
_LINE_SEP = re.compile(r"\r\n?|[\u2028\u2029\x85\x0c]")


def clean(text: str) -> str:
    """NFC, '\\n' newlines, no control or zero-width characters, tabs and text kept otherwise."""
    text = unicodedata.normalize("NFC", text)
    text = _LINE_SEP.sub("\n", text)
    return _CONTROL.sub("", text)


# --------------------------------------------------------------------------------------------- parse


def normalize(src: SourceFile, data: bytes, *, section_tokens: int = 1024) -> Document:
    """The whole stage: decode, clean, parse to sections; InputError or SkipFile for bad input."""
    if not data:
        raise SkipFile(src.uri, "empty file (0 bytes), nothing to index")
    if is_binary(src.doc_type):  # PDF, Word: the parser reads the bytes and returns clean text
        try:
            parsed = parse(src.doc_type, data, language=src.language, filename=shown(src.path.name))
        except InputError as exc:  # the parser knows the file name only: say which file, once
            raise InputError(src.uri, exc.reason, stage="normalize") from exc
        except SkipFile as exc:
            raise SkipFile(src.uri, exc.reason) from exc
        warnings = list(parsed.warnings)
    else:
        text, warnings = decode(data, src.uri)
        parsed = parse(src.doc_type, clean(text), language=src.language, filename=shown(src.path.name))
    text = parsed.text
    if not text.strip():
        raise SkipFile(src.uri, "no text left after cleaning (whitespace or markup only)")
    sections = split_large_sections(text, parsed.sections, max_tokens=section_tokens)
    sections = [_strip_section(text, s) for s in sections if text[s.start : s.end].strip()]
    link_parents(sections)
    return Document(
        uri=src.uri,
        doc_type=parsed.doc_type,
        text=text,
        sections=sections,
        language=src.language,
        title=parsed.title,  # from the document itself (H1, <title>); a file name says too little to embed
        warnings=warnings,
        raw_hash=sha256(data),
        mime=parsed.mime,
        pages=parsed.pages,
        ocr_pages=parsed.ocr_pages,
        metadata=parsed.metadata,
    )


def _strip_section(text: str, s: Section) -> Section:
    """Sections span their content without surrounding whitespace: identity survives reflowing gaps."""
    s.start, s.end = strip_span(text, s.start, s.end)
    return s
