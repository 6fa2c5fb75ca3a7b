"""Golden tests: each strategy on a real document, with the boundaries and counts it must produce."""

from __future__ import annotations

import re
from pathlib import Path
from unittest import mock

import numpy as np
import pytest

from pipeline.chunkers import REGISTRY, Chunk
from pipeline.chunkers.sentence import sentence_spans
from pipeline.config import (
    _ADAPTER,
    ChatConfig,
    CodeConfig,
    FixedConfig,
    HierarchicalConfig,
    HtmlConfig,
    MarkdownConfig,
    Profile,
    RecursiveConfig,
    SemanticConfig,
    SentenceConfig,
)
from pipeline.model import Document, Section
from pipeline.normalize import normalize
from pipeline.sources import SourceFile, detect, source_uri
from pipeline.tokens import counter, tiktoken_encoding

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def load(name: str, *, section_tokens: int = 1024, path: Path | None = None) -> Document:
    p = path or FIXTURES / name
    kind = detect(p)
    assert kind is not None
    return normalize(
        SourceFile(p, source_uri(p), kind[0], kind[1]), p.read_bytes(), section_tokens=section_tokens
    )


def chunks_of(cfg, doc: Document) -> list[tuple[int, Chunk]]:
    chunker = REGISTRY[cfg.kind](cfg)
    return [(i, c) for i, cs in chunker.chunk_document(doc) for c in cs]


def first_line(c: Chunk) -> str:
    return c.text.split("\n", 1)[0]


def text_doc(text: str) -> Document:
    return Document(uri="memory:", doc_type="text", text=text, sections=[Section(0, len(text))])


# ------------------------------------------------------------------------------------- markdown

MD_HEADER = "| Number | Symbol | Name | Atomic weight |\n| ---: | :---: | --- | ---: |"


def test_markdown_headings_become_the_context_path():
    doc = load("guide.md")
    assert doc.title == "Field guide to the elements"
    out = chunks_of(MarkdownConfig(size=512, context="path"), doc)  # the full path (default: title + nearest)
    loader = [c for _, c in out if "The whole loader" in c.text]
    assert len(loader) == 1
    assert loader[0].context == "Field guide to the elements > Reading the data > The loader"
    assert loader[0].text.startswith("### The loader")
    assert loader[0].metadata == {
        "heading_path": ["Field guide to the elements", "Reading the data", "The loader"]
    }
    # at 512 cl100k the model's limit (254 word pieces with context) is what cuts the long table
    table = [c for i, c in out if doc.sections[i].heading_path[-1] == "The first 36 elements"]
    assert [first_line(c) for c in table] == [
        "## The first 36 elements",
        "| 17 | Cl | Chlorine | 35.45 |",
        "| 34 | Se | Selenium | 78.971 |",
    ]
    assert [counter("model").count(c.embed_text) for c in table[:2]] == [254, 254]  # filled to the limit


def test_markdown_long_table_is_cut_by_rows_with_the_header_in_context():
    doc = load("guide.md")
    out = [
        c
        for i, c in chunks_of(MarkdownConfig(size=100), doc)
        if "first 36" in doc.sections[i].heading_path[-1]
    ]
    assert [first_line(c) for c in out] == [
        "## The first 36 elements",
        "| 4 | Be | Beryllium | 9.0122 |",
        "| 11 | Na | Sodium | 22.99 |",
        "| 18 | Ar | Argon | 39.948 |",
        "| 25 | Mn | Manganese | 54.938 |",
        "| 32 | Ge | Germanium | 72.63 |",
    ]
    assert MD_HEADER in out[0].text and not out[0].context.endswith(MD_HEADER)
    for c in out[1:]:
        assert c.context == "Field guide to the elements > The first 36 elements\n" + MD_HEADER
        assert "| Number |" not in c.text  # the header is embedded, never part of the span
    # every row is whole in exactly one chunk
    rows = [ln for ln in doc.text.split("\n") if re.match(r"\| \d+ \|", ln)]
    assert len(rows) == 36
    for row in rows:
        assert sum(row in c.text.split("\n") for c in out) == 1, row
    assert out[-1].text.endswith("five significant digits.")


