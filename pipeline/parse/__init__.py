"""The parser registry: one module per document type registers its parser with `@parser`.

A parser turns cleaned text into sections (the parents chunks hang from) and may rewrite the text (HTML
keeps only what is visible) or refine the document type (plain text that is a chat log). Adding a document
type is one module here, named in `MODULES` at the bottom, plus its suffixes in `sources.SUFFIXES`.
Heavy libraries (markdown-it, bs4, tree-sitter) are imported inside the parsers, so importing this is cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import import_module
from typing import Protocol

from pipeline.model import Section


@dataclass(frozen=True)
class Parsed:
    """What a parser makes of a document; `parse` fills `doc_type` and `mime` when the parser leaves them."""

    text: str  # what every offset points into: the cleaned text, or the visible text of a page
    sections: list[Section] = field(default_factory=list)
    title: str = ""  # from the document itself (H1, <title>), never the file name
    doc_type: str = ""  # "" keeps the registered type; text may turn out to be "chat"
    mime: str = ""  # "" takes the registered one


class ParseFn(Protocol):
    """The one signature every registered parser has, so `parse` needs no per-type branches."""

    def __call__(self, text: str, *, language: str | None, filename: str) -> Parsed: ...


@dataclass(frozen=True)
class Parser:
    """A registered parser: its document type, the MIME template, and the function."""

    doc_type: str
    mime: str  # may name {language}: "text/x-{language}"
    fn: ParseFn


_PARSERS: dict[str, Parser] = {}


def parser(doc_type: str, *, mime: str) -> Callable[[ParseFn], ParseFn]:
    """Register the decorated function as the parser of `doc_type`; `mime` may use {language}."""

    def register(fn: ParseFn) -> ParseFn:
        if doc_type in _PARSERS:
            raise ValueError(f"document type {doc_type!r} already has a parser ({_PARSERS[doc_type].fn!r})")
        _PARSERS[doc_type] = Parser(doc_type, mime, fn)
        return fn

    return register


def registered() -> dict[str, Parser]:
    """The registered parsers by document type (a copy: registration happens only at import)."""
    return dict(_PARSERS)


def parse(doc_type: str, text: str, *, language: str | None = None, filename: str = "") -> Parsed:
    """Parse cleaned text with the parser registered for `doc_type`; ValueError names an unknown type."""
    entry = _PARSERS.get(doc_type)
    if entry is None:
        known = ", ".join(sorted(_PARSERS))
        raise ValueError(
            f"no parser for document type {doc_type!r} (registered: {known}); "
            "add a module under pipeline/parse/ with @parser and name it in pipeline.parse.MODULES"
        )
    out = entry.fn(text, language=language, filename=filename)
    return replace(
        out,
        doc_type=out.doc_type or doc_type,
        mime=out.mime or entry.mime.format(language=language),
    )


#: The per-type modules: importing one registers its parser (each imports only the names defined above).
MODULES = ("code", "html", "markdown", "text")
for _name in MODULES:
    import_module(f"{__name__}.{_name}")
