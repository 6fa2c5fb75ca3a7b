"""Plain text: sections from the headings plain text has, a chat log recognised as doc_type "chat".

Plain text marks its structure with lines, not markup: agreements number their clauses ("9. Governing Law.
This Agreement ...", "ARTICLE II", "Section 4.2 Term"), reports and papers put short capitalised lines above
their parts ("GOVERNING LAW", "Materials and Methods"), READMEs underline titles ("Usage\\n====="). Those
become headings (`headings`): their sections are the parents chunks hang from, and their titles the heading
path full-text search reads with each chunk. Not headings: sentences, "Label: value" lines, page headers
and footers (a line with a number that comes back); and a document whose candidate headings would cut it
into scraps (a numbered list of short lines) keeps one section, split later by size, as text without
headings does.
"""

from __future__ import annotations

import re
import statistics
from collections import Counter

from pipeline.model import Section
from pipeline.parse import Parsed, parser
from pipeline.parse.chat import looks_like_chat
from pipeline.parse.sections import Head, heading_sections

#: Clause numbers: 1 / 1. / 1.2 / 1.2.3, a capital letter or a Roman numeral with a period (A. / IV.).
_NUM = r"(?P<num>\d{1,3}(?:\.\d{1,3})*\.?|[A-Z]\.|[IVXL]{1,6}\.)"
#: Words that name a part of a document before its number (ARTICLE II, Section 4.2, Artikel 3, § 12,
#: Статья 5); rank 1 ranks above numbered clauses, rank 2 is numbered like them. English, German, Danish,
#: Norwegian, Swedish, Dutch, French, Spanish, Italian, Portuguese and Russian.
_KEYWORDS = {
    **dict.fromkeys(["article", "part", "chapter", "schedule", "exhibit", "appendix", "annex"], 1),
    **dict.fromkeys(["artikel", "teil", "kapitel", "anhang", "anlage", "del", "bilag", "bilaga", "vedlegg",
                     "hoofdstuk", "bijlage", "chapitre", "partie", "annexe", "titre", "artículo", "capítulo",
                     "parte", "anexo", "título", "articolo", "capitolo", "allegato", "artigo", "статья",
                     "глава", "часть", "раздел", "приложение"], 1),
    **dict.fromkeys(["section", "abschnitt", "afsnit", "avsnitt", "afdeling", "sección", "sezione", "seção",
                     "§"], 2),
}  # fmt: skip
_KEYWORD = re.compile(
    r"(?P<kw>" + "|".join(re.escape(k) for k in sorted(_KEYWORDS, key=len, reverse=True)) + r")\s*"
    r"(?P<knum>[IVXLC]{1,6}|\d{1,3}(?:\.\d{1,3})*[a-z]?|[A-Z])(?![\w.]\w)"
    r"[.:]?(?:\s*[-\u2013\u2014:.]?\s*(?P<title>\S.*))?$",
    re.I,
)
_ENGLISH = frozenset({"article", "part", "chapter", "schedule", "exhibit", "appendix", "annex", "section"})
#: Chinese and Japanese parts: 第一条 / 第3章 / 第二節 / 第1部, with or without a title after them.
_CJK_PART = re.compile(r"第[一二三四五六七八九十百千零〇两\d]{1,6}(?P<unit>[条條章节節款编編部篇])\s*(?P<title>.*)$")
_CJK_RANK = {"条": 2, "條": 2, "款": 2, "节": 2, "節": 2}
#: A numbered line that is a heading by itself ("1. DEFINITIONS", "2.3 Payment Terms:").
_NUMBERED = re.compile(_NUM + r"\s+(?P<title>\S.*?)[.:]?$")
#: A numbered paragraph that opens with its clause's title ("9. Governing Law. This Agreement ...").
_INLINE = re.compile(_NUM + r"\s+(?P<title>[A-Z][^.:;!?\n]{0,78}?)[.:]\s+\S")
_UNDERLINE = re.compile(r"(?P<ch>[=\-])(?P=ch){2,}\s*$")
#: Words a title leaves in lower case ("Limitation of Liability", "Terms and Conditions").
_SMALL = frozenset({"a", "an", "and", "as", "at", "but", "by", "for", "from", "in", "into", "nor", "of", "on",
                    "or", "per", "the", "to", "upon", "via", "vs", "with", "without", "under",
                    # German, Danish and Norwegian, Swedish, Dutch, French, Spanish and Italian, Russian
                    "und", "oder", "der", "die", "das", "des", "dem", "den", "von", "zu", "zur", "zum", "für",
                    "mit", "im", "am", "bei", "og", "eller", "af", "til", "med", "i", "på", "om", "och",
                    "en", "et", "het", "van", "voor", "ou", "du", "le", "la", "les", "aux",
                    "au", "y", "o", "de", "del", "el", "los", "las", "e", "di", "da", "della", "il",
                    "и", "или", "в", "во", "на", "для", "с", "по", "о", "об", "к", "от", "из"})  # fmt: skip