def test_markdown_fence_is_never_cut_when_it_fits_and_only_at_lines_when_it_does_not():
    doc = load("guide.md")
    fence = doc.text.index("```python")
    fence_end = doc.text.index("```\n", fence + 3) + 3
    for size in (100, 512):
        inside = [
            c for _, c in chunks_of(MarkdownConfig(size=size), doc) if c.start < fence_end and c.end > fence
        ]
        assert len(inside) == 1 and inside[0].start <= fence and inside[0].end >= fence_end
    # 48 tokens cannot hold the fence: cuts fall on line boundaries, never at its blank lines
    cut = [c for _, c in chunks_of(MarkdownConfig(size=48), doc) if c.start < fence_end and c.end > fence]
    assert len(cut) == 2
    for c in cut:
        assert c.start == 0 or doc.text[: c.start].rstrip(" ").endswith("\n")
        assert doc.text[c.end :].startswith("\n")
    assert cut[1].text.startswith('with open(path, newline="") as fh:')


def test_markdown_list_stays_with_its_lead_in():
    doc = load("guide.md")
    for size in (48, 64, 512):
        out = [c for _, c in chunks_of(MarkdownConfig(size=size), doc)]
        lead = [c for c in out if "checks three things:" in c.text]
        assert len(lead) == 1
        assert "- the atomic number is a positive integer;" in lead[0].text
    # at 48 the list no longer fits whole: the lead-in takes the first items, the rest follows
    out = [c for _, c in chunks_of(MarkdownConfig(size=48), doc)]
    rest = next(c for c in out if c.text.startswith("- the weight is"))
    assert rest.text.endswith("with the reason.")


# ----------------------------------------------------------------------------------------- html


def test_html_boilerplate_is_gone_and_tables_keep_their_header():
    doc = load("page.html")
    assert doc.title == "Megacities handbook"
    out = chunks_of(HtmlConfig(size=128), doc)
    everything = " ".join(c.embed_text for _, c in out)
    for junk in ("About us", "cookies", "Copyright", "analytics", "font-family"):
        assert junk not in everything
    table = [c for i, c in out if doc.sections[i].heading_path[-1] == "The largest cities"]
    assert [first_line(c) for c in table] == [
        "The largest cities",
        "9 | Mumbai | India | 20.4",
        "20 | Rio de Janeiro | Brazil | 13.5",
        "Seven of the thirty cities are in China and five are in India.",
    ]
    header = "Rank | City | Country | Population (millions)"
    assert header in table[0].text
    assert table[1].context == table[2].context == f"Megacities handbook > The largest cities\n{header}"
    assert table[3].context == "Megacities handbook > The largest cities"


def test_html_pre_is_kept_whole_and_lists_stay_with_their_lead_in():
    doc = load("page.html")
    pre = doc.text.index("def project(")
    pre_end = doc.text.index("return population") + len("return population")
    for size in (40, 128):
        out = [c for _, c in chunks_of(HtmlConfig(size=size), doc)]
        holder = [c for c in out if c.start < pre_end and c.end > pre]
        assert len(holder) == 1 and holder[0].start <= pre and holder[0].end >= pre_end
        lead = next(c for c in out if "three reasons:" in c.text)
        assert lead.text.endswith("- informal settlements are hard to count.")
        assert lead.context == "Megacities handbook > How populations are counted"


# ----------------------------------------------------------------------------------------- code


