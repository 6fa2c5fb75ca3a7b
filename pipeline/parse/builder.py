"""Text assembly for binary types: blocks appended in reading order, with the offsets sections and pages need."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline.model import Section, Span
from pipeline.parse.sections import Head, heading_sections


@dataclass
class TextBuilder:
    """Appends blocks separated by blank lines and records headings, atomic ranges and page starts."""

    parts: list[str] = field(default_factory=list)
    size: int = 0
    heads: list[Head] = field(default_factory=list)
    atomic: list[Span] = field(default_factory=list)
    pages: list[int] = field(default_factory=list)

    def add(self, text: str, *, atomic: bool = False) -> Span:
        """Append one block (a paragraph, a heading, a table) and return its span in the final text."""
        from pipeline.normalize import clean  # the one definition of clean text (normalize imports parse)

        text = clean(text).strip("\n")
        if not text.strip():
            return self.size, self.size
        if self.parts:
            self.parts.append("\n\n")
            self.size += 2
        start = self.size
        self.parts.append(text)
        self.size += len(text)
        if atomic:
            self.atomic.append((start, self.size))
        return start, self.size

    def heading(self, text: str, level: int, *, title: str | None = None) -> Span:
        """Append a heading block: a section of `level` starts here, named `title` (default: its text)."""
        span = self.add(text)
        if span[1] > span[0]:
            self.heads.append((span[0], max(1, min(level, 6)), title or self.parts[-1]))
        return span

    def page(self) -> None:
        """Mark the start of the next page (the offset its first block will get)."""
        self.pages.append(self.size + 2 if self.parts else 0)

    @property
    def text(self) -> str:
        return "".join(self.parts)

    def sections(self, heads: list[Head] | None = None) -> list[Section]:
        """Heading sections over the text; `heads` replaces the recorded ones (a PDF outline)."""
        from pipeline.normalize import clean

        chosen = self.heads if heads is None else heads
        named = [(off, level, " ".join(clean(t).split())[:200]) for off, level, t in chosen]
        return heading_sections(self.text, sorted(named, key=lambda h: h[0]), self.atomic)
