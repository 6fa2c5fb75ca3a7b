"""Code: cut at syntax-tree boundaries (tree-sitter), embed each piece with its file's imports and scope.

normalize makes each top-level definition a section. Inside one, a span that is over budget is cut at the
line starts of its syntax nodes (class header | method | method ...), descending the tree only where a
piece is still too big; a leaf that is still too big (a long string, a huge expression) is cut by lines.
The pieces are then packed greedily; a class header, a decorator or a comment is glued to what follows.

What the model embeds is prefixed, never the stored span, with the file name, its imports and the
signatures of the enclosing class (and function, for a piece of an oversized one), within
`context_tokens` word pieces, so a method chunk still says where it lives and what it uses.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_right
from collections import OrderedDict
from collections.abc import Callable
from functools import cached_property
from typing import Any, ClassVar

from pipeline.chunkers.base import Chunker, register
from pipeline.chunkers.context import MAX_CONTEXT_TOKENS, ContextScope, clip_context
from pipeline.chunkers.pack import pack
from pipeline.chunkers.spans import Fits, Span, recursive_spans
from pipeline.chunkers.view import SectionView
from pipeline.model import Document, Section, strip_span
from pipeline.parse.code import CODE_DEFS, parse_tree

#: Separators for a leaf node (or a non-code document) that is still over budget: lines first.
CODE_SEPARATORS = ("\n\n", "\n", " ", "")

#: Top-level statements that are the file's imports, per grammar.
IMPORTS: dict[str, set[str]] = {
    "python": {"import_statement", "import_from_statement", "future_import_statement"},
    "javascript": {"import_statement"},
    "typescript": {"import_statement"},
    "tsx": {"import_statement"},
    "go": {"package_clause", "import_declaration"},
    "rust": {"use_declaration", "extern_crate_declaration"},
    "java": {"package_declaration", "import_declaration"},
}

#: Nodes whose first line is a signature worth repeating for the code inside them.
SCOPES: dict[str, set[str]] = {
    "python": {"class_definition", "function_definition"},
    "javascript": {"class_declaration", "class", "function_declaration", "method_definition",
                   "generator_function_declaration"},
    "typescript": {"class_declaration", "abstract_class_declaration", "interface_declaration",
                   "function_declaration", "method_definition", "enum_declaration", "module"},
    "go": {"type_declaration", "function_declaration", "method_declaration"},
    "rust": {"impl_item", "trait_item", "struct_item", "enum_item", "mod_item", "function_item"},
    "java": {"class_declaration", "interface_declaration", "enum_declaration", "record_declaration",
             "method_declaration", "constructor_declaration"},
}  # fmt: skip
SCOPES["tsx"] = SCOPES["typescript"]

_GLUE_LINE = re.compile(r"^\s*(?:#|//|/\*|\*|@|///|--)")


class _Parsed:
    """One parse of a file: the tree, offset maps, imports, and scope contexts computed on demand."""

    def __init__(self, text: str, lang: str, *, weigh: Callable[[str], int], keep: int) -> None:
        """`weigh` counts a signature's word pieces; a chain stops growing once it holds over `keep`."""
        self.text, self.lang = text, lang
        self._weigh, self._keep = weigh, keep
        self.tree, data, self.b2c = parse_tree(text, lang)
        if len(data) == len(text):
            self.c2b: Callable[[int], int] = lambda c: c
        else:
            cum = [0]
            for ch in text:
                cum.append(cum[-1] + len(ch.encode("utf-8")))
            self.c2b = cum.__getitem__
        wanted = IMPORTS.get(lang, set())
        top = self.tree.root_node.children
        #: the top-level nodes and their character ends (in order, so a section's are found by bisection)
        self.top, self.top_ends = top, [self.end(n) for n in top]
        self.imports = [
            (self.start(n), " ".join(text[self.start(n) : self.end(n)].split()))
            for n in top
            if n.type in wanted
        ]
        self.scopes: dict[int, tuple[list[str], bool]] = {}
        #: per node id: the (start byte, signature) of the scopes enclosing it and itself, outermost first,
        #: and their word pieces; no more once they weigh over `keep` (a node's chain is its parent's plus
        #: its own: built once)
        self._chains: dict[int, tuple[tuple[tuple[int, str], ...], int]] = {}
        #: syntax nodes visited to build chains (a measure of work for the tests: linear in the file)
        self.steps = 0

    @cached_property
    def _gaps(self) -> list[int]:
        """Where each run of white space starts, in order (`signatures` keys a position inside one by it)."""
        return [m.start() for m in re.finditer(r"\s+", self.text)]

    def start(self, node) -> int:
        return self.b2c(node.start_byte)

    def end(self, node) -> int:
        return self.b2c(node.end_byte)

    def signatures(self, pos: int) -> tuple[list[str], bool]:
        """First lines of the scopes (class, function) that enclose `pos` and start before it, outermost
        first, and whether more may have been left off (the outermost that weigh over `keep` are kept).

        Each node's chain is built once from its parent's, so nesting N deep costs O(N) rather than a walk
        to the root (itself O(depth) per step in tree-sitter) and an N-line context for every span.
        """
        found = self.scopes.get(pos)
        if found is not None:
            return found
        text = self.text
        if pos < len(text) and text[pos].isspace():
            # inside the white space between two tokens every position has the same innermost node and the
            # same scopes before it: one lookup per gap (deep indentation is thousands of positions a line)
            gaps = self._gaps
            gap = -2 - gaps[bisect_right(gaps, pos) - 1]  # negative: never a position
            found = self.scopes.get(gap)
            if found is None:
                found = self.scopes[gap] = self._signatures_at(pos)
            self.scopes[pos] = found
            return found
        found = self.scopes[pos] = self._signatures_at(pos)
        return found

    def _signatures_at(self, pos: int) -> tuple[list[str], bool]:
        b = self.c2b(pos)
        node = self.tree.root_node.descendant_for_byte_range(b, b)
        chain, weight = self._chain(node)
        # a scope that starts at pos does not enclose it (nor do scopes inside it)
        return [sig for s, sig in chain if s < b], weight > self._keep

    def _chain(self, node) -> tuple[tuple[tuple[int, str], ...], int]:
        """(start byte, signature) of the scopes from the root down to `node` included, capped; their weight."""
        chains = self._chains
        path = []
        while node is not None and node.id not in chains:
            path.append(node)
            node = node.parent
            self.steps += 1
        chain, weight = chains[node.id] if node is not None else ((), 0)
        kinds = SCOPES.get(self.lang, set())
        for n in reversed(path):
            if n.type in kinds and weight <= self._keep:
                s = self.start(n)
                e = self.text.find("\n", s)
                sig = self.text[s : e if e >= 0 else len(self.text)].strip()[:160]
                chain, weight = (*chain, (n.start_byte, sig)), weight + self._weigh(sig)
            chains[n.id] = chain, weight
        return chain, weight

    def all_signatures(self, pos: int) -> list[str]:
        """`signatures`, every one of them (the old walk to the root: for the rare context that needs it)."""
        b = self.c2b(pos)
        node = self.tree.root_node.descendant_for_byte_range(b, b)
        kinds = SCOPES.get(self.lang, set())
        sigs: list[str] = []
        while node is not None:
            if node.type in kinds and node.start_byte < b:
                s = self.start(node)
                e = self.text.find("\n", s)
                sigs.append(self.text[s : e if e >= 0 else len(self.text)].strip()[:160])
            node = node.parent
        return sigs[::-1]