def test_python_module_is_cut_at_methods_with_imports_and_class_in_context():
    doc = load("inventory.py")
    assert [s.heading_path[-1] for s in doc.sections] == [
        "inventory.py",
        "class Item",
        "class Inventory",
        "def days_of_stock(item: Item) -> float",
        "def load_items(rows: list[dict[str, str]]) -> Inventory",
    ]
    out = [c for _, c in chunks_of(CodeConfig(size=128), doc)]
    assert [first_line(c) for c in out] == [
        '"""A small warehouse inventory: stock levels, reservations and a reorder report."""',
        "@dataclass",
        "@dataclass",
        "def available(self, sku: str) -> int:",
        "def ship(self, sku: str, quantity: int) -> None:",
        "def reorder_report(self, lead_days: int) -> list[tuple[str, int]]:",
        "for sku in sorted(self.items):",
        "def days_of_stock(item: Item) -> float:",
        "def load_items(rows: list[dict[str, str]]) -> Inventory:",
    ]
    assert out[0].context == "# inventory.py"  # its imports are in its own text
    imports = "from __future__ import annotations\nimport math\nfrom collections import defaultdict"
    for c in out[1:]:
        assert c.context.startswith("# inventory.py\n" + imports)
    for c in out[3:6]:
        assert c.context.endswith("\nclass Inventory:")
    # a piece of an oversized method also says which method it is in
    assert out[6].context.endswith(
        "class Inventory:\ndef reorder_report(self, lead_days: int) -> list[tuple[str, int]]:"
    )
    for c in out:  # line-aware: every chunk starts at the start of a line (after its indentation)
        assert not doc.text[doc.text.rfind("\n", 0, c.start) + 1 : c.start].strip()
        assert c.end == len(doc.text) or doc.text[c.end] == "\n"
        assert c.metadata == {"language": "python"}


SNIPPETS = {
    "shapes.js": (
        'import { area } from "./geometry.js";\n\nexport class Shape {\n  constructor(name, sides) {\n'
        "    this.name = name;\n    this.sides = sides;\n    this.created = Date.now();\n  }\n\n"
        '  describe() {\n    const kind = this.sides > 4 ? "polygon" : "simple shape";\n'
        "    return `${this.name} is a ${kind} with ${this.sides} sides and area ${area(this)}`;\n  }\n}\n",
        "describe() {",
        "class Shape {",
    ),
    "shapes.ts": (
        'import { area } from "./geometry";\n\nexport class Shape {\n'
        "  constructor(public name: string, public sides: number) {\n    this.name = name;\n"
        "    this.sides = sides;\n  }\n\n  describe(): string {\n"
        '    const kind: string = this.sides > 4 ? "polygon" : "simple shape";\n'
        "    return `${this.name} is a ${kind} with ${this.sides} sides and area ${area(this)}`;\n  }\n}\n",
        "describe(): string {",
        "class Shape {",
    ),
    "shapes.rs": (
        "use std::fmt;\n\npub struct Shape {\n    name: String,\n    sides: u32,\n}\n\nimpl Shape {\n"
        "    pub fn new(name: &str, sides: u32) -> Self {\n        Shape { name: name.to_string(), sides }\n"
        "    }\n\n    pub fn describe(&self) -> String {\n"
        '        let kind = if self.sides > 4 { "polygon" } else { "simple shape" };\n'
        '        format!("{} is a {} with {} sides", self.name, kind, self.sides)\n    }\n}\n',
        "pub fn describe(&self) -> String {",
        "impl Shape {",
    ),
    "Shape.java": (
        "package shapes;\n\nimport java.util.Locale;\n\npublic class Shape {\n    private final String name;\n"
        "    private final int sides;\n\n    public Shape(String name, int sides) {\n        this.name = name;\n"
        "        this.sides = sides;\n    }\n\n    public String describe() {\n"
        '        String kind = sides > 4 ? "polygon" : "simple shape";\n'
        '        return String.format(Locale.ROOT, "%s is a %s with %d sides", name, kind, sides);\n    }\n}\n',
        "public String describe() {",
        "public class Shape {",
    ),
    "shapes.go": (
        'package shapes\n\nimport "fmt"\n\ntype Shape struct {\n\tName  string\n\tSides int\n}\n\n'
        'func (s Shape) Describe() string {\n\tkind := "simple shape"\n\tif s.Sides > 4 {\n\t\tkind = "polygon"\n'
        '\t}\n\treturn fmt.Sprintf("%s is a %s with %d sides", s.Name, kind, s.Sides)\n}\n',
        "return fmt.Sprintf(",
        "func (s Shape) Describe() string {",
    ),
}