_WORD = re.compile(r"[^\W\d_][\w'\u2019-]*")
_DIGITS = re.compile(r"\d+")
#: Longest line read as a heading, in characters and in words; a numbered one in sentence case, in words.
MAX_CHARS, MAX_WORDS, SENTENCE_WORDS = 90, 12, 8
#: Headings must leave sections of this many characters (median) or none are used: a numbered list of
#: short lines is a list, not an outline.
MIN_SECTION_CHARS = 160


@parser("text", mime="text/plain", version=3)  # 2: headings (was one section); 3: in other languages
def parse_text(text: str, *, language: str | None, filename: str) -> Parsed:
    """Sections under the headings found (`headings`); a transcript is typed "chat" for the chat chunker."""
    if looks_like_chat(text):
        return Parsed(text, [Section(0, len(text))], doc_type="chat")
    title, heads = headings(text)
    if not heads:
        return Parsed(text, [Section(0, len(text))], title=title)
    return Parsed(text, heading_sections(text, heads, []), title=title)


def _titled(title: str) -> bool:
    """Whether a phrase reads as a title: capitalised words (small ones may stay lower case), or all capitals."""
    words = _WORD.findall(title)
    if not words or len(title.split()) > MAX_WORDS:
        return False
    if any(c.isalpha() for c in title) and title.upper() == title:
        return sum(c.isalpha() for c in title) >= 3
    return words[0][0].isupper() and all(w[0].isupper() or w.lower() in _SMALL for w in words)


def _plain_title(line: str) -> bool:
    """An unnumbered line that reads as a title: capitalised, ending on a letter or digit, and not a label
    with a value ("Effective Date: May 1", "AUDIENCE: Booo", "Name: John Smith", "Source: ACME CORP, 10-K")
    unless it is a title with a subtitle: two words or more before the colon, a title with no number after."""
    if not (line[:1].isalnum() and line[-1:].isalnum() and _titled(line)):
        return False
    label, colon, tail = line.partition(": ")
    return not colon or (
        len(label.split()) >= 2
        and _titled(tail)
        and len(_WORD.findall(tail)) >= 2
        and not _DIGITS.search(tail)
    )


def _sentence_title(title: str) -> bool:
    """A short phrase in sentence case with no sentence's end: "Pictures and videos" (not "Partner shall
    use the data only for the following purposes:", a sentence leading into a list)."""
    return title[:1].isupper() and title[-1] not in ".,:;!?" and len(title.split()) <= SENTENCE_WORDS


