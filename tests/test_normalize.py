"""Normalization: decoding, cleanup, and the section tree for each document type."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.errors import InputError, SkipFile
from pipeline.normalize import clean, decode, normalize
from pipeline.parse import parse, registered
from pipeline.sources import SUFFIXES, SourceFile, detect, source_uri


def _src(path: str) -> SourceFile:
    p = Path(path)
    kind = detect(p)
    assert kind is not None
    return SourceFile(p, source_uri(p), kind[0], kind[1])


def test_decode_boms_and_fallback():
    assert decode("héllo".encode("utf-8-sig"), "x") == ("héllo", [])
    assert decode("héllo".encode("utf-16"), "x")[0] == "héllo"
    text, warnings = decode("Grüße aus Köln".encode("cp1252"), "x")
    assert "Köln" in text
    assert warnings and "invalid UTF-8" in warnings[0] and "re-save" in warnings[0]


def test_binary_is_an_input_error():
    with pytest.raises(InputError, match="binary"):
        decode(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "x.md")


def test_clean_nfc_newlines_controls():
    assert clean("e\u0301\r\nb\rc\x00d\u200be\x0cf") == "\u00e9\nb\ncde\nf"


@given(st.text())
@settings(max_examples=200, deadline=None)
def test_clean_is_idempotent(s):
    assert clean(clean(s)) == clean(s)


def test_empty_file_is_skipped():
    with pytest.raises(SkipFile, match="empty"):
        normalize(_src("a.md"), b"")
    with pytest.raises(SkipFile, match="no text"):
        normalize(_src("a.txt"), b"  \n\t\n")


MD = b"""Intro line before any heading.

# Title

Lead paragraph.

## Install

```bash
# not a heading
pip install x
```

### GPU

Use CUDA.

| a | b |
| - | - |
| 1 | 2 |

## Use

Run it.
"""


def test_markdown_sections_follow_headings():
    doc = normalize(_src("guide.md"), MD)
    paths = [s.heading_path for s in doc.sections]
    assert paths == [(), ("Title",), ("Title", "Install"), ("Title", "Install", "GPU"), ("Title", "Use")]
    assert doc.title == "Title"
    install = doc.sections[2]
    assert "# not a heading" in doc.text[install.start : install.end]  # fences are not headings
    assert len(install.atomic) == 1 and doc.text[slice(*install.atomic[0])].startswith("```bash")
    gpu = doc.sections[3]
    assert doc.text[slice(*gpu.atomic[0])].startswith("| a | b |")
    # parents
    assert doc.sections[3].parent == 2 and doc.sections[2].parent == 1 and doc.sections[4].parent == 1
    # sections are stripped and ordered
    for s in doc.sections:
        body = doc.text[s.start : s.end]
        assert body == body.strip() and body


def test_html_drops_boilerplate_and_keeps_structure():
    html = b"""<!DOCTYPE html><html><head><title>T</title><script>var x=1;</script></head><body>
    <nav>Home | Docs</nav><div class="cookie-banner">We use cookies</div>
    <h1>Guide</h1><p>Hello <b>world</b>.</p><h2>Code</h2><pre>a = 1
b = 2</pre><table><tr><th>k</th><th>v</th></tr><tr><td>1</td><td>2</td></tr></table>
    <footer>(c) 2026</footer></body></html>"""
    doc = normalize(_src("p.html"), html)
    assert "Home" not in doc.text and "cookies" not in doc.text and "(c) 2026" not in doc.text
    assert "var x" not in doc.text and "html" not in doc.text.split("\n")[0]
    assert doc.title == "T"
    assert [s.heading_path for s in doc.sections] == [("Guide",), ("Guide", "Code")]
    assert "a = 1\nb = 2" in doc.text and "k | v\n1 | 2" in doc.text
    assert len(doc.sections[1].atomic) == 2


def test_python_sections_are_definitions():
    code = b'''"""Doc."""
import os

X = 1


# helper comment
def f(a):
    return a


@dataclass
class C:
    def m(self):
        return 1
'''
    doc = normalize(_src("m.py"), code)
    kinds = [(s.kind, s.heading_path[-1]) for s in doc.sections]
    assert kinds == [("module", "m.py"), ("definition", "def f(a)"), ("definition", "class C")]
    assert doc.text[doc.sections[1].start :].startswith("# helper comment")


def test_chat_log_detected():
    log = "\n".join(f"{'Alice' if i % 2 else 'Bob'}: message number {i}" for i in range(10)).encode()
    assert normalize(_src("talk.txt"), log).doc_type == "chat"
    assert normalize(_src("prose.txt"), b"Just prose.\n\nMore prose: with a colon.").doc_type == "text"


_CONTRACT = """MASTER SERVICES AGREEMENT