@pytest.mark.parametrize("name", sorted(SNIPPETS))
def test_code_grammars_cut_at_members_and_carry_the_enclosing_signature(name, tmp_path):
    source, member, scope = SNIPPETS[name]
    (tmp_path / name).write_text(source)
    doc = load(name, path=tmp_path / name)
    assert doc.doc_type == "code"
    out = [c for _, c in chunks_of(CodeConfig(size=40), doc)]
    hit = [c for c in out if c.text.startswith(member)]
    assert len(hit) == 1, [first_line(c) for c in out]
    assert scope in hit[0].context.split("\n")
    first_import = source.split("\n")[2 if name.endswith((".go", ".java")) else 0]
    assert first_import in hit[0].context


# ----------------------------------------------------------------------------------------- chat


def test_chat_groups_whole_turns():
    doc = load("support_chat.txt")
    assert doc.doc_type == "chat"
    out = [c for _, c in chunks_of(ChatConfig(max_turns=4, size=128), doc)]
    turns = [len(re.findall(r"^\[\d\d:\d\d\]", c.text, re.M)) for c in out]
    assert turns == [4, 4, 4, 3]
    assert all(c.text.startswith("[09:") for c in out)
    assert out[0].metadata == {"speakers": ["Alice", "Bob"]}
    # a tighter budget takes fewer turns, still never cutting one
    small = [c for _, c in chunks_of(ChatConfig(max_turns=4, size=48), doc)]
    assert len(small) > len(out)
    assert all(c.text.startswith("[09:") and doc.text[c.end] == "\n" for c in small[:-1])


def test_chat_overlap_repeats_the_last_turn():
    doc = load("support_chat.txt")
    out = [c for _, c in chunks_of(ChatConfig(max_turns=3, overlap=1, size=256), doc)]
    assert len(out) == 7
    for a, b in zip(out, out[1:], strict=False):
        assert a.text.split("\n")[-1] == b.text.split("\n")[0]


def test_chat_turn_over_budget_is_cut_but_counts_as_one_turn():
    answer = " ".join(f"Sentence number {k} of a very long answer about parcels." for k in range(12))
    text = f"Alice: hi there\nBob: {answer}\nAlice: ok thanks\nBob: bye now\nAlice: see you"
    doc = Document(uri="memory:", doc_type="chat", text=text, sections=[Section(0, len(text))])
    out = REGISTRY["chat"](ChatConfig(max_turns=2, size=64)).chunk(doc, doc.sections[0])
    assert [first_line(c)[:22] for c in out] == [
        "Alice: hi there",
        "Sentence number 4 of a",
        "Sentence number 9 of a",
        "Bob: bye now",
    ]
    assert out[2].text.endswith("parcels.\nAlice: ok thanks")  # the tail of Bob's turn + one more turn
    # no speakers at all: prose, not groups of "turns"
    prose = REGISTRY["chat"](ChatConfig(max_turns=1, size=256)).chunk_text(PASTA + "\n\n" + JUPITER)
    assert [c.text for c in prose] == [PASTA + "\n\n" + JUPITER]


# --------------------------------------------------------------------------------- sentences


