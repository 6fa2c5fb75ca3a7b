"""Deeply nested code chunks in time linear in its size, with the same chunks as before (issue 29, defect 9).

A file of 1,500 nested `def`s used to run for over 20 minutes: every span's context walked to the root
(tree-sitter finds a parent by descending from the root) and carried every enclosing signature, so the work
was cubic in the depth. The work is counted here (syntax nodes visited, signatures kept), not timed.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pipeline.chunkers import REGISTRY
from pipeline.chunkers.code import CodeChunker
from pipeline.config import _ADAPTER
from pipeline.embed.meta import model_max_tokens
from pipeline.model import Chunk, Document
from pipeline.normalize import normalize
from pipeline.sources import SourceFile
from pipeline.tokens import counter


def nested_defs(depth: int, indent: str = " ") -> str:
    """`depth` functions each defined inside the one before (a pathological but valid Python file).

    tree-sitter's Python scanner keeps indents below 256 columns: deeper, the tree is error recovery."""
    lines = ["import os", "from typing import Any", ""]
    lines += [indent * i + f"def level_{i}(x_{i}: Any, y: int = {i}) -> Any:" for i in range(depth)]
    lines.append(indent * depth + "return os.sep")
    return "\n".join(lines) + "\n"


def nested_functions(depth: int) -> str:
    """`depth` JavaScript functions each inside the one before: a syntax tree really that deep."""
    opens = "".join(
        f"function level_{i}(x_{i}, y = {i}) {{\n  const v_{i} = x_{i} + y;\n" for i in range(depth)
    )
    return 'import fs from "fs";\n\n' + opens + "return fs.sep;\n" + "}\n" * depth


def code_doc(tmp_path: Path, text: str, name: str = "deep.py", lang: str = "python") -> Document:
    path = tmp_path / name
    path.write_text(text)
    return normalize(SourceFile(path, path.as_uri(), "code", lang), text.encode(), section_tokens=1024)


def chunker(size: int = 128) -> CodeChunker:
    ch = REGISTRY["code"](_ADAPTER.validate_python({"kind": "code", "size": size}))
    assert isinstance(ch, CodeChunker)
    return ch


def check(ch: CodeChunker, doc: Document) -> list[Chunk]:
    """The offset contract and both budgets for every chunk; the chunks."""
    unit, model, limit = counter("cl100k_base"), counter("model"), model_max_tokens()
    chunks = [c for _, cs in ch.chunk_document(doc) for c in cs]
    assert chunks
    for c in chunks:
        assert c.text == doc.text[c.start : c.end] and c.text.strip() == c.text
        assert c.token_count == unit.count(c.text) <= ch.config.size
        assert model.count(c.context) <= ch.context_tokens
        assert model.count(c.embed_text) <= limit
    return chunks


def test_1500_nested_python_defs_chunk_within_budgets(tmp_path: Path) -> None:
    doc = code_doc(tmp_path, nested_defs(1500))
    chunks = check(ch := chunker(), doc)
    assert "return os.sep" in chunks[-1].text
    p = ch.parsed(doc)
    assert p is not None
    assert p.steps <= 10 * 1500, p.steps


def test_1500_nested_functions_chunk_within_budgets_in_linear_work(tmp_path: Path) -> None:
    depth = 1500
    doc = code_doc(tmp_path, nested_functions(depth), "deep.js", "javascript")
    chunks = check(ch := chunker(), doc)
    mid = next(c for c in chunks if "function level_700(" in c.text)
    assert mid.context.split("\n")[1:3] == [
        "function level_0(x_0, y = 0) {",
        "function level_1(x_1, y = 1) {",
    ]
    p = ch.parsed(doc)
    assert p is not None
    # each syntax node on the way up is visited once to build the chains (a few per level), and no chain
    # holds more than the signatures that fill twice the context's budget
    assert p.steps <= 10 * depth, p.steps
    assert max(len(chain) for chain, _ in p._chains.values()) <= 2 * ch.context_tokens


def test_the_work_grows_linearly_with_the_depth(tmp_path: Path) -> None:
    steps = {}
    for depth in (400, 800):
        ch = chunker()
        doc = code_doc(tmp_path, nested_functions(depth), "deep.js", "javascript")
        ch.chunk_document(doc)
        p = ch.parsed(doc)
        assert p is not None
        steps[depth] = p.steps
    assert steps[800] < 2.2 * steps[400], steps  # quadratic would be 4x


@pytest.mark.parametrize("depth", [12, 40, 90])
def test_kept_signatures_give_the_same_chunks_as_all_of_them(tmp_path: Path, depth: int) -> None:
    """The chains are cut once they outweigh the clipped context; the chunks must not change for it."""
    for doc in (
        code_doc(tmp_path, nested_defs(depth, indent="  ")),
        code_doc(tmp_path, nested_functions(depth), "deep.js", "javascript"),
    ):
        ours = chunker(64)
        everything = chunker(64)
        p = everything.parsed(doc)
        assert p is not None
        p._keep = sys.maxsize  # every signature kept: the context as it was built before the cap
        assert ours.chunk_document(doc) == everything.chunk_document(doc)
        assert max(len(chain) for chain, _ in p._chains.values()) >= depth - 1  # none left off
