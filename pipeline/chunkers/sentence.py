"""Whole sentences grouped up to the budget, with sentence overlap.

Sentences come from pysbd: rule-based (no model to download), 22 languages including de, zh and ja, and
it knows abbreviations ("Dr.", "z. B."), decimals ("3.50") and quotes. It runs offline and keeps the text
as is with `clean=False`; we still map its sentences back by searching forward from a cursor, so a quirk of
its output can only merge two sentences, never lose text or shift an offset. One repair on top: a
"sentence" that starts in lower case is joined to the one before (an abbreviation pysbd did not know,
such as German "Jh.").
"""

from __future__ import annotations

import pysbd

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.spans import Fits
from pipeline.model import Document, Section, Span, strip_span

#: pysbd's languages; anything else falls back to English rules (which also cut at 。！？).
PYSBD_LANGUAGES = frozenset(pysbd.languages.LANGUAGE_CODES)


def sentence_spans(text: str, a: int, b: int, *, language: str = "en") -> list[Span]:
    """Contiguous spans of [a, b), one per sentence; whitespace stays with the sentence before it."""
    lang = language if language in PYSBD_LANGUAGES else "en"
    # a fresh segmenter per call: it is cheap (microseconds) and pysbd keeps per-text state on it
    sents = pysbd.Segmenter(language=lang, clean=False).segment(text[a:b])
    starts = [a]
    cursor = a
    for s in sents:
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