DE_SENTENCES = [
    "Die Geschichte der Stadt reicht bis ins 12. Jh. zurück.",
    "Im Jahr 1158 gründete Heinrich der Löwe einen Markt an der Isar, u. a. um den Salzhandel zu kontrollieren.",
    "Der Bischof von Freising verlor dadurch wichtige Einnahmen.",
    "Im Mittelalter wuchs die Stadt rasch.",
    "Um 1500 lebten bereits ca. 13.500 Menschen innerhalb der Mauern.",
    "Die Frauenkirche wurde zwischen 1468 und 1488 errichtet; ihre Türme sind 98,57 m bzw. 100 m hoch.",
    "Dr. Jörg von Halsbach leitete den Bau.",
    "Heute ist München die drittgrößte Stadt Deutschlands.",
    "Sie hat rund 1,5 Mio. Einwohner, z. B. Studierende aus über 100 Ländern.",
    "Bekannt ist sie v. a. für das Oktoberfest, das jedes Jahr im September beginnt.",
    "„Wer einmal da war, kommt wieder“, sagt eine Besucherin aus Hamburg.",
]


def test_german_sentences_survive_abbreviations_and_numbers():
    doc = load("de_prose.txt")
    got = [doc.text[a:b].strip() for a, b in sentence_spans(doc.text, 0, len(doc.text), language="de")]
    assert got == DE_SENTENCES
    out = [c for _, c in chunks_of(SentenceConfig(size=64, overlap=1, language="de"), doc)]
    assert len(out) == 8
    for a, b in zip(out, out[1:], strict=False):  # one sentence of overlap
        last = [s for s in DE_SENTENCES if a.text.endswith(s)]
        assert last and b.text.startswith(last[0])


def test_english_sentences_keep_decimals_quotes_and_titles():
    text = 'Dr. Smith paid $3.50 for it at 9 a.m. on Jan. 5. "Really?" she asked. It was e.g. cheap.'
    got = [text[a:b].strip() for a, b in sentence_spans(text, 0, len(text))]
    assert got[0] == "Dr. Smith paid $3.50 for it at 9 a.m. on Jan. 5."
    assert got[1:] == ['"Really?" she asked.', "It was e.g. cheap."]


def test_chinese_prose_splits_at_cjk_sentence_punctuation():
    doc = load("zh_prose.txt")
    sents = [doc.text[a:b].strip() for a, b in sentence_spans(doc.text, 0, len(doc.text), language="zh")]
    assert len(sents) == 11 and all(s[-1] in "。！？" for s in sents)
    assert sents[2] == "修建长城的历史可以追溯到公元前七世纪！"
    for cfg in (RecursiveConfig(size=48, overlap=0), SentenceConfig(size=48, language="zh")):
        out = [c for _, c in chunks_of(cfg, doc)]
        assert len(out) == 6
        assert all(c.text[-1] in "。！？" for c in out)
        assert all(c.token_count <= 48 for c in out)


# ----------------------------------------------------------------------------------------- fixed


def test_fixed_character_windows_are_exact():
    text = "".join(chr(ord("a") + i % 26) for i in range(1000))
    ch = REGISTRY["fixed"](FixedConfig(size=100, overlap=20, unit="chars"))
    spans = [(c.start, c.end) for c in ch.chunk_text(text)]
    assert spans == [(80 * k, min(80 * k + 100, 1000)) for k in range(13)]


def test_fixed_word_windows_share_overlap_words():
    text = " ".join(f"w{i}" for i in range(20))
    out = REGISTRY["fixed"](FixedConfig(size=8, overlap=3, unit="words")).chunk_text(text)
    assert [c.text for c in out] == [
        "w0 w1 w2 w3 w4 w5 w6 w7",
        "w5 w6 w7 w8 w9 w10 w11 w12",
        "w10 w11 w12 w13 w14 w15 w16 w17",
        "w15 w16 w17 w18 w19",
    ]