@register
class CodeChunker(Chunker):
    """Syntax-tree pieces packed up to the budget; the embedded text knows imports and enclosing scope."""

    kind = "code"
    context_tokens: ClassVar[int] = 64
    #: imports and enclosing signatures differ with every span
    context_scope: ClassVar[ContextScope] = "span"

    def __init__(self, config: Any, **kw: Any) -> None:
        super().__init__(config, **kw)
        self._cache: OrderedDict[tuple[int, str], _Parsed] = OrderedDict()
        self._lock = threading.Lock()

    def parsed(self, doc: Document) -> _Parsed | None:
        """The syntax tree of a code document (parsed once, a few kept), or None for other text."""
        lang = doc.language or ""
        if doc.doc_type != "code" or lang not in CODE_DEFS:
            return None
        key = (id(doc.text), lang)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit.text is doc.text:
                return hit
        p = _Parsed(doc.text, lang, weigh=self.model_counter.count, keep=2 * self.context_tokens)
        with self._lock:
            self._cache[key] = p
            while len(self._cache) > 4:
                self._cache.popitem(last=False)
        return p

    # ------------------------------------------------------------------------------------ split

    def split(self, view: SectionView) -> list[Span]:
        fits, text = view.fits, view.text
        p = self.parsed(view.doc)
        if p is None:
            return pack(view, recursive_spans(text, view.start, view.end, fits, CODE_SEPARATORS), fits=fits)
        a, b = view.start, view.end
        nodes = []
        for n in p.top[bisect_right(p.top_ends, a) :]:  # the top-level nodes that overlap the section
            if p.start(n) >= b:
                break
            nodes.append(n)
        pieces: list[Span] = []
        for x, y in _cut(p, a, b, nodes, fits):
            x, y = strip_span(text, x, y)
            if y > x:
                pieces.append((x, y))
        return pack(view, pieces, fits=fits, glue=[_sticky(text, x, y) for x, y in pieces])

    # ---------------------------------------------------------------------------------- context

    def context_for(self, doc: Document, section: Section, span: Span) -> str:
        """File name, then imports (unless in the span) and enclosing signatures, within `context_tokens`."""
        if getattr(self.config, "context", "none") == "none":
            return ""
        p = self.parsed(doc)
        if p is None:  # not code: the plain heading context, as short as everywhere else
            base = super().context_for(doc, section, span)
            return clip_context(self.model, MAX_CONTEXT_TOKENS, base) if base else base
        name = section.heading_path[0] if section.heading_path else doc.title or doc.uri.rsplit("/", 1)[-1]
        head = [f"# {name}"] if name else []
        sigs, capped = p.signatures(span[0])
        budget = self.context_tokens - self._count("\n".join(head + sigs))
        if capped and budget >= -self.context_tokens:
            # the kept signatures must outweigh the clip twice over, or the left-off ones could show
            sigs = p.all_signatures(span[0])
            budget = self.context_tokens - self._count("\n".join(head + sigs))
        imports: list[str] = []
        for pos, line in p.imports:
            if span[0] <= pos < span[1]:  # already in the text itself
                continue
            cost = self._count(line)
            if cost > budget:
                break
            imports.append(line)
            budget -= cost
        return "\n".join(head + imports + sigs)

    def _count(self, text: str) -> int:
        """The model's count of a context part, memoized: every size check of a span asks for its context,
        and the spans under one scope share its file name, signatures and imports (a 1,500-deep file made
        390,000 checks, each tokenizing the same few hundred signature lines again)."""
        memo: dict[str, int] = self.__dict__.setdefault("_counted", {})
        n = memo.get(text)
        if n is None:
            if len(memo) >= 8192:
                memo.clear()
            n = memo[text] = self.model_counter.count(text)
        return n

    def metadata_for(self, doc: Document, section: Section, span: Span) -> dict[str, Any]:
        """The language, so SQL can filter code chunks by it."""
        return {"language": doc.language} if doc.doc_type == "code" and doc.language else {}


