"""The chunker contracts, as hypothesis properties over every registered strategy.

For every chunk: text == doc.text[start:end], inside its section, token_count <= size in its unit,
context + text within the model's input limit, never empty or whitespace-padded. For every section:
its chunks cover all of its non-whitespace text, and chunking twice gives the same chunks.
"""

from __future__ import annotations

import re
import sys
import threading
import time
import types
import zlib
from contextlib import contextmanager, nullcontext
from functools import lru_cache
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from pipeline import tokens
from pipeline.chunkers import REGISTRY, Chunker
from pipeline.chunkers.base import register
from pipeline.chunkers.fixed import starts_units, token_units
from pipeline.chunkers.router import Router
from pipeline.config import _ADAPTER, ChunkerConfig, Profile, RecursiveConfig, strategy_profile
from pipeline.embed.meta import model_max_tokens
from pipeline.model import Document, Section
from pipeline.parse.code import parse_code
from pipeline.parse.html import parse_html
from pipeline.parse.markdown import parse_markdown
from pipeline.tokens import counter

UNITS = ("cl100k_base", "o200k_base", "model", "chars", "words")
KINDS = sorted(REGISTRY)
PROPS = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    derandomize=True,
)


# ------------------------------------------------------------------------------------ contracts


def check_contracts(chunker: Chunker, doc: Document) -> None:
    """Assert every contract for every section of doc."""
    text, size = doc.text, chunker.config.size
    whole = max(size, getattr(chunker.config, "keep_whole", 0))  # a paragraph kept whole may reach this
    unit, model = counter(chunker.config.unit), counter("model")
    limit = model_max_tokens()
    first = chunker.chunk_document(doc)
    assert [i for i, _ in first] == list(range(len(doc.sections)))
    for i, chunks in first:
        sec = doc.sections[i]
        covered = bytearray(sec.end - sec.start)
        for c in chunks:
            assert sec.start <= c.start < c.end <= sec.end, (c.start, c.end, sec)
            assert c.text == text[c.start : c.end]
            assert c.text.strip() == c.text and c.text, repr(c.text)
            assert c.token_count == unit.count(c.text) <= whole, (c.token_count, whole, c.text)
            if c.token_count > size:  # only a paragraph kept whole goes over the size: one, never two
                breaks = [c.start + k for k in range(len(c.text)) if c.text.startswith("\n\n", k)]
                assert all(any(x < p < y for x, y in sec.atomic) for p in breaks), (size, whole, c.text)
            assert model.count(c.embed_text) <= limit, (model.count(c.embed_text), c.embed_text)
            covered[c.start - sec.start : c.end - sec.start] = b"\x01" * (c.end - c.start)
        missed = [k for k, ch in enumerate(text[sec.start : sec.end]) if not ch.isspace() and not covered[k]]
        assert not missed, f"uncovered text in section {i}: {text[sec.start + missed[0] :][:40]!r}"
    assert chunker.chunk_document(doc) == first  # deterministic
    assert [chunker.chunk(doc, s) for s in doc.sections] == [cs for _, cs in first]


@lru_cache(maxsize=256)
def build(cfg: ChunkerConfig) -> Chunker:
    return REGISTRY[cfg.kind](cfg)


class HashEmbedder:
    """Stands in for the model in the property tests: the contracts do not depend on what the vectors
    mean, and the real model on CPU would make 100+ random documents take minutes. The real model is
    used by the semantic golden tests (test_chunkers_golden.py)."""

    dim = 16

    def __init__(self) -> None:
        self.calls = 0

    def encode(self, texts):
        self.calls += 1
        out = np.stack(
            [
                np.random.default_rng(zlib.crc32(t.encode("utf-8", "surrogatepass"))).normal(size=16)
                for t in texts
            ]
            or [np.zeros(16)]
        )[: len(texts)]
        return (out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)).astype(np.float32)


@contextmanager
def hash_embedder():
    fake = HashEmbedder()
    with mock.patch("pipeline.embed.get_embedder", lambda *a, **k: fake):
        yield fake