@pytest.mark.parametrize("unit", ["cl100k_base", "o200k_base"])
def test_fixed_token_windows_are_tiktoken_windows(unit):
    text = PASTA + "\n\n" + JUPITER
    enc = tiktoken_encoding(unit)
    _, starts = enc.decode_with_offsets(enc.encode_ordinary(text))
    out = REGISTRY["fixed"](FixedConfig(size=16, overlap=4, unit=unit, context=False)).chunk_text(text)
    ranges = []
    for c in out:  # the token range each chunk came from (stripping only drops outer whitespace)
        first = max(k for k, s in enumerate(starts) if s <= c.start)
        last = min([k for k, s in enumerate(starts) if s >= c.end] or [len(starts)])
        ranges.append((first, last))
    assert ranges[0][0] == 0 and ranges[-1][1] == len(starts)
    for (a, b), (x, _) in zip(ranges, ranges[1:], strict=False):
        assert 15 <= b - a <= 16  # 16, or 15 where stripping a leading space costs a token
        assert x == b - 4  # exactly 4 tokens of overlap
    assert [c.text for c in out[:2]] == [
        enc.decode(enc.encode_ordinary(text)[a:b]).strip() for a, b in ranges[:2]
    ]


@pytest.mark.parametrize("unit", ["cl100k_base", "o200k_base"])
def test_fixed_token_windows_never_cut_a_character(unit):
    text = load("zh_prose.txt").text  # CJK characters often take two or three byte-level tokens
    out = REGISTRY["fixed"](FixedConfig(size=16, unit=unit, context=False)).chunk_text(text)
    assert all(0 < c.token_count <= 16 for c in out)
    assert "".join("".join(c.text.split()) for c in out) == "".join(text.split())
    assert sum(c.token_count for c in out) >= len(tiktoken_encoding(unit).encode_ordinary(text)) - len(out)


def test_fixed_model_windows_count_word_pieces():
    text = load("de_prose.txt").text
    out = REGISTRY["fixed"](FixedConfig(size=20, unit="model", context=False)).chunk_text(text)
    wp = counter("model")
    assert all(wp.count(c.text) <= 20 for c in out)
    assert sum(c.token_count == 20 for c in out) >= len(out) - 2


# ------------------------------------------------------------------------------------ semantic

PASTA = (
    "Bring a large pot of salted water to a rolling boil. Add the spaghetti and stir so it does not stick. "
    "Cook the pasta for nine minutes until it is al dente. Drain it and keep a cup of the starchy cooking "
    "water. Toss the noodles with garlic, olive oil and grated parmesan."
)
JUPITER = (
    "Jupiter is the largest planet in the solar system. It is a gas giant made mostly of hydrogen and "
    "helium. The Great Red Spot is a storm larger than the Earth. Jupiter has at least ninety-five known "
    "moons. Its moon Ganymede is bigger than the planet Mercury."
)
TOPICS = PASTA + " " + JUPITER


@pytest.mark.slow
@pytest.mark.parametrize(("mode", "threshold"), [("percentile", 90.0), ("stddev", 1.5), ("absolute", 0.95)])
def test_semantic_breaks_where_the_topic_changes(mode, threshold):
    cfg = SemanticConfig(size=200, min_size=0, mode=mode, threshold=threshold)
    out = REGISTRY["semantic"](cfg).chunk_text(TOPICS)
    assert [c.text for c in out] == [PASTA, JUPITER]


@pytest.mark.slow
def test_semantic_never_exceeds_the_budget_and_merges_small_pieces():
    small = REGISTRY["semantic"](SemanticConfig(size=32, min_size=0)).chunk_text(TOPICS)
    assert all(c.token_count <= 32 for c in small) and len(small) >= 4
    assert len(PASTA) in {c.end for c in small}  # the topic break survives the budget cuts
    # pieces under min_size are merged into a neighbour, but only where the budget allows
    merged = REGISTRY["semantic"](SemanticConfig(size=400, min_size=200)).chunk_text(TOPICS)
    assert [c.text for c in merged] == [TOPICS]
    kept = REGISTRY["semantic"](SemanticConfig(size=80, min_size=200)).chunk_text(TOPICS)
    assert [c.text for c in kept] == [PASTA, JUPITER]


class _CountingEmbedder:
    def __init__(self, real) -> None:
        self.real, self.calls, self.texts = real, 0, 0

    def encode(self, texts, **kw):
        self.calls += 1
        self.texts += len(texts)
        return self.real.encode(texts, **kw)


