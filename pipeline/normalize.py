"""Decode bytes, clean the text, and parse it into a section tree (the parents chunks hang from)."""

from __future__ import annotations

import bisect
import codecs
import re
import unicodedata

from pipeline.errors import InputError, SkipFile
from pipeline.model import Document, Section, sha256
from pipeline.sources import SourceFile
from pipeline.tokens import counter

# --------------------------------------------------------------------------------------------- decode

_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
]


def decode(data: bytes, uri: str) -> tuple[str, list[str]]:
    """Bytes to str: BOM, then strict UTF-8, then a detected encoding with a recorded warning."""
    warnings: list[str] = []
    for bom, enc in _BOMS:
        if data.startswith(bom):
            try:
                return data[len(bom) :].decode(enc), warnings
            except UnicodeDecodeError as exc:
                raise InputError(
                    uri, f"has a {enc} byte-order mark but is not valid {enc} ({exc.reason})"
                ) from exc
    if _looks_binary(data):
        raise InputError(uri, "looks like a binary file (NUL bytes or mostly control bytes), not text")
    try:
        return data.decode("utf-8"), warnings
    except UnicodeDecodeError as exc:
        bad = f"invalid UTF-8 at byte {exc.start} (0x{data[exc.start]:02x})"
    from charset_normalizer import from_bytes

    best = from_bytes(data).best()
    enc = best.encoding if best is not None else "cp1252"
    try:
        text = data.decode(enc)
    except (UnicodeDecodeError, LookupError):
        enc, text = "latin-1", data.decode("latin-1")
    warnings.append(f"{bad}; decoded as {enc} — re-save the file as UTF-8 to silence this")
    return text, warnings


def _looks_binary(data: bytes) -> bool:
    head = data[:8192]
    if b"\x00" in head:
        return True
    if not head:
        return False
    ctrl = sum(1 for b in head if b < 32 and b not in (9, 10, 12, 13, 27))
    return ctrl / len(head) > 0.1


# ---------------------------------------------------------------------------------------------- clean

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f\u200b\u200e\u200f\u2060\ufeff]")
_LINE_SEP = re.compile(r"\r\n?|[\u2028\u2029\x85\x0c]")


def clean(text: str) -> str:
    """NFC, '\\n' newlines, no control or zero-width characters, tabs and text kept otherwise."""
    text = unicodedata.normalize("NFC", text)
    text = _LINE_SEP.sub("\n", text)
    return _CONTROL.sub("", text)


# --------------------------------------------------------------------------------------------- parse


def normalize(src: SourceFile, data: bytes, *, section_tokens: int = 1024) -> Document:
    """The whole stage: decode, clean, parse to sections; InputError or SkipFile for bad input."""
    if not data:
        raise SkipFile(src.uri, "empty file (0 bytes), nothing to index")
    text, warnings = decode(data, src.uri)
    doc_type = src.doc_type
    if doc_type == "html":
        text, sections, title = parse_html(clean(text))
        mime = "text/html"
    else:
        text = clean(text)
        title = ""
        if doc_type == "markdown":
            sections, title = parse_markdown(text)
            mime = "text/markdown"
        elif doc_type == "code":
            sections = parse_code(text, src.language or "python", src.path.name)
            mime = f"text/x-{src.language}"
        else:
            if looks_like_chat(text):
                doc_type = "chat"
            sections = [Section(0, len(text))]
            mime = "text/plain"
    if not text.strip():
        raise SkipFile(src.uri, "no text left after cleaning (whitespace or markup only)")
    sections = split_large_sections(text, sections, max_tokens=section_tokens)
    sections = [_strip_section(text, s) for s in sections if text[s.start : s.end].strip()]
    _link_parents(sections)
    return Document(
        uri=src.uri,
        doc_type=doc_type,
        text=text,
        sections=sections,
        language=src.language,
        title=title,  # from the document itself (H1, <title>); a file name says too little to embed
        warnings=warnings,
        raw_hash=sha256(data),
        mime=mime,
    )