# ------------------------------------------------------------------------------------ strategies

WORDS = st.sampled_from(
    [
        "alpha", "the", "Straße", "über", "naïve", "3.50", "Dr.", "e.g.", "z. B.", "U.S.A.", "长城",
        "中国古代的军事防御工程", "東京都", "🙂", "x" * 60, "supercalifragilistic" * 4, "|", "-", "#", "`",
        ":", "Alice:", "Bob:", "def", "return", "(", ")", "{", "}", "«quote»", "\u00e9", "e\u0301",
    ]
)  # fmt: skip
SEPS = st.sampled_from([" ", " ", " ", " ", "\n", "\n\n", ". ", "。", "！", "? ", "\t", "   ", ", "])


@st.composite
def prose(draw, max_size: int = 200) -> str:
    parts = draw(st.lists(st.tuples(WORDS, SEPS), max_size=max_size))
    return "".join(a + b for a, b in parts)


@st.composite
def markdown_doc(draw) -> str:
    word = st.sampled_from(["alpha", "beta", "Straße", "长城", "3.50", "value", "x" * 30])
    line = st.lists(word, min_size=1, max_size=12).map(" ".join)
    block = st.one_of(
        st.tuples(st.integers(1, 4), line).map(lambda t: "#" * t[0] + " " + t[1]),
        prose(max_size=60),
        st.lists(line, min_size=1, max_size=30).map(lambda ls: "```py\n" + "\n\n".join(ls) + "\n```"),
        st.lists(st.tuples(word, line), min_size=1, max_size=40).map(
            lambda rows: "| key | value |\n| --- | --- |\n" + "\n".join(f"| {a} | {b} |" for a, b in rows)
        ),
        st.tuples(line, st.lists(line, min_size=1, max_size=12)).map(
            lambda t: t[0] + ":\n\n" + "\n".join("- " + i for i in t[1])
        ),
    )
    return "\n\n".join(draw(st.lists(block, min_size=1, max_size=8)))


@st.composite
def python_doc(draw) -> str:
    stmt = st.sampled_from(
        ["x = 1", "y = compute(x, 'Straße')", "if x:\n        return y", "for i in range(3):\n        pass",
         "# a comment", "s = '" + "long " * 40 + "'", "items.append({'k': [1, 2, 3]})"]
    )  # fmt: skip

    def method(name: str, body: list[str]) -> str:
        return f"    def {name}(self):\n" + "".join(f"        {s}\n" for s in body)

    out = ["import os\nfrom typing import Any\n"]
    for c in range(draw(st.integers(0, 2))):
        methods = draw(st.lists(st.lists(stmt, min_size=1, max_size=20), min_size=1, max_size=6))
        out.append(f"class C{c}(Base):\n" + "\n".join(method(f"m{k}", b) for k, b in enumerate(methods)))
    for f in range(draw(st.integers(0, 3))):
        body = draw(st.lists(stmt, min_size=1, max_size=30))
        out.append(
            f"def f{f}(a, b):\n" + "".join(f"    {s.replace(chr(10) + '    ', chr(10))}\n" for s in body)
        )
    return "\n\n".join(out)


@st.composite
def chat_doc(draw) -> str:
    turns = draw(
        st.lists(st.tuples(st.sampled_from(["Alice", "Bob", "Carol"]), prose(max_size=40)), max_size=30)
    )
    return "\n".join(f"{who}: {what.strip() or 'ok'}" for who, what in turns)