This Agreement is made between the Provider and the Customer, each a party, on the Effective Date.

ARTICLE I
DEFINITIONS

1.1 Services. "Services" means the hosted software the Provider makes available under an Order Form,
with its documentation, updates and support, as described in the Order Form and the service description.

1.2 Fees. "Fees" means the amounts the Customer pays for the Services, as each Order Form states them,
exclusive of taxes, which the Customer pays in addition unless it provides a valid exemption certificate.

ARTICLE II
TERM AND TERMINATION

2.1 Term. This Agreement begins on the Effective Date and continues for one year, renewing each year
after for another year unless either party gives notice of non-renewal at least sixty days before renewal.

2.2 Termination for Convenience. Either party may end this Agreement on thirty days' written notice to
the other; the Customer then pays the Fees for the Services delivered up to the day the termination takes effect.

9. Governing Law and Jurisdiction. This Agreement is governed by the laws of the State of Delaware, and
the courts there have exclusive jurisdiction over every dispute arising from it.
"""


def test_plain_text_headings_make_sections_with_a_heading_path():
    """A plain-text agreement: its title line, ARTICLE lines (title on the next line), and numbered clauses
    whose paragraph opens with their title become sections under a heading path, as markdown headings do."""
    doc = normalize(_src("msa.txt"), _CONTRACT.encode())
    assert doc.doc_type == "text" and doc.title == "MASTER SERVICES AGREEMENT"
    paths = [s.heading_path for s in doc.sections]
    top = "MASTER SERVICES AGREEMENT"
    assert paths == [
        (top,),
        (top, "ARTICLE I DEFINITIONS"),
        (top, "ARTICLE I DEFINITIONS", "1.1 Services"),
        (top, "ARTICLE I DEFINITIONS", "1.2 Fees"),
        (top, "ARTICLE II TERM AND TERMINATION"),
        (top, "ARTICLE II TERM AND TERMINATION", "2.1 Term"),
        (top, "ARTICLE II TERM AND TERMINATION", "2.2 Termination for Convenience"),
        (top, "ARTICLE II TERM AND TERMINATION", "9. Governing Law and Jurisdiction"),
    ]
    law = doc.sections[-1]
    assert doc.text[law.start : law.end].startswith("9. Governing Law and Jurisdiction. This Agreement")
    assert doc.sections[2].parent == 1 and doc.sections[1].parent == 0
    assert doc.text == _CONTRACT  # the text itself is untouched
    for s in doc.sections:
        body = doc.text[s.start : s.end]
        assert body == body.strip() and body


def test_plain_text_headings_in_other_languages():
    """Artikel, §, Abschnitt, Статья, Artículo and 第…条 open sections as ARTICLE and Section do; their titles
    may be in sentence case."""
    para = {
        "de": "Der Auftragnehmer erbringt die Leistungen nach den Bestimmungen dieses Vertrags mit Sorgfalt.",
        "ru": "Стороны несут ответственность в соответствии с действующим законодательством Российской Федерации.",
        "es": "Las partes responden conforme a la ley aplicable en cada caso y según lo pactado en este contrato.",
        "zh": "本合同自双方签字之日起生效，双方应当按照约定全面履行各自的义务，不得擅自变更或者解除合同。",
    }
    heads = [("Artikel 1 Gegenstand des Vertrags", "de"), ("§ 2 Vergütung", "de"),
             ("Abschnitt 3 Haftung und Gewährleistung", "de"), ("Статья 5. Ответственность сторон", "ru"),
             ("Artículo 7 Responsabilidad de las partes", "es"), ("第一条 总则", "zh")]  # fmt: skip
    text = "".join(f"{h}\n\n{(para[lang] + ' ') * 3}\n\n" for h, lang in heads)
    doc = normalize(_src("vertrag.txt"), text.encode())
    assert [s.heading_path[-1] for s in doc.sections] == [
        "Artikel 1 Gegenstand des Vertrags", "§ 2 Vergütung", "Abschnitt 3 Haftung und Gewährleistung",
        "Статья 5 Ответственность сторон", "Artículo 7 Responsabilidad de las partes", "第一条 总则",
    ]  # fmt: skip


def test_plain_text_underlined_and_capitalised_lines_are_headings_prose_and_lists_are_not():
    body = " ".join(["The tool reads every file in the folder and indexes it."] * 6)
    readme = f"Usage\n=====\n\n{body}\n\nInstall\n-------\n\n{body}\n\nMaterials and Methods\n\n{body}\n"
    doc = normalize(_src("readme.txt"), readme.encode())
    assert [s.heading_path[-1] for s in doc.sections] == ["Usage", "Install", "Materials and Methods"]
    assert doc.title == "Usage"
    # short numbered lines are a list, not an outline: sections would be scraps, so there are none
    todo = "\n\n".join(f"{i}. Buy item number {i}" for i in range(1, 9))
    assert [s.heading_path for s in normalize(_src("todo.txt"), todo.encode()).sections] == [()]
    # a speaker's label, a field with its value, a sentence: none is a heading
    prose = f"AUDIENCE: Booo\n\n{body}\n\nEffective Date: May 1, 2025\n\n{body}\n\nThank you\n\n{body}\n\nName: John Smith\n\n{body}\n"
    doc = normalize(_src("speech.txt"), prose.encode())
    assert [s.heading_path for s in doc.sections] == [()] and doc.title == ""
    # page footers of a converted document: numbered lines that come back, and a source line
    pages = "".join(
        f"{body}\n\nACME Terms | Page {n}\n\n{body}\n\nSource: ACME CORP, 10-K, 4/13/2015\n\n" for n in (1, 2)
    )
    doc = normalize(_src("converted.txt"), pages.encode())
    assert [s.heading_path for s in doc.sections] == [()]


def test_markdown_without_headings_reads_plain_texts_headings_and_never_inside_a_fence():
    """A .md file with no markdown heading is plain text saved as markdown: its plain-text headings make the
    sections; a heading-like line inside a code fence is not one. A file with markdown headings keeps them."""
    fenced = _CONTRACT.replace("ARTICLE II", "```\nARTICLE IX\nNOT A HEADING\n```\n\nARTICLE II")
    doc = normalize(_src("msa.md"), fenced.encode())
    titles = [s.heading_path[-1] for s in doc.sections]
    assert titles[:2] == ["MASTER SERVICES AGREEMENT", "ARTICLE I DEFINITIONS"] and doc.title == titles[0]
    assert "ARTICLE II TERM AND TERMINATION" in titles and not any("IX" in t for t in titles)
    doc = normalize(_src("msa.md"), ("# Real Heading\n\n" + _CONTRACT).encode())
    assert [s.heading_path for s in doc.sections] == [("Real Heading",)]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "\n",
                "\n\n",
                "1. ",
                "2.1 ",
                "A. ",
                "ARTICLE ",
                "IV. ",
                "Title Case Line",
                "ALL CAPS",
                "body text. ",
                "x" * 95,
                "Section 3",
                "===",
                "---",
                ": ",
                "é",
                " ",
            ]
        ),  # fmt: skip
        max_size=80,
    )
)
def test_plain_text_headings_are_line_starts_in_order_on_any_text(parts):
    from pipeline.parse.text import headings

    text = "".join(parts)
    title, heads = headings(text)
    offsets = [h[0] for h in heads]
    assert offsets == sorted(set(offsets)) and all(0 <= o < len(text) for o in offsets)
    assert all(o == 0 or text[o - 1] in " \n" for o in offsets)
    assert all(1 <= lvl <= 6 for _, lvl, _ in heads)
    assert not title or (heads and heads[0][2] == title)


def test_long_text_gets_content_defined_sections_robust_to_insertion():
    paras = [f"Paragraph {i} " + " ".join(f"word{i}x{j}" for j in range(60)) for i in range(120)]
    text = "\n\n".join(paras)
    doc = normalize(_src("long.txt"), text.encode(), section_tokens=512)
    assert len(doc.sections) > 5
    before = {doc.text[s.start : s.end] for s in doc.sections}
    doc2 = normalize(
        _src("long.txt"), ("A brand new opening paragraph.\n\n" + text).encode(), section_tokens=512
    )
    after = {doc2.text[s.start : s.end] for s in doc2.sections}
    # only the first section or two change when a paragraph is inserted at the top
    assert len(before - after) <= 2, (len(before), len(before - after))


def test_markdown_title_is_an_h1_near_the_top_only():
    # a plain-text file saved as .md: a stray "=" under a paragraph deep down makes a setext H1
    body = "Some plain prose. " * 80 + "\n\nFigure 1 shows\nthe curves\n =\nmore text\n"
    doc = normalize(_src("notes.md"), body.encode())
    assert doc.title == ""  # not the figure caption (and a file name is not embedded as a title)
    heading = [s.heading_path for s in doc.sections if s.heading_path]
    assert heading == [("Figure 1 shows the curves",)]  # one line, whitespace collapsed


def test_every_source_document_type_has_a_parser_and_an_unknown_type_is_a_clear_error():
    parsers = registered()
    for suffix, (doc_type, _) in SUFFIXES.items():
        assert doc_type in parsers, f"{suffix} is detected as {doc_type!r} but no parser is registered for it"
    with pytest.raises(ValueError, match=r"no parser for document type 'epub' \(registered: .*markdown"):
        parse("epub", "some text")
    with pytest.raises(TypeError, match=r"the parser of 'pdf' takes bytes, got str"):
        parse("pdf", "decoded text")  # binary types get the file's bytes
    parsed = parse("text", "Just prose.")
    assert (parsed.doc_type, parsed.mime, parsed.title) == ("text", "text/plain", "")


@pytest.mark.slow
def test_html_nested_ten_thousand_deep_is_read_not_a_recursion_error():
    from pipeline.parse.html import parse_html

    page = "<html><body><h1>Deep</h1>" + "<div>" * 10_000 + "text at the bottom" + "</div>" * 10_000
    text, sections, title = parse_html(page + "</body></html>")
    assert text == "Deep\n\ntext at the bottom" and title == "Deep"
    assert [(s.start, s.end) for s in sections] == [(0, len(text))]


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Le café est très bon, à côté de l'église.", "latin-1"),
        ("Grüße aus Köln, sagte der Bäcker.", "cp1252"),
        ("El niño comió piñata en Año Nuevo.", "latin-1"),
        ("Příliš žluťoučký kůň úpěl ďábelské ódy.", "iso8859_2"),
    ],
)
def test_legacy_encodings_decode_to_the_right_letters(text, encoding):
    decoded, warnings = decode(text.encode(encoding), "file:///x.txt")
    assert decoded == text
    assert len(warnings) == 1 and "re-save the file as UTF-8" in warnings[0]


def test_a_stray_byte_in_utf8_spoils_one_character_not_the_file():
    good = ("Résumé of the naïve café, Ørsted and Łódź. " * 40).encode("utf-8")
    data = good[:500] + b"\xff" + good[500:]
    text, warnings = decode(data, "file:///x.md")
    assert text.replace("\ufffd", "", 1) == good.decode("utf-8")
    assert warnings == [
        "invalid UTF-8 at byte 500 (0xff); decoded as UTF-8 with U+FFFD for the bad bytes — fix them to silence this"
    ]