def strip_span(text: str, a: int, b: int) -> tuple[int, int]:
    """Shrink a span to exclude leading and trailing whitespace."""
    while a < b and text[a].isspace():
        a += 1
    while b > a and text[b - 1].isspace():
        b -= 1
    return a, b


def _strip_section(text: str, s: Section) -> Section:
    """Sections span their content without surrounding whitespace: identity survives reflowing gaps."""
    s.start, s.end = strip_span(text, s.start, s.end)
    return s


def _link_parents(sections: list[Section]) -> None:
    """Parent = the nearest earlier section with a shorter heading path that prefixes this one."""
    stack: list[int] = []
    for i, s in enumerate(sections):
        while stack and not (
            len(sections[stack[-1]].heading_path) < len(s.heading_path)
            and s.heading_path[: len(sections[stack[-1]].heading_path)] == sections[stack[-1]].heading_path
        ):
            stack.pop()
        s.parent = stack[-1] if stack else None
        if s.kind != "part":
            stack.append(i)


class _Lines:
    """Line number -> character offset."""

    def __init__(self, text: str) -> None:
        self.starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.n = len(text)

    def offset(self, line: int) -> int:
        return self.starts[line] if line < len(self.starts) else self.n


#: A markdown document's first H1 is its title only if it starts within this many characters.
TITLE_WITHIN = 1000


def parse_markdown(text: str) -> tuple[list[Section], str]:
    """Sections from ATX/setext headings (markdown-it-py); fences and tables recorded as atomic."""
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark").enable("table")
    tokens = md.parse(text)
    lines = _Lines(text)
    heads: list[tuple[int, int, str]] = []  # (offset, level, title)
    atomic: list[tuple[int, int]] = []
    for i, tok in enumerate(tokens):
        if tok.type == "heading_open" and tok.map and tok.level == 0:
            # a setext heading can underline a whole paragraph: one line of at most 200 characters
            title = " ".join(tokens[i + 1].content.split())[:200] if i + 1 < len(tokens) else ""
            heads.append((lines.offset(tok.map[0]), int(tok.tag[1]), title))
        elif tok.type in ("fence", "code_block", "table_open", "html_block") and tok.map:
            atomic.append((lines.offset(tok.map[0]), _rstrip_to(text, lines.offset(tok.map[1]))))
    sections: list[Section] = []
    path: list[tuple[int, str]] = []
    first = heads[0][0] if heads else len(text)
    if first > 0:
        sections.append(Section(0, first, 0, (), "preamble"))
    for j, (off, level, title) in enumerate(heads):
        end = heads[j + 1][0] if j + 1 < len(heads) else len(text)
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, title))
        sections.append(Section(off, end, level, tuple(t for _, t in path), "heading"))
    for s in sections:
        s.atomic = [(a, b) for a, b in atomic if a >= s.start and b <= s.end]
    # The title is an H1 that is the first heading, near the top (a badge line may precede it). An H1 deep in
    # the text (in a file that is not really markdown, a paragraph underlined by a stray "=") would otherwise
    # be embedded with every chunk of the document.
    doc_title = heads[0][2] if heads and heads[0][1] == 1 and heads[0][0] <= TITLE_WITHIN else ""
    return sections, doc_title


def _rstrip_to(text: str, end: int) -> int:
    """Move an end offset back over trailing newlines."""
    while end > 0 and text[end - 1] == "\n":
        end -= 1
    return end


# ---------------------------------------------------------------------------------------------- html

_DROP_TAGS = [
    "script",
    "style",
    "noscript",
    "template",
    "nav",
    "footer",
    "iframe",
    "svg",
    "form",
    "aside",
    "button",
]
_BOILERPLATE = re.compile(
    r"\b(cookie|consent|sidebar|breadcrumb|navbar|site-header|site-footer|advert|banner)\b", re.I
)
_BLOCK = {
    "p", "div", "section", "article", "main", "header", "blockquote", "ul", "ol", "li", "dl", "dt", "dd",
    "figure", "figcaption", "details", "summary", "address", "hr", "body", "html",
}  # fmt: skip
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}


