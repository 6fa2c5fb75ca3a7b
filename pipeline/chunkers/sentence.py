"""Whole sentences grouped up to the budget, with sentence overlap.

English, and any language pysbd does not know, is split by rules of our own: two compiled regular
expressions find the candidates, a few checks decide (about 20 MB/s on the Chroma corpora; pysbd ran at
0.1-0.2 MB/s there). A sentence ends after sentence punctuation (. ! ? … and the CJK 。！？, which need
no space after them), any closing quotes or brackets, and whitespace (or an escaped line break, "\\n", in
dumped JSON), unless the next sentence would start in lower case. A full stop ends no sentence after

- a title or other prepositive abbreviation ("Dr. Smith", "cf. Smith"); a number abbreviation or any other
  abbreviation before a number or a bracket ("No. 5", "Jan. 5", "pp. 12", "et al. (2003)"). The lists are
  pysbd's English data and a few more (`_EXTRA_ABBREVIATIONS`). Other abbreviations before a capital do end
  a sentence ("etc. The"), as for pysbd;
- an initial ("J. Smith") or a multi-period abbreviation ("U.S.", "Ph.D.", "a.m."), unless one of pysbd's
  sentence starters follows ("U.S. The", "vitamin C. It");
- a list marker at the start of a line or sentence ("1. The", "b. Then", "IV. Results"), or a number after
  a comma, semicolon or colon ("steps: 1. Open it, 2. Save it");
- inside brackets or double quotes on one line, up to 250 characters ('"Stop. Now." and left', "(see
  Fig. 2. It shows)");

and decimals ("3.50") never match, having no space after the point. Every line break ends a sentence,
unless the next line starts in lower case (a wrapped sentence): pysbd cut at every line break, and
chunkyard joined a sentence that starts in lower case to the one before. `bench/experiments/sentences_vs_pysbd.py`
counts how far these boundaries agree with pysbd's and shows where they differ.

Other languages go to pysbd (rule-based, offline, 22 languages including de, zh and ja; it knows "z. B.",
"Jh." and "3,50") over the whole stretch, with `clean=False`; its sentences are mapped back by searching
forward from a cursor, so a quirk of its output can only merge two sentences, never lose text or shift an
offset, and a "sentence" that starts in lower case is joined to the one before (an abbreviation pysbd did
not know, such as German "Jh.").

Either way the spans are contiguous and cover the stretch exactly; whitespace stays with the sentence
before it.
"""

from __future__ import annotations

import re
import sys
import types
from bisect import bisect_right
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import pysbd
import pysbd.languages

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.pack import pack
from pipeline.chunkers.spans import Fits, recursive_spans
from pipeline.chunkers.view import SectionView
from pipeline.config import DEFAULT_SEPARATORS
from pipeline.model import Document, Section, Span, strip_span

#: pysbd's languages; anything else falls back to English rules (which also cut at 。！？).
PYSBD_LANGUAGES = frozenset(pysbd.languages.LANGUAGE_CODES)


@lru_cache(maxsize=8192)
def _compiled(pattern: Any, flags: int) -> re.Pattern:
    return pattern if isinstance(pattern, re.Pattern) else re.compile(pattern, flags)


class _CachedRe(types.ModuleType):
    """`re` for pysbd's modules, with a larger cache of compiled patterns: pysbd builds a few patterns per
    abbreviation on every call, which overflows `re`'s own cache (512), so most of its time went into
    compiling the same patterns again. The same functions, the same results."""

    def __getattr__(self, name: str) -> Any:
        return getattr(re, name)

    @staticmethod
    def compile(pattern: Any, flags: int = 0) -> re.Pattern:
        return _compiled(pattern, flags)

    @staticmethod
    def sub(pattern: Any, repl: Any, string: str, count: int = 0, flags: int = 0) -> str:
        return _compiled(pattern, flags).sub(repl, string, count)

    @staticmethod
    def subn(pattern: Any, repl: Any, string: str, count: int = 0, flags: int = 0) -> tuple[str, int]:
        return _compiled(pattern, flags).subn(repl, string, count)

    @staticmethod
    def findall(pattern: Any, string: str, flags: int = 0) -> list[Any]:
        return _compiled(pattern, flags).findall(string)

    @staticmethod
    def finditer(pattern: Any, string: str, flags: int = 0) -> Iterator[re.Match]:
        return _compiled(pattern, flags).finditer(string)

    @staticmethod
    def search(pattern: Any, string: str, flags: int = 0) -> re.Match | None:
        return _compiled(pattern, flags).search(string)

    @staticmethod
    def match(pattern: Any, string: str, flags: int = 0) -> re.Match | None:
        return _compiled(pattern, flags).match(string)

    @staticmethod
    def fullmatch(pattern: Any, string: str, flags: int = 0) -> re.Match | None:
        return _compiled(pattern, flags).fullmatch(string)

    @staticmethod
    def split(pattern: Any, string: str, maxsplit: int = 0, flags: int = 0) -> list[Any]:
        return _compiled(pattern, flags).split(string, maxsplit)


