"""Evaluation input: corpus files and questions whose excerpts are checked against them before anything runs.

Offsets in Chroma's question sets are character ranges of the raw UTF-8 file, so a corpus is kept exactly as
read (newlines untouched), and every problem in a question file is reported at once, by row and reference.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.errors import ChunkyardError
from pipeline.model import Span


class EvalError(ChunkyardError):
    """Evaluation input that cannot be scored: the message names the file, row and reference."""


@dataclass(frozen=True)
class Corpus:
    """A corpus file and its text as the question offsets see it (UTF-8, newlines untouched)."""

    id: str
    path: Path
    text: str


@dataclass(frozen=True)
class Question:
    """One question, the corpus it is about, and its excerpts as sorted half-open character ranges."""

    row: str
    text: str
    corpus_id: str
    excerpts: tuple[Span, ...]


def load_corpora(folder: Path | str) -> dict[str, Corpus]:
    """Every supported file in a folder, keyed by file stem (Chroma's corpus_id)."""
    from pipeline.sources import detect

    root = Path(folder).expanduser()
    if not root.is_dir():
        raise EvalError(f"{root}: corpora must be a folder of text files")
    out: dict[str, Corpus] = {}
    for p in sorted(root.iterdir()):
        if not p.is_file() or p.name.startswith(".") or detect(p) is None:
            continue
        if p.stem in out:
            raise EvalError(
                f"{root}: two corpora share the id {p.stem!r} ({out[p.stem].path.name}, {p.name})"
            )
        try:
            text = p.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EvalError(f"{p}: not valid UTF-8 at byte {exc.start}; question offsets need UTF-8") from exc
        out[p.stem] = Corpus(p.stem, p, text)
    if not out:
        raise EvalError(f"{root}: no corpus files (.md, .txt, ...) found")
    return out


def load_questions(path: Path | str, corpora: dict[str, Corpus]) -> list[Question]:
    """Questions from Chroma's CSV (or JSONL with the same fields), every excerpt checked against its corpus."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise EvalError(f"{p}: questions file not found")
    suffix = p.suffix.lower()
    if suffix == ".csv":
        records = _read_csv(p)
    elif suffix in (".jsonl", ".ndjson"):
        records = _read_jsonl(p)
    else:
        raise EvalError(f"{p}: questions must be a .csv or .jsonl file")
    questions: list[Question] = []
    problems: list[str] = []
    for label, rec in records:
        try:
            questions.append(_question(label, rec, corpora))
        except EvalError as exc:
            problems.append(str(exc))
    if problems:
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise EvalError(f"{p}: {len(problems)} invalid question(s):\n" + "\n".join(problems[:20]) + more)
    if not questions:
        raise EvalError(f"{p}: no questions")
    return questions


def _read_csv(p: Path) -> list[tuple[str, Any]]:
    """(row label, record) pairs; the label gives the file line too, since a quoted field spans lines."""
    csv.field_size_limit(2**31 - 1)
    out: list[tuple[str, Any]] = []
    with p.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = {"question", "references", "corpus_id"} - set(reader.fieldnames or [])
        if missing:
            raise EvalError(f"{p}: missing column(s) {', '.join(sorted(missing))} in the header")
        first = reader.line_num + 1
        for n, rec in enumerate(reader, 1):
            out.append((f"row {n} (line {first})", rec))
            first = reader.line_num + 1
    return out


def _read_jsonl(p: Path) -> list[tuple[str, Any]]:
    """(line label, record) pairs; a bad line becomes its error, so every problem is reported at once."""
    out: list[tuple[str, Any]] = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append((f"line {n}", json.loads(line)))
        except json.JSONDecodeError as exc:
            out.append((f"line {n}", EvalError(f"line {n}: not valid JSON ({exc.msg})")))
    return out


def _question(label: str, rec: Any, corpora: dict[str, Corpus]) -> Question:
    """Validate one record; every problem names the row and, where it applies, the reference."""
    if isinstance(rec, Exception):
        raise rec
    if not isinstance(rec, dict):
        raise EvalError(f"{label}: expected an object with question, references, corpus_id")
    missing = [k for k in ("question", "references", "corpus_id") if rec.get(k) in (None, "")]
    if missing:
        raise EvalError(f"{label}: missing {', '.join(missing)}")
    text, cid, refs = rec["question"], rec["corpus_id"], rec["references"]
    if not isinstance(text, str) or not text.strip():
        raise EvalError(f"{label}: question must be non-empty text")
    if cid not in corpora:
        raise EvalError(f"{label}: unknown corpus_id {cid!r} (corpora: {', '.join(sorted(corpora))})")
    if isinstance(refs, str):
        try:
            refs = json.loads(refs)
        except json.JSONDecodeError as exc:
            raise EvalError(f"{label}: references is not valid JSON ({exc.msg})") from exc
    if not isinstance(refs, list) or not refs:
        raise EvalError(
            f"{label}: references must be a non-empty list of {{content, start_index, end_index}}"
        )
    corpus = corpora[cid].text
    spans: list[Span] = []
    for j, ref in enumerate(refs, 1):
        where = f"{label}: reference {j}"
        if not isinstance(ref, dict) or not {"content", "start_index", "end_index"} <= ref.keys():
            raise EvalError(f"{where}: expected an object with content, start_index, end_index")
        s, e = ref["start_index"], ref["end_index"]
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in (s, e)):
            raise EvalError(f"{where}: start_index and end_index must be integers")
        if not 0 <= s < e <= len(corpus):
            raise EvalError(
                f"{where}: span [{s}, {e}) is out of range for corpus {cid!r} ({len(corpus)} characters)"
            )
        if corpus[s:e] != ref["content"]:
            raise EvalError(
                f"{where}: corpus {cid!r}[{s}:{e}] does not match its content "
                f"(expected {_clip(str(ref['content']))!r}, found {_clip(corpus[s:e])!r})"
            )
        spans.append((s, e))
    spans.sort()
    for (a, b), (c, d) in zip(spans, spans[1:], strict=False):
        if c < b:
            raise EvalError(
                f"{label}: references [{a}, {b}) and [{c}, {d}) overlap; excerpts must be disjoint"
            )
    return Question(label, text, cid, tuple(spans))


def _clip(s: str, n: int = 40) -> str:
    """A short quote of a text, so a mismatch message stays readable."""
    return s if len(s) <= n else s[:n] + "…"