def parse_html(html: str) -> tuple[str, list[Section], str]:
    """Visible text of an HTML page with boilerplate dropped; h1-h6 make sections, pre/table atomic."""
    from bs4 import BeautifulSoup, Comment, Declaration, Doctype, NavigableString, ProcessingInstruction, Tag

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for t in soup(_DROP_TAGS + ["head"]):
        t.decompose()
    for c in soup.find_all(string=lambda s: isinstance(s, Comment)):
        c.extract()
    for t in soup.find_all(True):
        if t.attrs is None or t.decomposed:
            continue
        marker = " ".join(t.get("class", []) or []) + " " + (t.get("id") or "") + " " + (t.get("role") or "")
        if t.name not in ("body", "html", "main", "article") and _BOILERPLATE.search(marker):
            t.decompose()

    out: list[str] = []
    pos = 0
    heads: list[tuple[int, int, str]] = []
    atomic: list[tuple[int, int]] = []

    def emit_block(s: str) -> tuple[int, int] | None:
        nonlocal pos
        s = s.strip("\n")
        if not s.strip():
            return None
        if out:
            out.append("\n\n")
            pos += 2
        start = pos
        out.append(s)
        pos += len(s)
        return start, pos

    inline: list[str] = []

    def flush() -> None:
        if inline:
            txt = re.sub(r"[ \t\r\f\v]+", " ", "".join(inline))
            txt = "\n".join(line.strip() for line in txt.split("\n"))
            emit_block(txt.strip())
            inline.clear()

    def walk(node: Tag) -> None:
        for child in node.children:
            if isinstance(child, (Doctype, Declaration, ProcessingInstruction)):
                continue
            if isinstance(child, NavigableString):
                inline.append(str(child))
                continue
            if not isinstance(child, Tag):
                continue
            name = child.name
            if name in _HEADINGS:
                flush()
                txt = child.get_text(" ", strip=True)
                span = emit_block(txt)
                if span:
                    heads.append((span[0], _HEADINGS[name], txt))
            elif name == "pre":
                flush()
                span = emit_block(child.get_text())
                if span:
                    atomic.append(span)
            elif name == "table":
                flush()
                rows = []
                for tr in child.find_all("tr"):
                    cells = [c.get_text(" ", strip=True) for c in tr.find_all(["th", "td"])]
                    if any(cells):
                        rows.append(" | ".join(cells))
                span = emit_block("\n".join(rows))
                if span:
                    atomic.append(span)
            elif name == "br":
                inline.append("\n")
            elif name == "li":
                flush()
                inline.append("- ")
                walk(child)
                flush()
            elif name in _BLOCK:
                flush()
                walk(child)
                flush()
            else:
                walk(child)

    walk(soup)
    flush()
    text = "".join(out)
    sections: list[Section] = []
    first = heads[0][0] if heads else len(text)
    if first > 0:
        sections.append(Section(0, first, 0, (), "preamble"))
    path: list[tuple[int, str]] = []
    for j, (off, level, htxt) in enumerate(heads):
        end = heads[j + 1][0] if j + 1 < len(heads) else len(text)
        while path and path[-1][0] >= level:
            path.pop()
        path.append((level, htxt))
        sections.append(Section(off, end, level, tuple(t for _, t in path), "heading"))
    for s in sections:
        s.atomic = [(a, b) for a, b in atomic if a >= s.start and b <= s.end]
    if not title:
        title = next((t for _, lvl, t in heads if lvl == 1), "")
    return text, sections, title


# ---------------------------------------------------------------------------------------------- code

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


def ts_language(lang: str):
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


def parse_tree(text: str, lang: str):
    """Parse source text; returns (tree, bytes, byte->char offset function)."""
    from tree_sitter import Parser

    data = text.encode("utf-8")
    tree = Parser(ts_language(lang)).parse(data)
    return tree, data, byte_to_char(text, data)


