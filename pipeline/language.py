"""The natural language of a document and of each of its sections (ISO 639-1 codes), detected offline.

CLD2 (pycld2, Apache-2.0: Chromium's compact language detector) reads 80+ languages at megabytes per
second and loads nothing at start-up; it reports the top three languages of a text with their shares,
which tells a mixed document from a plain one. Compared on the multilingual dev set's 100 pages and their
1,987 paragraphs (docs/languages.md): every detector is right on every page; on paragraphs CLD2 is right on
95.5% (98.3% of the 94% it calls reliable, the only ones used for a section), py3langid on 99.8% but loads
its model for ~2 s in every process (the CLI, each parse worker) and runs 6x slower; lingua is as accurate
and 300x slower.

The language decides a section's full-text configuration (SQL `chunkyard_fts_config`: stemming and stop
words, CJK bigrams) and its sentence boundaries. A profile or the CLI may set it instead (`language`).
"""

from __future__ import annotations

import fnmatch
import re

from pipeline.model import Document

#: The language assumed when detection is not reliable (a short or mostly symbolic text): the default
#: model's, and what every collection stored before languages were detected was analysed as.
FALLBACK = "en"
#: A document whose second language has at least this share of its text is detected section by section.
MIXED_SHARE = 20
#: Codes CLD2 spells otherwise than ISO 639-1.
_ALIASES = {"iw": "he", "jw": "jv", "zh-Hant": "zh", "zh-Hans": "zh", "nb": "no"}
_LETTER = re.compile(r"[^\W\d_]")
_CODE = re.compile(r"^[a-z]{2,3}$")
#: What is not prose in any language: fenced and inline code, URLs, markup tags. A page of a translated
#: manual is often mostly English code; its language is the language of its sentences.
_NOT_PROSE = re.compile(
    r"^[ \t]*(```|~~~)[^\n]*\n.*?(^[ \t]*\1[ \t]*$|\Z)|`[^`\n]*`|https?://\S+|<[^>\n]{1,200}>", re.M | re.S
)
#: Prose shorter than this (characters) is too little to tell a language by.
MIN_PROSE = 40


def prose(text: str) -> str:
    """The text without code, URLs and tags: what its language is detected from."""
    return _NOT_PROSE.sub(" ", text)


def detect(text: str) -> tuple[str, bool, list[tuple[str, int]]]:
    """(language, reliable, [(language, percent of the prose), ...]) of a text's prose; ('', True, []) when
    it has no letters, (FALLBACK, False, []) when there is too little prose to tell."""
    if not _LETTER.search(text):
        return "", True, []
    words = prose(text)
    if sum(1 for _ in _LETTER.finditer(words)) < MIN_PROSE:
        return FALLBACK, False, []
    import pycld2

    try:
        reliable, _, details = pycld2.detect(words, bestEffort=True)
    except pycld2.error:  # bytes CLD2 will not read (it is strict about some code points)
        return FALLBACK, False, []
    shares = [(_code(code), percent) for _, code, percent, _ in details if code not in ("un", "xxx")]
    if not shares:
        return FALLBACK, False, []
    return shares[0][0], bool(reliable), shares


def _code(cld2: str) -> str:
    return _ALIASES.get(cld2, cld2.split("-")[0])


def check_code(value: str) -> str:
    """A language setting as given ('auto' or an ISO 639-1/639-3 code); ValueError for anything else."""
    v = value.strip().lower()
    if v == "auto" or _CODE.match(v):
        return v
    raise ValueError(f"language {value!r}: give 'auto' or an ISO 639-1 code such as 'de', 'da', 'zh'")


def assign(doc: Document, *, setting: str = "auto", by_path: dict[str, str] | None = None) -> None:
    """Set `doc.lang` and every section's `lang`: from the profile's per-path setting, else its `language`,
    else detected (section by section when the document mixes languages); code is analysed as English."""
    fixed = _configured(doc.uri, setting, by_path or {})
    if fixed is None and doc.doc_type == "code":
        fixed = FALLBACK
    if fixed is not None:
        doc.lang = fixed
        for s in doc.sections:
            s.lang = fixed
        return
    lang, _, shares = detect(doc.text)
    doc.lang = lang
    mixed = len(shares) > 1 and shares[1][1] >= MIXED_SHARE
    for s in doc.sections:
        s.lang = doc.lang
        if mixed:  # a section with too little prose of its own (a code block, a table) keeps the document's
            own, own_reliable, _ = detect(doc.text[s.start : s.end])
            if own_reliable and own:
                s.lang = own


def _configured(uri: str, setting: str, by_path: dict[str, str]) -> str | None:
    """The language the profile sets for this source (first matching glob on its path), else its default."""
    from pipeline.sources import uri_path

    path = str(uri_path(uri) or uri)
    for pattern, lang in by_path.items():
        if fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.rsplit("/", 1)[-1], pattern):
            return None if lang == "auto" else lang
    return None if setting == "auto" else setting