def _candidates(text: str) -> list[tuple[int, str, str, int]]:
    """(offset, form, title, depth) of every line that opens a paragraph and reads as a heading.

    form: "keyword" (ARTICLE II), "numbered" (a numbered line or paragraph title; depth = levels of its
    number, "letter" for A. and IV.), "plain" (a capitalised line alone), "underline" (depth 1 for ===, 2
    for ---)."""
    lines = text.split("\n")
    out: list[tuple[int, str, str, int]] = []
    at, prev_blank = 0, True
    for n, line in enumerate(lines):
        start, s = at, line.strip()
        at += len(line) + 1
        nxt = lines[n + 1].strip() if n + 1 < len(lines) else ""
        if not s:
            prev_blank = True
            continue
        opens, prev_blank = prev_blank, False
        if nxt and _UNDERLINE.fullmatch(nxt) and len(s) <= MAX_CHARS and len(nxt) >= len(s) // 2:
            out.append((start + line.index(s), "underline", s, 1 if nxt[0] == "=" else 2))
            continue
        if not opens or _UNDERLINE.fullmatch(s):
            continue
        off = start + line.index(s)
        alone = not nxt  # the paragraph is this one line
        short = len(s) <= MAX_CHARS
        if short and (c := _CJK_PART.match(s)):
            out.append((off, "keyword", s, _CJK_RANK.get(c.group("unit"), 1)))
            continue
        if short and (m := _KEYWORD.match(s)):
            title = m.group("title") or ""
            if not title and nxt and len(nxt) <= MAX_CHARS and _titled(nxt):  # ARTICLE II / DEFINITIONS
                title = nxt
            kw = m.group("kw")
            # other languages write titles in sentence case ("Статья 5. Ответственность сторон")
            if not title or _titled(title.rstrip(".:")) or (kw.lower() not in _ENGLISH and _sentence_title(title)):
                out.append((off, "keyword", f"{kw} {m.group('knum')} {title}".strip(), _KEYWORDS[kw.lower()]))
            continue
        m = _NUMBERED.fullmatch(s) if alone and short else _INLINE.match(s)
        # a short numbered line alone is a heading in sentence case too ("2. Pictures and videos")
        if m and (
            _titled(m.group("title")) or alone and _sentence_title(s.removeprefix(m.group("num")).strip())
        ):
            num = m.group("num")
            depth = 0 if not num[0].isdigit() else num.rstrip(".").count(".") + 1
            out.append((off, "numbered", f"{num} {m.group('title')}", depth))
        elif alone and short and _plain_title(s.rstrip(":")):
            out.append((off, "plain", s.rstrip(":"), 1))
    return out


#: Kinds of heading from the top: ARTICLE-like lines, lines underlined with === and capitalised lines, lines
#: underlined with ---, letter and Roman clauses, "Section N" lines, numbered clauses (1.2 a level under 1).
_RANKS = (("keyword", 1), ("underline", 1), ("plain", 1), ("underline", 2), ("numbered", 0), ("keyword", 2),
          ("numbered", 1))  # fmt: skip


def _kind(form: str, depth: int) -> tuple[str, int]:
    """A candidate's rank key (`_RANKS`): numbered clauses rank by letter (0) or number (1), not depth."""
    return form, depth if form in ("keyword", "underline") else min(depth, 1)


def headings(text: str) -> tuple[str, list[Head]]:
    """The document's title (a heading line that opens it, else "") and its headings as `Head`s.

    Levels: ARTICLE / PART and the like, then letter or Roman clause numbers, then 1, 1.2, 1.2.3; a
    capitalised line alone or an underlined one is a level of its own above numbered clauses. A title
    line sits above everything."""
    found = _candidates(text)
    # a line with a number that comes back, the number aside ("ACME Terms | Page 7") is a page's header or
    # footer, not a heading (a title line found again without a number may be the same clause of another
    # agreement in the same file)
    furniture = Counter(_DIGITS.sub("#", name) for _, form, name, _ in found if form == "plain")
    found = [
        f
        for f in found
        if not (f[1] == "plain" and _DIGITS.search(f[2]) and furniture[_DIGITS.sub("#", f[2])] > 1)
    ]
    if not found:
        return "", []
    title = ""
    if found[0][0] == len(text) - len(text.lstrip()) and found[0][1] in ("plain", "underline"):
        title = found[0][2]
    own: list[Head] = [(found[0][0], 1, title)] if title else []  # the title line ranks above all others
    rest = found[len(own) :]
    present = [k for k in _RANKS if k in {_kind(form, depth) for _, form, _, depth in rest}]
    body: list[Head] = []
    for off, form, name, depth in rest:
        nested = depth - 1 if form == "numbered" and depth > 1 else 0  # 1.2 one level under 1
        body.append((off, min(6, len(own) + present.index(_kind(form, depth)) + 1 + nested), name))
    if len(body) < 2:
        return title, own
    # what the headings hold: the text of each one that no deeper heading follows at once (ARTICLE II
    # directly above 2.1 holds its clauses, not the line between them)
    after = [*body[1:], (len(text), 0, "")]
    leaves = [nxt[0] - h[0] for h, nxt in zip(body, after, strict=True) if nxt[1] <= h[1]]
    if statistics.median(leaves) < MIN_SECTION_CHARS:
        return title, own
    return title, own + body
