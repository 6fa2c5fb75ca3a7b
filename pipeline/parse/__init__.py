"""The parser registry: one module per document type registers its parser with `@parser`.

A parser turns cleaned text into sections (the parents chunks hang from) and may rewrite the text (HTML
keeps only what is visible) or refine the document type (plain text that is a chat log). Adding a document
type is one module here, named in `MODULES` at the bottom, plus its suffixes in `sources.SUFFIXES`.
A binary type (PDF, Word) registers with `binary=True`: its parser gets the file's bytes, not decoded text,
and returns clean text (`normalize.clean` leaves it unchanged) with the pages and metadata it found.
Heavy libraries (markdown-it, bs4, tree-sitter) are imported inside the parsers, so importing this is cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from importlib import import_module
from typing import Any, Protocol

from pipeline.model import Section


@dataclass(frozen=True)
class Parsed:
    """What a parser makes of a document; `parse` fills `doc_type` and `mime` when the parser leaves them."""

    text: str  # what every offset points into: the cleaned text, or the visible text of a page
    sections: list[Section] = field(default_factory=list)
    title: str = ""  # from the document itself (H1, <title>), never the file name
    doc_type: str = ""  # "" keeps the registered type; text may turn out to be "chat"
    mime: str = ""  # "" takes the registered one
    pages: list[int] = field(default_factory=list)  # paged types: start offset of each page
    ocr_pages: dict[int, float] = field(default_factory=dict)  # page number -> OCR confidence
    warnings: list[str] = field(default_factory=list)  # e.g. pages left empty (no text layer, no OCR)
    metadata: dict[str, Any] = field(default_factory=dict)  # page count, OCR pages: documents.metadata


class ParseFn(Protocol):
    """The one signature every registered parser has, so `parse` needs no per-type branches."""

    def __call__(self, text: str, *, language: str | None, filename: str) -> Parsed: ...


class BinaryParseFn(Protocol):
    """The signature of a binary type's parser: the file's bytes in, clean text and sections out."""

    def __call__(self, data: bytes, *, language: str | None, filename: str) -> Parsed: ...


@dataclass(frozen=True)
class Parser:
    """A registered parser: its document type, the MIME template, and the function."""

    doc_type: str
    mime: str  # may name {language}: "text/x-{language}"
    fn: ParseFn | BinaryParseFn
    binary: bool = False  # fn takes the raw bytes (normalize skips decoding and cleanup)
    version: int = 1  # raised when the parser reads the same file into other sections (see `parser_key`)


_PARSERS: dict[str, Parser] = {}


def parser(doc_type: str, *, mime: str, binary: bool = False, version: int = 1) -> Callable[[Any], Any]:
    """Register the decorated function as the parser of `doc_type`; `mime` may use {language}.

    `binary=True`: the function is a `BinaryParseFn` and receives the file's bytes. `version`: raise it when
    the parser starts reading files of its type differently, so stored ones are read again (`parser_key`).
    """

    def register(fn: Any) -> Any:
        if doc_type in _PARSERS:
            raise ValueError(f"document type {doc_type!r} already has a parser ({_PARSERS[doc_type].fn!r})")
        _PARSERS[doc_type] = Parser(doc_type, mime, fn, binary, version)
        return fn

    return register


def parser_key(doc_type: str) -> str:
    """What a stored document's key adds for its parser: "" at version 1 (keys stored before versions stay
    valid), else ":parse=N". A new version makes every stored file of the type be read again once; only
    sections that come out different are chunked again (their fingerprints hold no parser version)."""
    entry = _PARSERS.get(doc_type)
    return f":parse={entry.version}" if entry is not None and entry.version > 1 else ""


def registered() -> dict[str, Parser]:
    """The registered parsers by document type (a copy: registration happens only at import)."""
    return dict(_PARSERS)


def is_binary(doc_type: str) -> bool:
    """Whether the type's parser reads bytes (PDF, Word) rather than decoded text."""
    entry = _PARSERS.get(doc_type)
    return entry is not None and entry.binary


def parse(doc_type: str, content: str | bytes, *, language: str | None = None, filename: str = "") -> Parsed:
    """Parse cleaned text (or a binary type's bytes) with the type's parser; ValueError names an unknown type."""
    entry = _PARSERS.get(doc_type)
    if entry is None:
        known = ", ".join(sorted(_PARSERS))
        raise ValueError(
            f"no parser for document type {doc_type!r} (registered: {known}); "
            "add a module under pipeline/parse/ with @parser and name it in pipeline.parse.MODULES"
        )
    if entry.binary != isinstance(content, bytes):
        want = "bytes" if entry.binary else "decoded text"
        raise TypeError(f"the parser of {doc_type!r} takes {want}, got {type(content).__name__}")
    out = entry.fn(content, language=language, filename=filename)  # type: ignore[arg-type]
    return replace(
        out,
        doc_type=out.doc_type or doc_type,
        mime=out.mime or entry.mime.format(language=language),
    )


#: The per-type modules: importing one registers its parser (each imports only the names defined above).
MODULES = ("code", "docx", "html", "markdown", "pdf", "text")
for _name in MODULES:
    import_module(f"{__name__}.{_name}")