def byte_to_char(text: str, data: bytes | None = None):
    """A function mapping UTF-8 byte offsets of `text` to character offsets."""
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


def _line_start(text: str, pos: int) -> int:
    return text.rfind("\n", 0, pos) + 1


def _line_end(text: str, pos: int) -> int:
    nl = text.find("\n", pos)
    return len(text) if nl < 0 else nl + 1


# ---------------------------------------------------------------------------------------------- chat

_TURN = re.compile(r"^\s*(?:\[[^\]\n]{1,40}\]\s*)?([A-Za-z][\w .'@-]{0,39}):\s", re.M)


def looks_like_chat(text: str) -> bool:
    """A transcript: most non-empty lines start with `Speaker:` and a few speakers recur."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if len(lines) < 4:
        return False
    speakers = [m.group(1).strip().lower() for m in (_TURN.match(ln) for ln in lines) if m]
    return len(speakers) >= 0.6 * len(lines) and len(set(speakers)) <= max(2, len(speakers) // 3)


def chat_turns(text: str, start: int, end: int) -> list[int]:
    """Offsets where a new speaker turn begins inside [start, end)."""
    return [m.start() for m in _TURN.finditer(text, start, end)]


# ------------------------------------------------------------------------- content-defined sub-sections

_PARA = re.compile(r"\n[ \t]*\n+")


def split_large_sections(text: str, sections: list[Section], *, max_tokens: int) -> list[Section]:
    """Cut sections over max_tokens at content-defined paragraph boundaries (robust to inserts above)."""
    tok = counter("cl100k_base")
    out: list[Section] = []
    for s in sections:
        body = text[s.start : s.end]
        if len(body) < max_tokens * 2 or tok.count(body) <= max_tokens:
            out.append(s)
            continue
        cuts = content_defined_cuts(text, s.start, s.end, s.atomic, max_tokens=max_tokens)
        bounds = [s.start, *cuts, s.end]
        for k, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            if b <= a:
                continue
            out.append(
                Section(
                    a,
                    b,
                    s.level,
                    s.heading_path,
                    s.kind if k == 0 else "part",
                    None,
                    [(x, y) for x, y in s.atomic if x >= a and y <= b],
                )
            )
    return out


def _unit_bounds(text: str, start: int, end: int, atomic: list[tuple[int, int]], cap: int) -> list[int]:
    """Candidate cut offsets: paragraph ends outside atomic blocks; long paragraphs at lines/sentences."""

    def inside(pos: int) -> bool:
        return any(a < pos < b for a, b in atomic)

    cuts = [m.end() for m in _PARA.finditer(text, start, end) if not inside(m.end())]
    bounds = [start, *cuts, end]
    out: list[int] = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b - a > cap * 4:
            for pat in (r"\n", r"[.!?。！？]\s+", r"\s+"):
                sub = [m.end() for m in re.finditer(pat, text[a:b]) if not inside(a + m.end())]
                if sub:
                    out.extend(a + x for x in sub if a + x < b)
                    break
        out.append(b)
    return [c for c in out if start < c < end]


def content_defined_cuts(
    text: str, start: int, end: int, atomic: list[tuple[int, int]], *, max_tokens: int
) -> list[int]:
    """Cut where a unit's own hash says so (once past a minimum), or where the maximum forces it."""
    import zlib

    tok = counter("cl100k_base")
    cands = _unit_bounds(text, start, end, atomic, max_tokens)
    bounds = [start, *cands, end]
    units = [(a, b, tok.count(text[a:b])) for a, b in zip(bounds, bounds[1:], strict=False) if b > a]
    min_tokens = max_tokens // 4
    cuts: list[int] = []
    acc = 0
    for i, (a, b, n) in enumerate(units[:-1]):
        acc += n
        nxt = units[i + 1][2]
        h = zlib.crc32(text[a:b].strip().encode("utf-8"))
        if (acc >= min_tokens and h % 4 == 0) or acc + nxt > max_tokens:
            cuts.append(b)
            acc = 0
    return cuts