def _cut(p: _Parsed, a: int, b: int, nodes: list, fits: Fits) -> list[Span]:
    """Pieces of [a, b) at the line starts of `nodes`, descending into children where needed."""
    if fits(a, b):
        return [(a, b)]
    text = p.text
    cuts = sorted({ls for n in nodes if a < (ls := _own_line_start(text, p.start(n))) < b})
    if cuts:
        bounds = [a, *cuts, b]
        out: list[Span] = []
        for x, y in zip(bounds, bounds[1:], strict=False):
            out += _cut(p, x, y, [n for n in nodes if x <= p.start(n) < y], fits)
        return out
    children = [c for n in nodes for c in n.children if a <= p.start(c) < b]
    if children:
        return _cut(p, a, b, children, fits)
    return recursive_spans(text, a, b, fits, CODE_SEPARATORS)


def _own_line_start(text: str, pos: int) -> int:
    """Start of pos's line if only whitespace precedes pos on it, else -1 (no cut inside a line)."""
    ls = text.rfind("\n", 0, pos) + 1
    return ls if not text[ls:pos].strip() else -1


def _sticky(text: str, a: int, b: int) -> bool:
    """A piece that opens a block, or is only comments/decorators, belongs with the next one."""
    lines = [ln for ln in text[a:b].split("\n") if ln.strip()]
    if not lines:
        return False
    return lines[-1].rstrip().endswith((":", "{")) or all(_GLUE_LINE.match(ln) for ln in lines)