@pytest.mark.slow
def test_semantic_embeds_once_per_section_and_once_per_document():
    from pipeline.embed import get_embedder

    spy = _CountingEmbedder(get_embedder())
    chunker = REGISTRY["semantic"](SemanticConfig(size=100))
    with mock.patch("pipeline.embed.get_embedder", lambda *a, **k: spy):
        chunker.chunk_text(TOPICS)
        assert (spy.calls, spy.texts) == (1, 10)  # window=1: the 10 sentences, each embedded once
        doc = load("guide.md")
        spy.calls = 0
        first = chunker.chunk_document(doc)
        assert spy.calls == 1
        assert chunker.chunk_document(doc) == first  # deterministic across batch shapes


@pytest.mark.slow
def test_semantic_chunk_stage_embeds_a_whole_batch_in_one_call():
    """The pipeline's chunk stage gives a batch's documents to each chunker at once: a semantic chunker
    embeds the sentences of every new section of every document in ONE call, each sentence once, and
    the chunks are those it makes one document at a time."""
    from types import SimpleNamespace

    from pipeline import jobs, stages
    from pipeline.embed import get_embedder

    chunker = REGISTRY["semantic"](SemanticConfig(size=100))
    guide = load("guide.md")
    topics = Document(uri="memory:t", doc_type="text", text=TOPICS, sections=[Section(0, len(TOPICS))])
    alone = [chunker.chunk_sections(guide, [0, 2, 3]), chunker.chunk_sections(topics, [0])]
    work = [
        SimpleNamespace(doc=guide, plan=SimpleNamespace(new=[0, 2, 3]), chunks={}),
        SimpleNamespace(doc=topics, plan=SimpleNamespace(new=[0]), chunks={}),
    ]
    failed: list[str] = []
    from pipeline.config import DEFAULT_MODEL, Profile
    from pipeline.guard import Bound, FileGuard

    profile = Profile(markdown=SemanticConfig(size=100), text=SemanticConfig(size=100))
    jobs._ROUTERS.clear()  # chunkers built by an earlier test would hold their own embedder
    batch = SimpleNamespace(  # in-process (both bounds 0): the spy below sees the chunk stage's calls
        ctx=SimpleNamespace(profile=profile.as_json(), chunk_model=None, model=DEFAULT_MODEL, model_limit=None),
        guard=FileGuard(Bound(0, 0)),
        stats=SimpleNamespace(timed=lambda name: mock.MagicMock()),
        progress=SimpleNamespace(advance=lambda *a: None),
        fail=lambda uri, stage, msg: failed.append(msg),
    )
    spy = _CountingEmbedder(get_embedder())
    with mock.patch("pipeline.embed.get_embedder", lambda *a, **k: spy):
        out = stages.chunk(batch, work)  # type: ignore[arg-type]
    assert not failed and len(out) == 2
    assert spy.calls == 1
    sentences = [t for w in work for i in w.plan.new for t in _sentence_texts(chunker, w.doc, i)]
    assert spy.texts == len(set(sentences))  # window=1: every distinct sentence once
    assert [w.chunks for w in work] == alone


def _sentence_texts(chunker, doc: Document, i: int) -> list[str]:
    sec = doc.sections[i]
    return [doc.text[a:b] for a, b in chunker.sentences(doc, sec, chunker.fits_for(doc, sec))]


def test_semantic_threshold_modes():
    ch = REGISTRY["semantic"](SemanticConfig(mode="percentile", threshold=50))
    d = np.array([0.1, 0.5, 0.2, 0.9, 0.3])
    assert ch.breakpoints(d) == [1, 3]
    ch = REGISTRY["semantic"](SemanticConfig(mode="stddev", threshold=1.0))
    assert ch.breakpoints(d) == [3]
    ch = REGISTRY["semantic"](SemanticConfig(mode="absolute", threshold=0.25))
    assert ch.breakpoints(d) == [1, 3, 4]
    assert ch.breakpoints(np.zeros(0)) == []


