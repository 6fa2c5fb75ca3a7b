"""What is embedded before a chunk's text: the document's title and headings, clipped to a few word pieces.

Only what a profile names is embedded, so only its edits re-embed. A strategy with a richer context
(markdown's table header rows, code's imports and signatures) builds on `plain_context` and says in
its `context_scope` how far its context can differ between the spans of one section.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pipeline.model import Document, Section, heading_context
from pipeline.tokens import counter

#: The embedded context (title, heading path) never takes more than this many model word pieces.
MAX_CONTEXT_TOKENS = 48

#: How far the context of a span can differ from another's in one section: not at all ("section"), only
#: with where the span starts ("start"), or with the whole span ("span"); the model budget is asked once
#: per section, once per start, or once per span accordingly.
ContextScope = Literal["section", "start", "span"]


def plain_context(mode: str, doc: Document, section: Section) -> str:
    """What `mode` (a config's `context`) asks to embed: title, nearest heading, or both, or the path.

    With the nearest heading, a renamed heading higher up (a release note gaining its date) leaves the
    chunks below it as they were.
    """
    if mode == "none":
        return ""
    if mode == "path":
        return heading_context(doc, section)
    title = doc.title if mode in ("title", "title_heading") else ""
    headings: list[str] = []
    if mode in ("heading", "title_heading"):
        near = next((h for h in reversed(section.heading_path) if h), "")
        headings = [near] if near and (mode == "heading" or near != doc.title) else []
    return " > ".join(([title] if title else []) + headings)


@lru_cache(maxsize=8192)
def clip_context(model: str, limit: int, ctx: str) -> str:
    """A context cut to at most `limit` word pieces (at a word-piece boundary)."""
    cnt = counter("model", model)
    if cnt.count(ctx) <= limit:
        return ctx
    return ctx[: cnt.encode_offsets(ctx)[limit - 1][1]].rstrip()
