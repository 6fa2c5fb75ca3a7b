"""Source code: one section per top-level definition (tree-sitter), the rest grouped as 'module'."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from typing import TYPE_CHECKING

from pipeline.model import Section
from pipeline.parse import Parsed, parser

if TYPE_CHECKING:
    from tree_sitter import Language, Tree

#: Top-level node types that become sections of their own, per tree-sitter grammar.
CODE_DEFS: dict[str, set[str]] = {
    "python": {"function_definition", "class_definition", "decorated_definition"},
    "javascript": {"function_declaration", "class_declaration", "export_statement", "lexical_declaration",
                   "generator_function_declaration"},
    "typescript": {"function_declaration", "class_declaration", "export_statement", "interface_declaration",
                   "type_alias_declaration", "enum_declaration", "abstract_class_declaration", "lexical_declaration"},
    "go": {"function_declaration", "method_declaration", "type_declaration"},
    "rust": {"function_item", "impl_item", "struct_item", "enum_item", "trait_item", "mod_item", "macro_definition"},
    "java": {"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"},
}  # fmt: skip
CODE_DEFS["tsx"] = CODE_DEFS["typescript"]
_COMMENTS = {"comment", "line_comment", "block_comment"}


def ts_language(lang: str) -> Language:
    """The tree-sitter Language for a code language, from its PyPI grammar package."""
    from tree_sitter import Language

    if lang == "python":
        import tree_sitter_python as m

        return Language(m.language())
    if lang == "javascript":
        import tree_sitter_javascript as m

        return Language(m.language())
    if lang in ("typescript", "tsx"):
        import tree_sitter_typescript as m

        return Language(m.language_typescript() if lang == "typescript" else m.language_tsx())
    if lang == "go":
        import tree_sitter_go as m

        return Language(m.language())
    if lang == "rust":
        import tree_sitter_rust as m

        return Language(m.language())
    if lang == "java":
        import tree_sitter_java as m

        return Language(m.language())
    raise ValueError(f"no tree-sitter grammar for {lang!r}")


def parse_tree(text: str, lang: str) -> tuple[Tree, bytes, Callable[[int], int]]:
    """Parse source text; returns (tree, bytes, byte->char offset function)."""
    from tree_sitter import Parser

    data = text.encode("utf-8")
    tree = Parser(ts_language(lang)).parse(data)
    return tree, data, byte_to_char(text, data)


def byte_to_char(text: str, data: bytes | None = None) -> Callable[[int], int]:
    """A function mapping UTF-8 byte offsets of `text` to character offsets (tree-sitter counts bytes)."""
    data = text.encode("utf-8") if data is None else data
    if len(data) == len(text):
        return lambda b: b
    cum = [0]
    for ch in text:
        cum.append(cum[-1] + len(ch.encode("utf-8")))

    def conv(b: int) -> int:
        return bisect.bisect_left(cum, b)

    return conv


def parse_code(text: str, lang: str, filename: str) -> list[Section]:
    """One section per top-level definition (with its leading comments); the rest grouped as 'module'."""
    tree, data, b2c = parse_tree(text, lang)
    defs = CODE_DEFS.get(lang, set())
    sections: list[Section] = []
    cursor = 0
    pending_start: int | None = None  # start of comments directly above the next definition
    for node in tree.root_node.children:
        start, end = b2c(node.start_byte), b2c(node.end_byte)
        if node.type in _COMMENTS:
            if pending_start is None:
                pending_start = start
            continue
        if node.type in defs:
            s = pending_start if pending_start is not None else start
            s = _line_start(text, s)
            if s > cursor:
                sections.append(Section(cursor, s, 1, (filename,), "module"))
            lines = [ln.strip() for ln in text[start:end].split("\n") if ln.strip()]
            # the signature, not a decorator / annotation line above it
            title = next((ln for ln in lines if not ln.startswith("@")), lines[0]).rstrip("{:").strip()
            e = _line_end(text, end)
            sections.append(Section(s, e, 1, (filename, title[:120]), "definition"))
            cursor = e
        pending_start = None
    if cursor < len(text):
        sections.append(Section(cursor, len(text), 1, (filename,), "module"))
    return sections or [Section(0, len(text), 1, (filename,), "module")]


@parser("code", mime="text/x-{language}")
def _parse(text: str, *, language: str | None, filename: str) -> Parsed:
    """The registered form of parse_code: a file of unknown language is read as Python."""
    return Parsed(text, parse_code(text, language or "python", filename))


def _line_start(text: str, pos: int) -> int:
    """Offset of the start of the line holding `pos`."""
    return text.rfind("\n", 0, pos) + 1


def _line_end(text: str, pos: int) -> int:
    """Offset just past the newline ending the line holding `pos` (or the end of the text)."""
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1