# -------------------------------------------------------------------------------- hierarchical


def test_hierarchical_children_are_small_and_inside_their_parent_sections(tmp_path):
    profile = Profile(text=HierarchicalConfig(size=64, parent_size=256))
    paragraphs = [f"Part {k}. {PASTA if k % 2 else JUPITER}" for k in range(12)]
    (tmp_path / "long.txt").write_text("\n\n".join(paragraphs))
    doc = load("long.txt", path=tmp_path / "long.txt", section_tokens=profile.section_tokens_for("text"))
    tok = counter("cl100k_base")
    parents = [tok.count(s.text(doc.text)) for s in doc.sections]
    assert len(parents) >= 4 and max(parents) <= 256  # the parents: sections of at most parent_size
    out = REGISTRY["hierarchical"](profile.text).chunk_document(doc)
    assert all(len(cs) >= 2 for _, cs in out)  # each parent holds several children
    for i, cs in out:
        s = doc.sections[i]
        for c in cs:
            assert s.start <= c.start < c.end <= s.end and c.token_count <= 64
            assert c.metadata == {"parent": [s.start, s.end]}


@pytest.mark.slow
def test_hierarchical_search_returns_the_parent(tmp_path, settings, conn):
    from pipeline import store
    from pipeline.embed import get_embedder
    from pipeline.ingest import run_ingest

    (tmp_path / "guide.md").write_bytes((FIXTURES / "guide.md").read_bytes())
    profile = Profile(markdown=HierarchicalConfig(size=48, parent_size=512))
    stats, _, status = run_ingest([tmp_path], settings=settings, profile=profile)
    assert status == "completed", stats.errors
    vec = get_embedder(settings.model).encode(["which symbol does the element sodium have?"])[0]
    hit = store.search(conn, "default", vec, k=1, with_parent=True)[0]
    assert "Sodium" in hit.parent_text and len(hit.parent_text) > len(hit.text)
    assert hit.text in hit.parent_text


# --------------------------------------------------------------------------------------- CLI


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(REGISTRY))
def test_cli_chunk_works_for_every_strategy(kind):
    import json

    from typer.testing import CliRunner

    from pipeline.cli import app

    params = ["--param", "size=96"] + (["--param", "language=de"] if kind in ("sentence", "semantic") else [])
    res = CliRunner().invoke(
        app, ["chunk", str(FIXTURES / "de_prose.txt"), "--strategy", kind, *params, "--json"]
    )
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    text = (FIXTURES / "de_prose.txt").read_text()
    assert rows and all(text[r["start"] : r["end"]] == r["text"] and r["tokens"] <= 96 for r in rows)
    _ADAPTER.validate_python({"kind": kind, "size": 96})


# ---------------------------------------------------------------------------------- context scope


@pytest.mark.parametrize("kind", sorted(k for k in REGISTRY if k != "semantic"))  # semantic: sentence's
def test_a_context_said_to_be_the_sections_is_the_same_for_every_span(kind):
    """A strategy declares how far its context varies (`context_scope`); where that makes a section's
    context one for all its spans (budgets asked once, one context stored), every span's own context
    is indeed that one, on every fixture (code's imports and signatures, markdown's table headers vary)."""
    chunker = REGISTRY[kind](_ADAPTER.validate_python({"kind": kind, "size": 64, "context": "path"}))
    checked = 0
    for name in ("guide.md", "page.html", "inventory.py", "support_chat.txt"):
        doc = load(name)
        for i, cs in chunker.chunk_document(doc):
            sec = doc.sections[i]
            if not chunker.view(doc, sec).measure.same_context:
                continue
            first = chunker.context(doc, sec, (sec.start, sec.start))
            for c in cs:
                assert chunker.context(doc, sec, (c.start, c.end)) == first == c.context, (name, c.text)
                checked += 1
    assert checked or chunker.context_scope == "span"  # code's: never one for the section
