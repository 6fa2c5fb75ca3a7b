"""Small text statistics used in the examples: word counts and reading time."""

from __future__ import annotations

import re
from dataclasses import dataclass

WORD = re.compile(r"\w+")
WORDS_PER_MINUTE = 230


@dataclass
class TextStats:
    """Counts for one text."""

    words: int
    sentences: int

    @property
    def reading_minutes(self) -> float:
        """Minutes an adult needs to read the text."""
        return self.words / WORDS_PER_MINUTE


def count_words(text: str) -> int:
    """Number of word tokens in the text."""
    return len(WORD.findall(text))


def count_sentences(text: str) -> int:
    """Number of sentences, ending in '.', '!' or '?'."""
    return max(1, len(re.findall(r"[.!?]+(\s|$)", text)))


def analyse(text: str) -> TextStats:
    """Word and sentence counts of a text."""
    return TextStats(words=count_words(text), sentences=count_sentences(text))
