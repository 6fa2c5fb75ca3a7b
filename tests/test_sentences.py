"""The English sentence rules of `sentence_spans` (pipeline/chunkers/sentence.py), and its offset contract
for any text: contiguous spans that cover [a, b) exactly."""

from __future__ import annotations

from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.chunkers import sentence
from pipeline.chunkers.sentence import sentence_spans
from tests.test_chunkers import PROPS, prose


def sents(text: str, language: str = "en") -> list[str]:
    return [text[a:b].strip() for a, b in sentence_spans(text, 0, len(text), language=language)]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # abbreviations: titles always, others before a number or a bracket, not before a capital
        (
            "Dr. Smith met Mr. Jones at St. Mary's. They talked.",
            ["Dr. Smith met Mr. Jones at St. Mary's.", "They talked."],
        ),
        ("See No. 5 and pp. 12-14 in Vol. 2. Then stop.", ["See No. 5 and pp. 12-14 in Vol. 2.", "Then stop."]),
        ("Smith et al. (2003) found it. Jones et al. 2004 did not.", ["Smith et al. (2003) found it.", "Jones et al. 2004 did not."]),
        ("We sold pens, cups etc. The rest was kept.", ["We sold pens, cups etc.", "The rest was kept."]),
        ("He said no. Then he left.", ["He said no.", "Then he left."]),
        ("It was born ca. 500 years ago, cf. Smith. It died.", ["It was born ca. 500 years ago, cf. Smith.", "It died."]),
        # initials, and multi-period abbreviations
        ("J. R. R. Tolkien wrote it. He died in 1973.", ["J. R. R. Tolkien wrote it.", "He died in 1973."]),
        ("Thanks to L. K. A. Jayasinghe for help.", ["Thanks to L. K. A. Jayasinghe for help."]),
        ("It needs vitamin C. The dose is small.", ["It needs vitamin C.", "The dose is small."]),
        ("She has a Ph.D. in physics. It was hard.", ["She has a Ph.D. in physics.", "It was hard."]),
        ("He moved to the U.S. The weather was fine.", ["He moved to the U.S.", "The weather was fine."]),
        ("It was e.g. cheap, i.e. fine. Good.", ["It was e.g. cheap, i.e. fine.", "Good."]),
        ("We met at 9 a.m. It rained.", ["We met at 9 a.m.", "It rained."]),
        # decimals and numbers
        ("It cost $3.50 today. The rate was 2.5%. Version 3.11 is out.", ["It cost $3.50 today.", "The rate was 2.5%.", "Version 3.11 is out."]),
        ("It is listed in Table 1. The rest follows.", ["It is listed in Table 1.", "The rest follows."]),
        ("In 2019. 15 people came.", ["In 2019.", "15 people came."]),
        # quotes and brackets
        (
            '"Really?" she asked. He said "Stop. Now." and left. Then it rained.',
            ['"Really?" she asked.', 'He said "Stop. Now." and left.', "Then it rained."],
        ),
        ("He said, “Go home.” Then he left.", ["He said, “Go home.”", "Then he left."]),
        ("Go on (see Fig. 2. It shows this) now. Yes.", ["Go on (see Fig. 2. It shows this) now.", "Yes."]),
        ("It ended. (The rest is lost.) Nobody knows.", ["It ended.", "(The rest is lost.)", "Nobody knows."]),
        # ellipses, question and exclamation marks
        ("Wait... what was that? No... The end.", ["Wait... what was that?", "No...", "The end."]),
        ("Well… Maybe! Who knows? nobody does.", ["Well…", "Maybe!", "Who knows? nobody does."]),
        # line breaks: always a cut, unless the next line goes on in lower case
        ("Title\nThe body starts here.\n\n  Next para", ["Title", "The body starts here.", "Next para"]),
        ("a long sentence that\nwraps here. And another.", ["a long sentence that\nwraps here.", "And another."]),
        # list markers at the start of a line or sentence, and inline lists
        ("Steps:\n1. Open the file.\n2. Save it.", ["Steps:", "1. Open the file.", "2. Save it."]),
        ("A. Introduction\nIV. Results are good.", ["A. Introduction", "IV. Results are good."]),
        ("It is done. 2. Outdoor activities are next.", ["It is done.", "2. Outdoor activities are next."]),
        ("Steps: 1. Open it, 2. Save it, 3. Close it. Done.", ["Steps: 1. Open it, 2. Save it, 3. Close it.", "Done."]),
        # CJK punctuation needs no space; an escaped line break in dumped JSON counts as one
        ("长城很长。它很古老！Yes.", ["长城很长。", "它很古老！", "Yes."]),
        (r"It ended.\nThen it began.", [r"It ended.\n", "Then it began."]),
    ],
)  # fmt: skip
def test_english_rules(text, expected):
    assert sents(text) == expected


def test_unknown_languages_take_the_english_rules():
    text = "Dr. Smith came. 它很古老！Then he left."
    assert sents(text, "xx") == sents(text) == ["Dr. Smith came.", "它很古老！", "Then he left."]


def test_english_never_asks_pysbd():
    text = "Dr. Smith paid $3.50 at 9 a.m. on Jan. 5. " * 50 + '"Really?" she asked.\n1. One\n2. Two'
    with mock.patch.object(sentence, "_pysbd", side_effect=AssertionError("pysbd called")):
        assert len(sentence_spans(text, 0, len(text))) == 53


def test_spans_of_a_stretch_stay_inside_it():
    text = "Before. One sentence. Two sentences. After."
    a, b = text.index("One"), text.index(" After")
    spans = sentence_spans(text, a, b)
    assert [text[x:y] for x, y in spans] == ["One sentence. ", "Two sentences."]
    assert sentence_spans(text, 5, 5) == []


#: Text made of what the rules look at: punctuation, quotes, brackets, spaces, escapes, cases, digits.
TRICKY = st.lists(
    st.sampled_from(
        [*"aZ1 .!?…。！\n\t\"'“”()[]\\,:;-", "Dr.", "e.g.", "U.S.", "No. ", "J. ", " the", "12. "]
    ),
    max_size=150,
).map("".join)


def _check_cover(text: str, a: int, b: int, language: str) -> None:
    spans = sentence_spans(text, a, b, language=language)
    if a >= b:
        assert spans == []
        return
    assert spans[0][0] == a and spans[-1][1] == b
    assert all(x < y for x, y in spans)
    assert all(y == x2 for (_, y), (x2, _) in zip(spans, spans[1:], strict=False))
    for x, _ in spans[1:]:  # a sentence starts at a non-space character, never in lower case
        assert not text[x].isspace() and not text[x].islower(), (text, x)


@settings(PROPS, max_examples=300)
@given(text=st.one_of(TRICKY, prose(), st.text(max_size=200)), data=st.data())
def test_spans_are_contiguous_and_cover_any_text(text, data):
    a = data.draw(st.integers(0, len(text)))
    b = data.draw(st.integers(a, len(text)))
    _check_cover(text, a, b, data.draw(st.sampled_from(["en", "xx"])))


@settings(PROPS, max_examples=6)
@given(text=prose(max_size=40))
def test_spans_cover_text_with_pysbd_languages_too(text):
    for language in ("de", "zh"):
        _check_cover(text, 0, len(text), language)
