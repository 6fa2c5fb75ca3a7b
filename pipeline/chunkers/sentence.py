"""Whole sentences grouped up to the budget, with sentence overlap.

Sentences come from pysbd: rule-based (no model to download), 22 languages including de, zh and ja, and
it knows abbreviations ("Dr.", "z. B."), decimals ("3.50") and quotes. It runs offline and keeps the text
as is with `clean=False`; we still map its sentences back by searching forward from a cursor, so a quirk of
its output can only merge two sentences, never lose text or shift an offset. One repair on top: a
"sentence" that starts in lower case is joined to the one before (an abbreviation pysbd did not know,
such as German "Jh.").

pysbd is slow (about 0.1 MB/s: hundreds of regular expressions per call, several built per abbreviation), so
English text takes a fast path (`_regions`) that gives pysbd only the stretches where its rules decide:
pysbd cuts at every newline, and a full stop after a plain lower-case word that is no abbreviation,
followed by spaces and a capitalised word, outside quotes, brackets and dashes, is a sentence end for it
too; text between such cuts with no other sentence punctuation is one sentence, the rest goes to pysbd.
"""

from __future__ import annotations

import re
import sys
import types
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

import pysbd
import pysbd.languages

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.spans import Fits
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


#: Languages with the fast path (checked against pysbd on whole texts: bench corpora, golden tests).
FAST_LANGUAGES = frozenset({"en"})

#: What pysbd may cut at besides newlines and the clear full stops (list markers, ellipses, CJK stops);
#: not a decimal point, which it never cuts at.
_PUNCT = re.compile(r"[!?。．！？…•]|\.(?!\d)|(?<!\d)\.")
#: Full stops pysbd never cuts at (its rules turn them into a placeholder first): between two word
#: characters, before a digit, after a digit and before a non-space, after a lone capital (an initial),
#: and the last of "u.s." (but not of a.m. and p.m., which it cuts before a capital).
_NEVER_CUT = re.compile(r"(?<=\w)\.(?=\w)|\.(?=\d)|(?<=\d)\.(?=\S)|(?<=\s[A-Z])\.(?=\s)")
_MULTI_PERIOD = re.compile(r"\b[a-z](?:\.[a-z])+\.", re.I)
#: ... unless it puts them back before a sentence starter ("U.S. The", "I. The"; its own list).
_STARTER_AFTER = re.compile(
    r"\s(?:A|Being|Did|For|He|How|However|I|In|It|Millions|More|She|That|The|There|They|We|What|When|Where|"
    r"Who|Why)\s"
)
#: A full stop after a word that may be an abbreviation; and what follows one that pysbd keeps as is
#: (abbreviations are looked for line by line: nothing past a newline counts): prepositive ("Dr."),
#: before a number ("No."), any other.
_ABBR_STOP = re.compile(r"(?<![^\s])([A-Za-z]+)\.")
_KEEP_AFTER = (
    re.compile(r"\s|:\d"),
    re.compile(r"[^\S\n]\d|[^\S\n]+\("),
    re.compile(r"[.:\-?,]|[^\S\n](?:[a-z]|I\s|I'm|I'll|\d|\()"),
)
#: What pysbd may take as a sentence of its own at the start of a text (its sentence boundary rules).
_OPENERS = frozenset("'\"“(（「")
#: A full stop after a plain word (two letters or more) that ends a sentence for pysbd too when a word
#: follows, unless the word is an abbreviation; group 1 is the word, the match ends where the next
#: sentence starts.
_CLEAR_STOP = re.compile(
    r"(?:(?<![^\s])([A-Za-z]+[a-z]) ?[.?]|\)[.?]|(?<![^\s$])[\d,]*\d{3} ?[.?]) +(?=[A-Za-z][a-z])"
    r"|(?<=[A-Za-z0-9])\? +(?=[^\s'\"“‘])"
)
#: Where pysbd keeps sentence punctuation as is: its own between-punctuation rules (quotes, brackets,
#: dashes), each applied on its own as pysbd does.
_BP = pysbd.between_punctuation.BetweenPunctuation
_PROTECTED = [
    re.compile(getattr(_BP, name))
    for name in dir(_BP)
    if name.startswith(("BETWEEN_", "WORD_WITH_")) and not name.endswith("_2")
]
_QUOTES = re.compile("[\"'‘“«\\[(]|--")  # what any of them needs
#: pysbd cuts inside this before it splits the lines (`check_for_parens_between_quotes`)
_PARENS_IN_QUOTES = re.compile(r'["”]\s\(.*\)\s["“]', re.S)