@st.composite
def config(draw, kind: str) -> ChunkerConfig:
    unit = draw(st.sampled_from(UNITS))
    size = draw(st.sampled_from([8, 24, 64, 200]))
    if unit == "chars":
        size *= 4
    params: dict = {"kind": kind, "size": size, "unit": unit, "context": draw(st.booleans())}
    if kind in ("fixed", "recursive", "markdown", "html", "hierarchical"):
        params["overlap"] = draw(st.integers(0, size // 4))
    if kind in ("recursive", "markdown", "html"):
        params["keep_whole"] = draw(st.sampled_from([0, 0, 2 * size]))
    if kind in ("sentence", "semantic"):
        params["language"] = draw(st.sampled_from(["en", "de", "zh", "xx"]))
    if kind == "sentence":
        params["overlap"] = draw(st.integers(0, 2))
    if kind == "semantic":
        mode = draw(st.sampled_from(["percentile", "stddev", "absolute"]))
        threshold = {"percentile": 80.0, "stddev": 1.0, "absolute": 0.5}[mode]
        params |= {"mode": mode, "threshold": threshold, "window": draw(st.integers(1, 2))}
        params["min_size"] = draw(st.integers(0, size // 2))
    if kind == "chat":
        params["max_turns"] = draw(st.integers(1, 5))
        params["overlap"] = draw(st.integers(0, 2))
    return _ADAPTER.validate_python(params)


def _doc(text: str, doc_type: str, sections: list[Section] | None = None, language: str | None = None):
    return Document(
        uri="memory:",
        doc_type=doc_type,
        text=text,
        sections=sections or [Section(0, len(text))],
        language=language,
        title="A title",
    )


# ------------------------------------------------------------------------------- the properties


@pytest.mark.parametrize("kind", KINDS)
@PROPS
@given(data=st.data())
def test_contracts_on_prose(kind, data):
    text = data.draw(prose())
    cfg = data.draw(config(kind))
    with hash_embedder():
        check_contracts(build(cfg), _doc(text, "text"))


@pytest.mark.parametrize("kind", KINDS)
@PROPS
@given(data=st.data())
def test_contracts_on_markdown(kind, data):
    text = data.draw(markdown_doc())
    sections, title = parse_markdown(text)
    sections = [s for s in sections if text[s.start : s.end].strip()]
    assume(sections)
    cfg = data.draw(config(kind))
    with hash_embedder():
        check_contracts(build(cfg), _doc(text, "markdown", sections))


@pytest.mark.parametrize("kind", ["code", "recursive", "fixed"])
@PROPS
@given(data=st.data())
def test_contracts_on_code(kind, data):
    text = data.draw(python_doc())
    cfg = data.draw(config(kind))
    check_contracts(build(cfg), _doc(text, "code", parse_code(text, "python", "m.py"), "python"))


@pytest.mark.parametrize("kind", ["chat", "sentence"])
@PROPS
@given(data=st.data())
def test_contracts_on_chat(kind, data):
    text = data.draw(chat_doc())
    assume(text.strip())
    check_contracts(build(data.draw(config(kind))), _doc(text, "chat"))


def test_contracts_on_html_for_every_kind():
    html = (
        "<h1>T</h1><p>" + "word " * 300 + "</p><table>"
        + "".join(f"<tr><td>r{i}</td><td>{'cell ' * 8}</td></tr>" for i in range(60))
        + "</table><pre>" + "\n".join("line " * 12 for _ in range(40)) + "</pre>"
    )  # fmt: skip
    text, sections, title = parse_html(html)
    doc = _doc(text, "html", sections)
    with hash_embedder():
        for kind in KINDS:
            for size in (32, 200):
                check_contracts(build(_ADAPTER.validate_python({"kind": kind, "size": size})), doc)


# ------------------------------------------------------------------------------ registry/router


def test_every_config_kind_is_registered_and_selectable():
    kinds = {m.model_fields["kind"].default for m in ChunkerConfig.__origin__.__args__}  # type: ignore[attr-defined]
    assert kinds == set(REGISTRY)
    for kind in kinds:
        prof = strategy_profile(kind, size=100)
        chunker = Router(prof).chunker_for("text")
        assert chunker.kind == kind and chunker.config.size == 100


def _subclasses(cls: type) -> set[type]:
    return {c for sub in cls.__subclasses__() for c in (sub, *_subclasses(sub))}


def test_each_config_kind_has_exactly_one_registered_chunker():
    """Registration lives beside each class: no kind without a chunker, no chunker without a config kind."""
    config_kinds = [m.model_fields["kind"].default for m in ChunkerConfig.__origin__.__args__]  # type: ignore[attr-defined]
    assert len(config_kinds) == len(set(config_kinds))
    defined: dict[str, list[type]] = {}  # kind -> the pipeline classes that set it in their own body
    for cls in _subclasses(Chunker):
        if "kind" in cls.__dict__ and cls.__module__.startswith("pipeline."):
            defined.setdefault(cls.kind, []).append(cls)
    assert set(defined) == set(config_kinds) == set(REGISTRY)
    for kind in config_kinds:
        assert defined[kind] == [REGISTRY[kind]], (kind, defined[kind])
        assert REGISTRY[kind].kind == kind


def test_a_kind_cannot_be_registered_twice():
    with pytest.raises(ValueError, match="already registered"):

        @register
        class Impostor(Chunker):
            kind = "fixed"

            def split(self, doc, section):
                return []

    assert REGISTRY["fixed"].__name__ == "FixedChunker"
    with pytest.raises(TypeError, match="own `kind`"):
        register(type("NoKind", (REGISTRY["fixed"],), {}))


def test_profile_defaults_are_the_measured_ones():
    p = Profile()
    kinds = {t: Router(p).chunker_for(t).kind for t in ("markdown", "html", "text", "code", "chat")}
    assert kinds == {
        "markdown": "markdown",
        "html": "html",
        "text": "recursive",
        "code": "code",
        "chat": "chat",
    }
    # prose and docs: small children without overlap, the best recall and IoU on Chroma's benchmark (docs/benchmarks.md)
    assert p.markdown.size == p.html.size == p.text.size == p.pdf.size == p.docx.size == 144
    assert p.markdown.overlap == p.html.overlap == p.text.overlap == 0
    # a paragraph up to 256 tokens is kept whole (docs/benchmarks.md: more recall and IoU at every budget)
    assert p.markdown.keep_whole == p.html.keep_whole == p.text.keep_whole == p.pdf.keep_whole == 256
    assert 256 <= p.code.size <= 512
    assert 3 <= p.chat.max_turns <= 5


def test_hierarchical_parent_size_decides_sections():
    from pipeline.config import HierarchicalConfig

    p = Profile(text=HierarchicalConfig(size=128, parent_size=512))
    assert p.section_tokens_for("text") == 512
    assert p.section_tokens_for("markdown") == p.section_tokens
    assert p.fingerprint_for("text") != Profile(text=HierarchicalConfig(size=128)).fingerprint_for("text")


@settings(max_examples=150, deadline=None, derandomize=True)
@given(text=prose(), data=st.data())
def test_word_pieces_read_off_the_section_are_exact(text, data):
    """The base counts spans from one tokenization of the section where that is exact: check it is."""
    assume(text.strip())
    doc = _doc(text, "text")
    m = build(_ADAPTER.validate_python({"kind": "recursive"})).view(doc, doc.sections[0]).measure
    spans = data.draw(st.lists(st.tuples(st.integers(0, len(text)), st.integers(0, len(text))), max_size=20))
    snap = data.draw(st.booleans())
    for a, b in spans:
        a, b = min(a, b), max(a, b)
        while snap and 0 < a < len(text) and not text[a - 1].isspace():  # also cuts at word ends
            a -= 1
        while snap and b < len(text) and not text[b].isspace():
            b += 1
        assert m.model(a, b) == counter("model").count(text[a:b]), (a, b, text[a:b])


#: Pieces of awkward text for the span index: words tiktoken cuts in several tokens, numbers it cuts in
#: threes, contractions, runs of spaces and newlines, punctuation runs, accents, CJK, non-breaking and
#: control characters, an added token of the model, emoji.
AWKWARD = [
    "a",
    "Ab",
    " the",
    " photosynthesis",
    "2014",
    "123456",
    "'s",
    "'LL",
    " don't",
    "x1",
    "e.g.",
    "...",
    " ",
    "  ",
    "\n",
    "\n\n",
    "\t",
    " \n ",
    ".\n\n",
    ",",
    "(",
    ")",
    "[",
    "]",
    "#",
    "-",
    "--",
    '"',
    "é",
    "e\u0301",
    "Straße",
    "長城",
    "。",
    "\u00a0",
    "\u3000",
    "\x0b",
    "\x0c",
    "\x01",
    "\x1c",
    "\u200b",
    "[MASK]",
    "[mask]",
    "[Sep]",
    "[un\u212a]",
    "🙂",
    "İ",
    "\u2019",
    "naïve",
    "GSK3β",
    "x" * 120,
]


@settings(max_examples=300, deadline=None, derandomize=True)
@given(parts=st.lists(st.sampled_from(AWKWARD), max_size=60), data=st.data())
def test_span_index_counts_are_the_tokenizers_own(parts, data):
    """Counts read off one tokenization (`tokens.SpanIndexer`) equal counting the span on its own."""
    text = "".join(parts)
    unit, model = counter("cl100k_base"), counter("model")
    idx = tokens.span_indexer("cl100k_base").index(text)
    if idx is not None:
        pos, units, pieces, _ = idx
        assert pos[0] == 0 and pos[-1] == len(text) and list(pos) == sorted(pos)
        for _ in range(10):
            i = data.draw(st.integers(0, len(pos) - 1))
            j = data.draw(st.integers(i, len(pos) - 1))
            span = text[pos[i] : pos[j]]
            assert units[j] - units[i] == unit.count(span), (span, i, j)
            assert pieces[j] - pieces[i] == model.count(span), (span, i, j)
    assert tokens.model_counter().count_fast(text) == model.count(text)
    doc = _doc(text, "text")
    assume(text.strip())
    m = build(_ADAPTER.validate_python({"kind": "recursive"})).view(doc, doc.sections[0]).measure
    for _ in range(10):  # any span: safe offsets inside, the ends counted on their own
        a = data.draw(st.integers(0, len(text)))
        b = data.draw(st.integers(a, len(text)))
        assert m.counts(a, b) == (unit.count(text[a:b]), model.count(text[a:b])), text[a:b]
    fixed = build(_ADAPTER.validate_python({"kind": "fixed"}))
    mf = fixed.view(doc, doc.sections[0]).measure
    for _ in range(10):  # token windows off the index: the units of the span tokenized on its own
        a = data.draw(st.integers(0, len(text)))
        b = data.draw(st.integers(a, len(text)))
        found = mf.token_starts(a, b)
        if found is not None:
            assert starts_units(found, a, b) == token_units(unit.encode_offsets(text[a:b]), a, b), text[a:b]


def test_python_word_pieces_match_the_tokenizer_on_its_vocabulary():
    """The Python WordPiece count agrees with the tokenizer on every vocabulary entry (as a word and
    glued to another), and leaves texts with added tokens or non-ASCII characters to the tokenizer."""
    mc = tokens.model_counter()
    vocab = sorted(tokens.hf_tokenizer().get_vocab())
    texts = [v for v in vocab if v.isascii()]
    texts += [a + b.removeprefix("##") for a, b in zip(texts[::7], texts[3::7], strict=False)]
    assert [mc.count_fast(t) for t in texts] == mc.count_many(texts)
    assert mc.count_fast("a [MASK] b") == mc.count("a [MASK] b") == 3
    py = mc._py
    assert py is not None
    py._memo.clear()  # counted cold in Python (the span index's groups): the same counts, "" included
    plain = [t for t in ["", *texts[::5], " 2014-15", "U.S.", "", "a  b\t\nc"] if py.handles(t)]
    assert [py.count(t) for t in plain] == mc.count_many(plain)
    for text in ("[CLS]", "x [cls] y", "[Mask]", "[un\u212a]", "a[SEP]b"):  # in any case, Kelvin sign too
        assert not py.handles_added(text), text
    assert py.handles_added("[1] see [note] and [mas k]")


# ---------------------------------------------------------------------------- keep_whole


@pytest.mark.parametrize("kind", ["recursive", "markdown", "html"])
def test_a_paragraph_within_keep_whole_is_one_chunk_and_a_longer_one_is_cut_as_before(kind):
    """A clause of ~170 tokens between short paragraphs: cut at size 100 by default, one chunk of its own
    with keep_whole; the short paragraphs around it are still packed to the size; a paragraph over
    keep_whole (or over the model's limit) is cut exactly as without the option."""
    clause = " ".join(f"The licensee shall keep record {i} for the audit." for i in range(17))
    text = f"1. Definitions.\n\n{clause}\n\nA short closing line."
    params = {"kind": kind, "size": 100, "context": "none"}
    cut = REGISTRY[kind](_ADAPTER.validate_python(params))
    kept = REGISTRY[kind](_ADAPTER.validate_python(params | {"keep_whole": 256}))
    tik = counter("cl100k_base")
    assert 100 < tik.count(clause) <= 256
    assert clause not in [c.text for c in cut.chunk_text(text)]
    chunks = kept.chunk_text(text)
    assert [c.text for c in chunks] == ["1. Definitions.", clause, "A short closing line."]
    assert all(c.text == text[c.start : c.end] and c.token_count == tik.count(c.text) for c in chunks)
    long = " ".join([clause] * 3)  # one paragraph of ~500 tokens: over keep_whole
    assert [c.text for c in kept.chunk_text(long)] == [c.text for c in cut.chunk_text(long)]
    wide = REGISTRY[kind](_ADAPTER.validate_python(params | {"keep_whole": 4000}))
    over_model = " ".join(f"Qualifikationsvoraussetzungen{i}" for i in range(60))  # ~400 word pieces
    assert all(counter("model").count(c.text) <= model_max_tokens() for c in wide.chunk_text(over_model))


def test_keep_whole_below_size_changes_nothing():
    text = " ".join(f"Sentence number {i} is here." for i in range(200))
    base = RecursiveConfig(size=64, context="none")
    same = RecursiveConfig(size=64, keep_whole=32, context="none")
    assert REGISTRY["recursive"](base).chunk_text(text) == REGISTRY["recursive"](same).chunk_text(text)


# ------------------------------------------------------------------------------ model limit


def test_model_limit_is_a_parameter():
    """The model's input limit comes from the model unless the caller sets it (evaluations do)."""
    text = " ".join("abcdefghij"[i % 10] for i in range(2000))  # 2000 words, 3999 characters
    cfg = RecursiveConfig(size=4000, unit="chars", context=False)
    assert REGISTRY["recursive"](cfg).model_limit == model_max_tokens()
    assert [c.text for c in REGISTRY["recursive"](cfg, model_limit=10**9).chunk_text(text)] == [text]
    split = REGISTRY["recursive"](cfg).chunk_text(text)
    assert len(split) > 1 and all(counter("model").count(c.text) <= model_max_tokens() for c in split)
    for kind, cls in REGISTRY.items():
        assert cls(_ADAPTER.validate_python({"kind": kind}), model_limit=77).model_limit == 77, kind
    prof = strategy_profile("recursive", size=4000, unit="chars", context=False)
    unlimited = Router(prof, model_limit=10**9)
    assert unlimited.chunker_for("text").model_limit == 10**9
    assert Router(prof).chunker_for("text").model_limit == model_max_tokens()
    assert unlimited.fingerprint("text") != Router(prof).fingerprint("text")
    assert len(unlimited.chunker_for("text").chunk_text(text)) == 1


# ---------------------------------------------------------------------------------- counters


def test_only_tokens_py_touches_tokenizer_internals():
    """Chunkers use the public `Counter` protocol; tokenizer objects stay private to pipeline/tokens/."""
    root = Path(__file__).resolve().parents[1]
    private = re.compile(r"\._(?:fast|tok|enc)\b")
    offenders = [
        f"{p.relative_to(root)}:{n}"
        for folder in ("pipeline", "bench", "flows")
        for p in sorted((root / folder).rglob("*.py"))
        if root / "pipeline" / "tokens" not in p.parents
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if private.search(line)
    ]
    assert not offenders


@pytest.mark.parametrize("unit", UNITS)
def test_every_counter_counts_in_batches_and_gives_offsets(unit):
    c = counter(unit)
    texts = ["", "Straße 长城 🙂 e\u0301", "alpha, beta. Gamma!", "x" * 300]
    assert c.count_many(texts) == [c.count(t) for t in texts]
    for t in texts:
        offs = c.encode_offsets(t)
        assert all(0 <= s < e <= len(t) for s, e in offs) and offs == sorted(offs)
        if unit not in ("model", "words"):  # these two drop whitespace (and BERT normalizes)
            assert len(offs) == c.count(t)


def test_model_offsets_are_the_tokenizers_own():
    text = "Die Straße über naïve «quote» 3.50 Dr. e\u0301 長城 🙂 supercalifragilistic"
    enc = tokens.hf_tokenizer()(text, add_special_tokens=False, return_offsets_mapping=True)
    assert counter("model").encode_offsets(text) == [tuple(o) for o in enc["offset_mapping"]]
    starts, ends, words = tokens.model_counter().word_pieces(text)  # type: ignore[misc]
    assert list(zip(starts, ends, strict=True)) == counter("model").encode_offsets(text)
    assert len(words) == len(starts)


def _count_hello() -> None:
    assert tokens.counter("model").count("hello world") == 2


def _build_model_counters_at_once(n: int = 8, build=_count_hello) -> list[BaseException]:
    """Run `build` (by default: build the model counter) from n threads released together, after clearing
    every cache; the errors."""
    tokens.counter.cache_clear()
    tokens.hf_tokenizer.cache_clear()
    tokens.rust_tokenizer_json.cache_clear()
    barrier, errors = threading.Barrier(n), []

    def build_one() -> None:
        try:
            barrier.wait()
            build()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=build_one) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


def test_model_counter_builds_from_many_threads_at_once():
    try:
        assert _build_model_counters_at_once() == []
    finally:
        tokens.counter.cache_clear()
        tokens.hf_tokenizer.cache_clear()
        tokens.rust_tokenizer_json.cache_clear()


def test_transformers_is_imported_under_the_load_lock(monkeypatch):
    """transformers 5.x's lazy import fails when two threads enter it at once. It is imported already in
    this process, so a stand-in that fails the same way takes its place: without the lock it trips (the
    test can fail), with it it never does. (The model counter reads tokenizer.json without transformers
    where it can, so the threads load the transformers tokenizer itself, as bench and exports do.)"""
    real = tokens.hf_tokenizer()

    def load() -> None:
        assert tokens.hf_tokenizer() is real
    inside = threading.Lock()

    def lazy_attribute(name: str):
        if name != "AutoTokenizer":
            raise AttributeError(name)
        if not inside.acquire(blocking=False):
            raise ImportError("cannot import name 'AutoTokenizer' from 'transformers'")
        try:
            time.sleep(0.2)  # a second thread arriving now trips, as in the real lazy module
            return types.SimpleNamespace(from_pretrained=lambda path: real)
        finally:
            inside.release()

    fake = types.ModuleType("transformers")
    fake.__getattr__ = lazy_attribute  # type: ignore[method-assign]
    monkeypatch.setitem(sys.modules, "transformers", fake)
    try:
        with monkeypatch.context() as m:
            m.setattr(tokens.offline, "LOAD_LOCK", nullcontext())
            unguarded = _build_model_counters_at_once(build=load)
        assert any(isinstance(e, ImportError) for e in unguarded), "the stand-in should trip without a lock"
        assert _build_model_counters_at_once(build=load) == []
    finally:
        tokens.counter.cache_clear()
        tokens.hf_tokenizer.cache_clear()
        tokens.rust_tokenizer_json.cache_clear()