_RE = _CachedRe("re")
for _name, _mod in list(sys.modules.items()):
    if _name.split(".")[0] == "pysbd" and getattr(_mod, "re", None) is re:
        _mod.re = _RE  # type: ignore[attr-defined]


#: Where a sentence may end: sentence punctuation, closing quotes and brackets, then whitespace or escaped
#: line breaks (a line break among them ends the sentence whatever came before); CJK sentence punctuation
#: needs no whitespace after it; a bare line break. The next sentence starts where the match ends, and the
#: punctuation runs from the match's start to group "close". Each pattern starts with one set of
#: characters and tells its branches apart by a look-behind: `re` then skips to candidates in C, 4x faster
#: than with a plain alternation.
_CUT = re.compile(
    r"[.!?…。！？\n](?:"
    r"(?<=[.!?…])[.!?…]*(?P<close>[\"'”’»)\]}]*)(?:\s|\\[nrt])+"
    r"|(?<=[。！？])[。！？]*[」』）”’\"')\]]*\s*"
    r"|(?<=\n)\s*)"
)
#: Where sentence punctuation is no sentence end: inside brackets or double quotes on one line, up to 250
#: characters. A quote opens at the start of a word. Longer stretches, and any with a backslash, are code or
#: data (a chat log's "...\\n...", a list in [...]), not an aside within a sentence.
_PROTECTED = re.compile(
    r'[(\["“](?:(?<=\()[^()\\\n]{0,250}\)|(?<=\[)[^\[\]\\\n]{0,250}\]'
    r'|(?<=")(?<![^\s(\[]")[^"\\\n]{0,250}"|(?<=“)[^“”\\\n]{0,250}”)'
)
#: What a word may start with before its full stop (opening quotes and brackets are not part of it).
_OPENERS = "\"'“‘«([{"
#: Two or more letter groups joined by full stops: "U.S", "e.g", "Ph.D", "a.m" (the last stop not included).
_MULTI_PERIOD = re.compile(r"(?:[A-Za-z]{1,3}\.)+[A-Za-z]{1,3}")
#: A list marker: a number, a letter or a Roman numeral.
_LIST_MARKER = re.compile(r"\d{1,3}|[A-Za-z]|[ivxlcIVXLC]{1,6}")
#: The first word of the next sentence.
_NEXT_WORD = re.compile(r"[\"'“‘(]*([A-Za-z]+)")
#: pysbd's sentence starters: a capitalised word that starts a sentence even after an initial ("vitamin C.
#: The") or a multi-period abbreviation ("the U.S. The").
_STARTERS = frozenset({
    "A", "Being", "Did", "For", "He", "How", "However", "I", "In", "It", "Millions", "More", "She", "That",
    "The", "There", "They", "We", "What", "When", "Where", "Who", "Why",
})  # fmt: skip


#: English abbreviations pysbd lacks, mostly of references in technical text ("Vol. 2", "Eq. 3", "ca. 500"):
#: prepositive ones and others (which keep their full stop before a number or a bracket).
_EXTRA_ABBREVIATIONS = (
    frozenset({"cf"}),
    frozenset({"approx", "ca", "ch", "chap", "eq", "eqs", "figs", "sect", "tab", "vol", "vols"}),
)


@lru_cache(maxsize=1)
def _abbreviations() -> tuple[frozenset[str], frozenset[str]]:
    """English abbreviations, lower case without their full stop: (prepositive, all): pysbd's and ours."""
    abbr = pysbd.languages.Language.get_language_code("en").Abbreviation

    def norm(words: list[str]) -> frozenset[str]:
        return frozenset(w.strip().lower().rstrip(".") for w in words)

    pre = norm(abbr.PREPOSITIVE_ABBREVIATIONS) | _EXTRA_ABBREVIATIONS[0]
    every = norm(abbr.ABBREVIATIONS) | norm(abbr.NUMBER_ABBREVIATIONS) | _EXTRA_ABBREVIATIONS[1]
    return pre, every | pre