_LI = pysbd.lists_item_replacer.ListItemReplacer


#: pysbd's kinds of list marker: (a quick test that none is there, its regular expression, None for numbers
#: or the alphabet of letters)
_LIST_KINDS = (
    (re.compile(r"(?<![^\s\-⁃])\d{1,2}\.[\s)]"), re.compile(_LI.NUMBERED_LIST_REGEX_1), None),
    (re.compile(r"\d\)\s"), re.compile(_LI.NUMBERED_LIST_PARENS_REGEX), None),
    *(
        (re.compile(quick), re.compile(rx), alphabet)
        for quick, rx in (
            # pysbd's own patterns, written with one look-behind each (the same matches, faster)
            (r"(?<![^\s])[a-z]\.", r"(?<![^\s])[a-z](?=\.)"),
            (r"[a-z]\)", r"(?<![^\s(])[a-z]+(?=\))"),
        )
        for alphabet in (_LI.LATIN_NUMERALS, _LI.ROMAN_NUMERALS)
    ),
)


def _lists_act(text: str) -> list[list[int]]:
    """For each kind of list marker whose pysbd rules would number items in text, where its markers are
    (start offsets, and the end of the last).

    pysbd decides from all markers of a kind together (an item next to its successor, letters next to
    letters, the first compared with the last), and then rewrites every marker of that value, so a stretch
    holding only some of them could be numbered differently. The conditions are pysbd's own.
    """
    out = []
    for quick, rx, alphabet in _LIST_KINDS:
        if quick.search(text) is None:
            continue
        found = [(m.start(), m.group(), m.end()) for m in rx.finditer(text)]
        if alphabet is None:
            nums = [int(x) for _, x, _ in found]
            act = any(
                (i + 1 < len(nums) and n + 1 == nums[i + 1])
                or (i > 0 and (n - 1 == nums[i - 1] or {n, nums[i - 1]} == {0, 9}))
                for i, n in enumerate(nums)
            )
        else:
            found = [f for f in found if f[1] in alphabet]
            idx = [alphabet.index(x) for _, x, _ in found]
            act = any(  # idx[i - 1] wraps round at 0, as in pysbd
                abs(idx[i - 1] - k) == 1 or (i + 1 < len(idx) and idx[i + 1] - k == 1)
                for i, k in enumerate(idx)
            )
        if act:
            out.append([p for p, _, _ in found] + [found[-1][2]])
    return out


@lru_cache(maxsize=32)
def _abbreviations(lang: str) -> frozenset[str]:
    abbr = pysbd.languages.Language.get_language_code(lang).Abbreviation
    return frozenset(
        a.strip().lower()
        for a in (*abbr.ABBREVIATIONS, *abbr.PREPOSITIVE_ABBREVIATIONS, *abbr.NUMBER_ABBREVIATIONS)
    )


@lru_cache(maxsize=32)
def _abbreviation_kinds(lang: str) -> dict[str, int]:
    """Abbreviation -> which of `_KEEP_AFTER` pysbd applies to its full stop (its order: prepositive first)."""
    abbr = pysbd.languages.Language.get_language_code(lang).Abbreviation
    kinds: dict[str, int] = {}
    for k, words in enumerate(
        (abbr.PREPOSITIVE_ABBREVIATIONS, abbr.NUMBER_ABBREVIATIONS, abbr.ABBREVIATIONS)
    ):
        for w in words:
            kinds.setdefault(w.strip().lower(), k)
    return kinds


def _pysbd(text: str, lang: str) -> list[str]:
    # a fresh segmenter per call: it is cheap (microseconds) and pysbd keeps per-text state on it
    return pysbd.Segmenter(language=lang, clean=False).segment(text)


