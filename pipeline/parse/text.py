"""Plain text: one section (split later by size), and a chat log recognised as doc_type "chat"."""

from __future__ import annotations

from pipeline.model import Section
from pipeline.parse import Parsed, parser
from pipeline.parse.chat import looks_like_chat


@parser("text", mime="text/plain")
def parse_text(text: str, *, language: str | None, filename: str) -> Parsed:
    """No structure to find in plain text; a transcript is typed "chat" so the chat chunker takes it."""
    return Parsed(text, [Section(0, len(text))], doc_type="chat" if looks_like_chat(text) else "")