def _full_stop_ends(text: str, a: int, sent: int, stop: int, start: int) -> bool:
    """Whether the full stop at `stop` ends the sentence from `sent` on, the next one starting at `start`
    (not in lower case)."""
    tail = text[max(a, stop - 24) : stop].rsplit(None, 1)
    word = tail[-1].lstrip(_OPENERS) if tail else ""
    if not word:
        return True
    if _LIST_MARKER.fullmatch(word):
        w0 = stop - len(word)
        line = max(a, text.rfind("\n", a, stop) + 1)
        if not text[max(line, sent) : w0].strip():  # "1. The first step" at the start of a line or sentence
            return False
        if word.isdigit() and text[max(a, w0 - 3) : w0].rstrip().endswith((",", ";", ":")):
            return False  # an inline list: "steps: 1. Open it, 2. Save it"
    pre, every = _abbreviations()
    low = word.lower()
    if low in pre:
        return False
    nxt = text[start]
    if (nxt.isdigit() or nxt == "(") and low in every:
        return False
    if (len(word) == 1 and word.isupper()) or _MULTI_PERIOD.fullmatch(word):
        m = _NEXT_WORD.match(text, start)  # "L. K. A. Jayasinghe": "A." is one more initial
        return m is not None and m[1] in _STARTERS and text[m.end() : m.end() + 1] != "."
    return True


def _english_starts(text: str, a: int, b: int) -> list[int]:
    """Where the sentences of [a, b) start, by the English rules of the module docstring (a first)."""
    starts = [a]
    protected: list[tuple[int, int]] | None = None
    for m in _CUT.finditer(text, a, b):
        start = m.end()
        if start >= b or text[start].islower():
            continue
        stop, close = m.start(), m.start("close")
        if close >= 0 and "\n" not in m[0]:  # sentence punctuation and spaces: does it end a sentence?
            if (
                close == stop + 1
                and text[stop] == "."
                and not _full_stop_ends(text, a, starts[-1], stop, start)
            ):
                continue
            if protected is None:
                protected = [x.span() for x in _PROTECTED.finditer(text, a, b)]
            k = bisect_right(protected, (stop, b)) - 1  # the last bracket or quote opened before the stop
            if k >= 0 and protected[k][1] > m.end("close"):
                continue
        if start > starts[-1]:
            starts.append(start)
    return starts


def _pysbd(text: str, lang: str) -> list[str]:
    # a fresh segmenter per call: it is cheap (microseconds) and pysbd keeps per-text state on it
    return pysbd.Segmenter(language=lang, clean=False).segment(text)


def _pysbd_starts(text: str, a: int, b: int, lang: str) -> list[int]:
    """Where pysbd's sentences of [a, b) start (a first), a sentence in lower case joined to the one before."""
    starts = [a]
    cursor = a
    for s in _pysbd(text[a:b], lang):
        probe = s.strip()
        if not probe:
            continue
        pos = text.find(probe, cursor, b)
        if pos < 0:  # pysbd changed the text: keep this sentence with the one before
            continue
        # "12. Jh. | zurück": a sentence that starts in lower case continues an abbreviation before it
        if pos > starts[-1] and not probe[0].islower():
            starts.append(pos)
        cursor = pos + len(probe)
    return starts


def sentence_spans(text: str, a: int, b: int, *, language: str = "en") -> list[Span]:
    """Contiguous spans of [a, b), one per sentence; whitespace stays with the sentence before it."""
    lang = language if language in PYSBD_LANGUAGES else "en"
    starts = _english_starts(text, a, b) if lang == "en" else _pysbd_starts(text, a, b, lang)
    bounds = [*starts, b]
    return [(x, y) for x, y in zip(bounds, bounds[1:], strict=False) if y > x]


def section_language(config: object, section: Section) -> str:
    """The language a chunker splits sentences in: its config's `language`, or with 'auto' the section's."""
    lang = getattr(config, "language", "auto")
    return (section.lang or "en") if lang == "auto" else lang


@register
class SentenceChunker(Chunker):
    """Sentences packed up to the budget; a sentence over the budget is cut like recursive text."""

    kind = "sentence"

    def split(self, view: SectionView) -> list[Span]:
        fits = view.fits
        sents = self.sentences(view.doc, view.section, fits)
        return pack(view, sents, fits=fits, overlap_items=self.config.overlap)

    def sentences(self, doc: Document, section: Section, fits: Fits) -> list[Span]:
        """Stripped sentence spans of a section, over-budget sentences already cut into pieces (at the
        config's separators) that pass `fits`."""
        text = doc.text
        separators = getattr(self.config, "separators", DEFAULT_SEPARATORS)
        out: list[Span] = []
        for s, e in sentence_spans(
            text, section.start, section.end, language=section_language(self.config, section)
        ):
            s, e = strip_span(text, s, e)
            if e <= s:
                continue
            if fits(s, e):
                out.append((s, e))
            else:
                pieces = recursive_spans(text, s, e, fits, separators, section.atomic)
                out.extend(strip_span(text, x, y) for x, y in pieces)
        return [(s, e) for s, e in out if e > s]