def _regions(text: str, a: int, b: int, lang: str) -> Iterator[tuple[int, int, bool]]:
    """Consecutive (start, end, ask pysbd) stretches of [a, b) that pysbd would cut the same on their own."""
    if lang not in FAST_LANGUAGES:
        yield a, b, True
        return
    # cut after newlines and at clear full stops, never inside what pysbd protects: quotes and brackets
    # within a line (pysbd looks for them line by line), parentheses between quotes across the text;
    # where list rules act, the text as a whole
    whole = text[a:b]
    blocked = [m.span() for m in _PARENS_IN_QUOTES.finditer(text, a, b)] if '"' in whole else []
    lists = _lists_act(whole)  # all markers of such a kind stay in one stretch
    blocked += [(a + found[0], a + found[-1]) for found in lists]
    abbr = _abbreviations(lang)
    cuts: list[int] = []
    x = a
    while x < b:
        nl = text.find("\n", x, b)
        end = b if nl < 0 else nl + 1
        while end < b and text[end] == "\n":
            end += 1
        stops = [
            m.end() for m in _CLEAR_STOP.finditer(text, x, end) if (m.group(1) or "").lower() not in abbr
        ]
        if stops and _QUOTES.search(text, x, end):
            inside = [m.span() for rx in _PROTECTED for m in rx.finditer(text, x, end)]
            stops = [c for c in stops if not any(p < c < q for p, q in inside)]
        cuts += stops
        cuts.append(end)
        x = end
    if blocked:
        cuts = [c for c in cuts if not any(p < c < q for p, q in blocked)]
    out, x = [], a
    for c in [*cuts, b]:
        if a < c <= b and c > x:
            # one sentence for pysbd too unless sentence punctuation comes before its last character
            seg = text[x:c]
            lead, last = len(seg) - len(seg.lstrip()), x + len(seg.rstrip()) - 1
            ask = seg[lead : lead + 1] in _OPENERS or _ambiguous(text, x, last, lang)
            numbered = len([f for f in lists if x <= a + f[0] < c])  # kinds whose list is in this stretch
            if len(_lists_act(seg)) > numbered:
                yield a, b, True  # a stretch alone would number what the text does not: the text as a whole
                return
            ask = ask or numbered > 0
            out.append((x, c, ask))
            x = c
    yield from out


def _ambiguous(text: str, a: int, last: int, lang: str) -> bool:
    """Whether text[a:last] holds sentence punctuation that pysbd might cut at."""
    found = [m.start() for m in _PUNCT.finditer(text, a, last + 1) if m.start() < last]
    if not found:
        return False
    never = {m.start() for m in _NEVER_CUT.finditer(text, a, last + 1)}
    never.update(
        m.end() - 1 for m in _MULTI_PERIOD.finditer(text, a, last + 1) if m[0].lower() not in ("a.m.", "p.m.")
    )
    kinds = _abbreviation_kinds(lang)
    for m in _ABBR_STOP.finditer(text, a, last):
        k = kinds.get(m[1].lower())
        if k is not None and _KEEP_AFTER[k].match(text, m.end(), last + 1):
            never.add(m.end() - 1)
    return any(
        p not in never or (text[p - 1] in "SKUAIvV" and _STARTER_AFTER.match(text, p + 1)) for p in found
    )


def sentence_spans(text: str, a: int, b: int, *, language: str = "en") -> list[Span]:
    """Contiguous spans of [a, b), one per sentence; whitespace stays with the sentence before it."""
    lang = language if language in PYSBD_LANGUAGES else "en"
    starts = [a]
    cursor = a
    for x, y, ask in _regions(text, a, b, lang):
        # a stretch goes with the whitespace before it, as pysbd sees it in the whole text ("12." at the
        # very start of a text is a list number to it, after a newline not)
        for s in _pysbd(text[x - (x > a) : y], lang) if ask else (text[x:y],):
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
    bounds = [*starts, b]
    return [(x, y) for x, y in zip(bounds, bounds[1:], strict=False) if y > x]


@register
class SentenceChunker(Chunker):
    """Sentences packed up to the budget; a sentence over the budget is cut like recursive text."""

    kind = "sentence"

    def sentences(self, doc: Document, section: Section, fits: Fits) -> list[Span]:
        """Stripped sentence spans of a section, over-budget sentences already cut into pieces."""
        out: list[Span] = []
        for s, e in sentence_spans(
            doc.text, section.start, section.end, language=getattr(self.config, "language", "en")
        ):
            s, e = strip_span(doc.text, s, e)
            if e <= s:
                continue
            if fits(s, e):
                out.append((s, e))
            else:
                out.extend(strip_span(doc.text, x, y) for x, y in self.pieces_for(doc, section, s, e, fits))
        return [(s, e) for s, e in out if e > s]

    def split(self, doc: Document, section: Section) -> list[Span]:
        fits = self.fits_for(doc, section)
        return self.pack(
            doc, section, self.sentences(doc, section, fits), fits=fits, overlap_items=self.config.overlap
        )
