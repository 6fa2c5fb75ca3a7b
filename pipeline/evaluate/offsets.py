"""Offsets of the pipeline's normalized text mapped back to the raw corpus file the excerpts point into."""

from __future__ import annotations

import bisect
import unicodedata

from pipeline.evaluate.data import EvalError
from pipeline.model import Span


class OffsetMap:
    """Maps offsets of the pipeline's normalized text back to the raw corpus the excerpts point into."""

    def __init__(self, raw: str, norm: str, name: str) -> None:
        self.identity = raw == norm
        self.raw_b: list[int] = []
        self.norm_b: list[int] = []
        if self.identity:
            return
        from pipeline.normalize import clean

        if clean(raw) != norm:
            raise EvalError(
                f"corpus {name!r}: the pipeline rewrote the text beyond character cleanup (parsed as HTML?), "
                "so its offsets cannot be mapped to the file; evaluate it as text (as=text)"
            )
        # Cleanup is local: NFC acts on a base character with its combining marks, the rest per character
        # (and CRLF). Cleaning such segments one by one must rebuild the same text, or we refuse.
        raw_b, norm_b, pieces = [0], [0], []
        i, n = 0, len(raw)
        while i < n:
            j = i + 1
            if raw[i] == "\r" and j < n and raw[j] == "\n":
                j += 1
            while j < n and unicodedata.combining(raw[j]):
                j += 1
            piece = clean(raw[i:j])
            pieces.append(piece)
            raw_b.append(j)
            norm_b.append(norm_b[-1] + len(piece))
            i = j
        if "".join(pieces) != norm:
            raise EvalError(
                f"corpus {name!r}: normalization is not character-local here (e.g. Hangul jamo), so chunk "
                "offsets cannot be mapped back; NFC-normalize the corpus and its question offsets first"
            )
        self.raw_b, self.norm_b = raw_b, norm_b

    def to_raw(self, start: int, end: int) -> Span:
        """A normalized range as the smallest raw range that holds it."""
        if self.identity:
            return start, end
        i = bisect.bisect_right(self.norm_b, start) - 1
        j = bisect.bisect_left(self.norm_b, end)
        return self.raw_b[max(i, 0)], self.raw_b[min(j, len(self.raw_b) - 1)]
