"""Span-level retrieval evaluation (Chroma's method): chunks from the real pipeline, scored in characters.

Questions come with excerpts, character ranges of a corpus file. Each configuration ingests the corpora
into a throwaway collection (same chunkers, embedding and Postgres as a user's run), retrieves the top k
chunks per question with the SQL search users call, and scores the overlap of chunks and excerpts:
recall, precision, precision_Ω and IoU exactly as Chroma's "Evaluating Chunking Strategies for
Retrieval" defines them, plus hit rate and MRR.
"""

from __future__ import annotations

import bisect
import csv
import json
import shutil
import tempfile
import time
import unicodedata
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from pipeline.config import Profile, Settings, load_profile, profile_from_dict, strategy_profile
from pipeline.errors import ChunkyardError, ConfigError

Span = tuple[int, int]
DocTypeChoice = Literal["auto", "text", "markdown"]
Mode = Literal["vector", "fulltext", "hybrid", "rrf"]

#: The separators of Chroma's recursive configurations (LangChain's, with sentence punctuation).
CHROMA_SEPARATORS = ("\n\n", "\n", ".", "?", "!", " ", "")
METRICS = ("recall", "precision", "precision_omega", "iou")
_SUFFIX = {"text": ".txt", "markdown": ".md"}


class EvalError(ChunkyardError):
    """Evaluation input that cannot be scored: the message names the file, row and reference."""


# ------------------------------------------------------------------------------------------ input


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
    return s if len(s) <= n else s[:n] + "…"


# ---------------------------------------------------------------------------------------- metrics


def union(spans: Sequence[Span]) -> list[Span]:
    """Merge overlapping (or touching) ranges, so each character counts once."""
    out: list[Span] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            if b > out[-1][1]:
                out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def covered(spans: Sequence[Span]) -> int:
    """Characters covered by a set of ranges, each counted once."""
    return sum(b - a for a, b in union(spans))


def intersect(x: Span, y: Span) -> Span | None:
    """The common range of two ranges; touching ranges intersect in an empty range (Chroma's rule)."""
    a, b = max(x[0], y[0]), min(x[1], y[1])
    return (a, b) if a <= b else None


@dataclass(frozen=True)
class Retrieved:
    """A retrieved chunk as a raw-corpus range."""

    corpus_id: str
    start: int
    end: int


def question_scores(excerpts: Sequence[Span], corpus_id: str, retrieved: Sequence[Retrieved]) -> dict:
    """recall, precision, IoU, hit and reciprocal rank of one question (METHOD.md definitions)."""
    inter: list[Span] = []
    first_hit = 0
    for rank, r in enumerate(retrieved, 1):
        if r.corpus_id != corpus_id:
            continue
        for e in excerpts:
            x = intersect((r.start, r.end), e)
            if x is not None:
                inter.append(x)
                if not first_hit and x[1] > x[0]:
                    first_hit = rank
    i = covered(inter)
    e_len = sum(b - a for a, b in excerpts)
    r_len = sum(r.end - r.start for r in retrieved)  # a sum, not a union: overlaps and other corpora count
    return {
        "recall": i / e_len,
        "precision": i / r_len if r_len else 0.0,
        "iou": i / (r_len + e_len - i) if r_len + e_len - i else 0.0,
        "hit": 1.0 if first_hit else 0.0,
        "rr": 1.0 / first_hit if first_hit else 0.0,
    }


def precision_omega(excerpts: Sequence[Span], chunks: Sequence[Span]) -> float:
    """Best precision at perfect recall: excerpt coverage of every chunk touching an excerpt, over their union."""
    inter: list[Span] = []
    touching: list[Span] = []
    for c in chunks:
        hit = False
        for e in excerpts:
            x = intersect(c, e)
            if x is not None:
                hit = True
                inter.append(x)
        if hit:
            touching.append(c)
    i_star = union(inter)
    unused = _difference(list(excerpts), i_star)
    denom = covered(touching + unused)
    return covered(i_star) / denom if denom else 0.0


def _difference(spans: list[Span], minus: list[Span]) -> list[Span]:
    """Parts of `spans` not covered by `minus`."""
    out: list[Span] = []
    for a, b in spans:
        cur = a
        for x, y in minus:
            if y <= cur or x >= b:
                continue
            if x > cur:
                out.append((cur, x))
            cur = max(cur, y)
        if cur < b:
            out.append((cur, b))
    return out


def summarize(rows: Sequence[dict]) -> dict:
    """Mean and population std (x100) of each span metric, hit rate (%) and MRR over question rows."""
    out: dict[str, Any] = {"questions": len(rows)}
    for m in METRICS:
        v = np.array([r[m] for r in rows], dtype=float)
        out[m] = {"mean": round(float(v.mean()) * 100, 3), "std": round(float(v.std()) * 100, 3)}
    out["hit_rate"] = round(float(np.mean([r["hit"] for r in rows])) * 100, 3)
    out["mrr"] = round(float(np.mean([r["rr"] for r in rows])), 4)
    return out


# ----------------------------------------------------------------------------------- offset mapping


class OffsetMap:
    """Maps offsets of the pipeline's normalized text back to the raw corpus the excerpts point into."""

    def __init__(self, raw: str, norm: str, name: str) -> None:
        self.identity = raw == norm
        self.raw_b: list[int] = []
        self.norm_b: list[int] = []
        if self.identity:
            return
        from pipeline.normalize import clean

        if clean(raw) != norm:
            raise EvalError(
                f"corpus {name!r}: the pipeline rewrote the text beyond character cleanup (parsed as HTML?), "
                "so its offsets cannot be mapped to the file; evaluate it as text (as=text)"
            )
        # Cleanup is local: NFC acts on a base character with its combining marks, the rest per character
        # (and CRLF). Cleaning such segments one by one must rebuild the same text, or we refuse.
        raw_b, norm_b, pieces = [0], [0], []
        i, n = 0, len(raw)
        while i < n:
            j = i + 1
            if raw[i] == "\r" and j < n and raw[j] == "\n":
                j += 1
            while j < n and unicodedata.combining(raw[j]):
                j += 1
            piece = clean(raw[i:j])
            pieces.append(piece)
            raw_b.append(j)
            norm_b.append(norm_b[-1] + len(piece))
            i = j
        if "".join(pieces) != norm:
            raise EvalError(
                f"corpus {name!r}: normalization is not character-local here (e.g. Hangul jamo), so chunk "
                "offsets cannot be mapped back; NFC-normalize the corpus and its question offsets first"
            )
        self.raw_b, self.norm_b = raw_b, norm_b

    def to_raw(self, start: int, end: int) -> Span:
        """A normalized range as the smallest raw range that holds it."""
        if self.identity:
            return start, end
        i = bisect.bisect_right(self.norm_b, start) - 1
        j = bisect.bisect_left(self.norm_b, end)
        return self.raw_b[max(i, 0)], self.raw_b[min(j, len(self.raw_b) - 1)]


# ------------------------------------------------------------------------------------ configurations


@dataclass(frozen=True)
class EvalConfig:
    """One configuration to score: a profile, how the corpora are typed, and eval-only switches."""

    label: str
    profile: Profile
    doc_type: DocTypeChoice = "auto"
    model_truncates: bool = False  # eval-only: no re-split at the model's input limit; the model truncates
    spec: str = ""


_EVAL_KEYS = {"label", "as", "truncate", "section_tokens"}


def parse_config(
    spec: str, *, doc_type: DocTypeChoice = "auto", section_tokens: int | None = None
) -> EvalConfig:
    """`KIND[:k=v,...]` or `default[:...]`: chunker params plus label, as, truncate, section_tokens."""
    kind, _, rest = spec.partition(":")
    kind = kind.strip()
    params = _parse_params(rest, spec)
    label = str(params.pop("label", spec))
    as_type = params.pop("as", doc_type)
    if as_type not in ("auto", "text", "markdown"):
        raise ConfigError(f"--strategy {spec}: as={as_type!r}; expected auto, text or markdown")
    truncate = params.pop("truncate", False)
    if not isinstance(truncate, bool):
        raise ConfigError(f"--strategy {spec}: truncate must be true or false")
    sec = params.pop("section_tokens", section_tokens)
    if params.get("separators") == "chroma":
        params["separators"] = list(CHROMA_SEPARATORS)
    if kind == "default":
        if params:
            raise ConfigError(
                f"--strategy {spec}: `default` takes only {', '.join(sorted(_EVAL_KEYS))}; "
                f"got {', '.join(sorted(params))} (use a TOML --profile to change its chunkers)"
            )
        profile = Profile()
    else:
        profile = strategy_profile(kind, **params)
    return EvalConfig(label, _with_sections(profile, sec, spec), as_type, truncate, spec)


def profile_config(
    path: str, *, doc_type: DocTypeChoice = "auto", section_tokens: int | None = None, truncate: bool = False
) -> EvalConfig:
    """A configuration from a TOML profile file (or `default`), labelled by the file's stem."""
    profile = Profile() if path == "default" else load_profile(path)
    label = "default" if path == "default" else Path(path).stem
    return EvalConfig(label, _with_sections(profile, section_tokens, path), doc_type, truncate, path)


def _with_sections(profile: Profile, section_tokens: Any, origin: str) -> Profile:
    if section_tokens is None:
        return profile
    return profile_from_dict({**profile.as_json(), "section_tokens": section_tokens}, origin=origin)


def _parse_params(rest: str, spec: str) -> dict[str, Any]:
    """`a=1,b=[x, y],c=text` split at top-level commas; values are JSON where they parse."""
    out: dict[str, Any] = {}
    parts, depth, cur, quote = [], 0, [], False
    for ch in rest:
        if ch == '"':
            quote = not quote
        elif not quote and ch in "[{":
            depth += 1
        elif not quote and ch in "]}":
            depth -= 1
        if ch == "," and depth == 0 and not quote:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    for item in (p.strip() for p in parts):
        if not item:
            continue
        if "=" not in item:
            raise ConfigError(f"--strategy {spec}: {item!r} is not NAME=VALUE")
        k, v = (x.strip() for x in item.split("=", 1))
        try:
            out[k] = json.loads(v)
        except json.JSONDecodeError:
            out[k] = v
    return out


@contextmanager
def model_truncates(enabled: bool) -> Iterator[None]:
    """EVAL-ONLY: let chunks exceed the model's input so the model truncates them, as Chroma's runs did.

    chunkyard re-splits any chunk over the model's limit; reproducing published figures made with
    oversized chunks needs the old behaviour back for the length of one ingest.
    """
    if not enabled:
        yield
        return
    from pipeline.chunkers import base, router

    original = base.model_max_tokens
    base.model_max_tokens = lambda model="": 10**9  # type: ignore[assignment]
    router._build.cache_clear()
    try:
        yield
    finally:
        base.model_max_tokens = original
        router._build.cache_clear()


# ---------------------------------------------------------------------------------------- indexing


@dataclass
class Indexed:
    """What indexing left behind: which source uri is which corpus, counts and timings."""

    uri_to_corpus: dict[str, str]
    info: dict = field(default_factory=dict)


def stage_corpora(corpora: dict[str, Corpus], dest: Path, doc_type: DocTypeChoice) -> dict[str, str]:
    """Copy corpora into dest, renamed so the pipeline types them as asked; returns uri -> corpus id."""
    from pipeline.sources import source_uri

    dest.mkdir(parents=True, exist_ok=True)
    out = {}
    for c in corpora.values():
        name = c.path.name if doc_type == "auto" else c.id + _SUFFIX[doc_type]
        target = dest / name
        shutil.copyfile(c.path, target)
        out[source_uri(target)] = c.id
    return out


def pipeline_indexer(
    cfg: EvalConfig, corpora: dict[str, Corpus], settings: Settings
) -> Callable[[str], Indexed]:
    """Index through `run_ingest`, exactly as `chunkyard ingest` would (without Prefect)."""
    from pipeline.ingest import run_ingest

    def index(collection: str) -> Indexed:
        with tempfile.TemporaryDirectory(prefix="chunkyard-eval-") as tmp:
            uris = stage_corpora(corpora, Path(tmp) / "corpora", cfg.doc_type)
            with model_truncates(cfg.model_truncates):
                stats, _, _ = run_ingest(
                    [Path(tmp) / "corpora"], settings=settings, collection=collection, profile=cfg.profile,
                    prune=False,
                )  # fmt: skip
        if stats.errors:
            raise EvalError(
                "ingest failed: "
                + "; ".join(f"{uris.get(u, u)}: {msg} ({st})" for u, st, msg in stats.errors)
            )
        if stats.skipped:
            raise EvalError(
                "ingest skipped: " + "; ".join(f"{uris.get(u, u)}: {m}" for u, m in stats.skipped)
            )
        return Indexed(uris, {"counts": dict(stats.counts), "timings": stats.timings})

    return index


def spans_indexer(
    label: str,
    corpora: dict[str, Corpus],
    spans: dict[str, list[Span]],
    settings: Settings,
    *,
    embed_text: Callable[[str, int, int], str] | None = None,
) -> Callable[[str], Indexed]:
    """Index chunks made elsewhere (a peer library) the same way: same embedding, cache, tables, search.

    `embed_text(corpus_id, start, end)` may say what to embed for a span (experiments with context
    around a span); the span itself stays what is scored.
    """
    from pipeline import db, store
    from pipeline.chunkers.base import Chunk
    from pipeline.embed import embed_hash, embed_with_cache, get_embedder
    from pipeline.incremental import SectionPlan
    from pipeline.model import Document, Section, sha256
    from pipeline.tokens import counter

    _SpanChunk = _span_chunk_class()

    def index(collection: str) -> Indexed:
        t0 = time.perf_counter()
        cl100k = counter("cl100k_base")
        emb = get_embedder(settings.model, settings.device, settings.embed_batch_size)
        uris: dict[str, str] = {}
        with db.connection(db.database_url(settings)) as conn:
            coll = store.ensure_collection(
                conn, collection, profile={"peer": label}, model=settings.model, dim=emb.dim
            )
            docs, chunks = [], {}
            for cid, c in corpora.items():
                uri = f"eval://{cid}"
                uris[uri] = cid
                doc = Document(
                    uri, "text", c.text, [Section(0, len(c.text))], title=cid, raw_hash=sha256(c.text)
                )
                docs.append(doc)
                chunks[uri] = [
                    _SpanChunk(s, e, c.text[s:e], cl100k.count(c.text[s:e]), embedded=embed_text(cid, s, e))
                    if embed_text
                    else Chunk(s, e, c.text[s:e], cl100k.count(c.text[s:e]))
                    for s, e in spans.get(cid, [])
                    if e > s
                ]
            texts = [ch.embed_text for cs in chunks.values() for ch in cs]
            vectors, fresh = embed_with_cache(
                texts, lookup=lambda hs: store.cache_lookup(conn, settings.model, hs), embedder=lambda: emb
            )
            store.cache_store(conn, settings.model, {h: vectors[h] for h in fresh})
            t1 = time.perf_counter()
            for doc in docs:
                store.write_document(
                    conn, collection_id=coll.id, doc=doc, chunk_key=f"peer:{label}", fingerprints=["peer"],
                    plan=SectionPlan(new=[0]), new_chunks={0: chunks[doc.uri]}, vectors=vectors,
                    model=settings.model, run_id=None,
                )  # fmt: skip
            assert all(embed_hash(t) in vectors for t in texts)
            store.refresh_fts_stats(conn, coll.id)
        timings = {"chunk+embed": t1 - t0, "store": time.perf_counter() - t1}
        return Indexed(uris, {"counts": {"chunks_embedded": len(fresh)}, "timings": timings})

    return index


def _span_chunk_class():
    from pipeline.chunkers.base import Chunk

    @dataclass(frozen=True)
    class SpanChunk(Chunk):
        """A chunk whose embedded text is given explicitly (bench experiments only)."""

        embedded: str = ""

        @property
        def embed_text(self) -> str:
            return self.embedded or super().embed_text

    return SpanChunk


# ----------------------------------------------------------------------------------------- scoring


def embed_questions(questions: Sequence[Question], settings: Settings) -> np.ndarray:
    """Question vectors, embedded afresh with the collection's model."""
    from pipeline.embed import get_embedder

    return get_embedder(settings.model, settings.device, settings.embed_batch_size).encode(
        [q.text for q in questions]
    )


def evaluate_index(
    label: str,
    index: Callable[[str], Indexed],
    corpora: dict[str, Corpus],
    questions: Sequence[Question],
    qvecs: np.ndarray,
    *,
    settings: Settings,
    k: int = 5,
    modes: Sequence[Mode] = ("vector",),
    meta: dict | None = None,
    keep: bool = False,
) -> list[dict]:
    """Index into a throwaway collection, score every mode, drop the collection; one result per mode."""
    from pipeline import db, store

    collection = f"_eval_{uuid.uuid4().hex[:12]}"
    url = db.database_url(settings)
    t0 = time.perf_counter()
    try:
        indexed = index(collection)
        t_index = time.perf_counter() - t0
        with db.connection(url) as conn:
            results = _score(
                conn, collection, indexed, corpora, questions, qvecs, k=k, modes=modes, model=settings.model
            )
    finally:
        if not keep:
            with db.connection(url) as conn:
                store.drop_collection(conn, collection)
    for r in results:
        r.update({"label": label, "k": k, **(meta or {})})
        r["index"] = {**indexed.info, "seconds": round(t_index, 2)}
    return results


def _score(
    conn,
    collection: str,
    indexed: Indexed,
    corpora: dict[str, Corpus],
    questions: Sequence[Question],
    qvecs: np.ndarray,
    *,
    k: int,
    modes: Sequence[Mode],
    model: str,
) -> list[dict]:
    from pipeline import store
    from pipeline.tokens import counter, model_max_tokens

    u2c = indexed.uri_to_corpus
    maps = {}
    normalization = {}
    for uri, norm in store.collection_texts(conn, collection).items():
        cid = u2c[uri]
        maps[uri] = OffsetMap(corpora[cid].text, norm, cid)
        normalization[cid] = "unchanged" if maps[uri].identity else "mapped"
    missing = sorted(set(corpora) - set(normalization))
    if missing:
        raise EvalError(f"corpora missing from the index: {', '.join(missing)}")
    rows = store.collection_chunks(conn, collection, embeddings=True)
    if not rows:
        raise EvalError("the configuration produced no chunks")
    by_corpus: dict[str, list[Span]] = defaultdict(list)
    ids, vecs, spans = [], [], {}
    embed_texts = []
    for cid_, uri, s, e, text, ctx, vec in rows:
        c = u2c[uri]
        rs, re_ = maps[uri].to_raw(s, e)
        by_corpus[c].append((rs, re_))
        spans[cid_] = Retrieved(c, rs, re_)
        ids.append(cid_)
        vecs.append(vec)
        embed_texts.append(f"{ctx}\n\n{text}" if ctx else text)
    model_counts = counter("model", model).count_many(embed_texts)  # type: ignore[attr-defined]
    limit = model_max_tokens(model)
    lengths = [r.end - r.start for r in spans.values()]
    chunk_info = {
        "count": len(rows),
        "per_corpus": {c: len(v) for c, v in sorted(by_corpus.items())},
        "mean_chars": round(float(np.mean(lengths)), 1),
        "mean_cl100k": round(float(np.mean([counter("cl100k_base").count(r[4]) for r in rows])), 1),
        "mean_model_tokens": round(float(np.mean(model_counts)), 1),
        "over_model_limit": int(sum(n > limit for n in model_counts)),
    }
    p_omega = [precision_omega(q.excerpts, by_corpus.get(q.corpus_id, [])) for q in questions]
    # exact top k, to tell chunking effects from approximate (HNSW) search effects
    mat = np.vstack(vecs)
    exact = np.argsort(-(qvecs @ mat.T), axis=1)[:, :k]
    out = []
    for mode in modes:
        per_q = []
        agree = []
        for qi, q in enumerate(questions):
            hits = store.search(conn, collection, qvecs[qi], k=k, query_text=q.text, mode=mode)
            got = [
                Retrieved(u2c[h.source_uri], *maps[h.source_uri].to_raw(h.char_start, h.char_end))
                for h in hits
            ]
            sc = question_scores(q.excerpts, q.corpus_id, got)
            sc["precision_omega"] = p_omega[qi]
            per_q.append(
                {"row": q.row, "corpus": q.corpus_id, **{m: round(v, 6) for m, v in sc.items()},
                 "retrieved": [[r.corpus_id, r.start, r.end] for r in got]}
            )  # fmt: skip
            if mode == "vector":
                exact_ids = {ids[j] for j in exact[qi]}
                agree.append(len(exact_ids & {h.chunk_id for h in hits}) / max(len(exact_ids), 1))
        res: dict[str, Any] = {
            "mode": mode,
            "summary": summarize(per_q),
            "per_corpus": {
                c: summarize([r for r in per_q if r["corpus"] == c])
                for c in sorted({r["corpus"] for r in per_q})
            },
            "chunks": chunk_info,
            "normalization": normalization,
            "per_question": per_q,
        }
        if mode == "vector":
            res["ann_agreement"] = round(float(np.mean(agree)), 4)
            exact_rows = [
                question_scores(q.excerpts, q.corpus_id, [spans[ids[j]] for j in exact[qi]])
                | {"precision_omega": p_omega[qi]}
                for qi, q in enumerate(questions)
            ]
            res["exact_search_summary"] = summarize(exact_rows)
        out.append(res)
    return out


# --------------------------------------------------------------------------------------- the run


def run_eval(
    corpora_dir: Path | str,
    questions_path: Path | str,
    configs: Sequence[EvalConfig],
    *,
    k: int = 5,
    modes: Sequence[Mode] = ("vector", "hybrid"),
    settings: Settings | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict:
    """Score each configuration on one question set, one result row per search mode."""
    settings = settings or Settings()
    corpora = load_corpora(corpora_dir)
    questions = load_questions(questions_path, corpora)
    say = progress or (lambda _msg: None)
    say(f"{len(questions)} questions over {len(corpora)} corpora; embedding questions")
    qvecs = embed_questions(questions, settings)
    results = []
    for cfg in configs:
        say(f"indexing {cfg.label}")
        results += evaluate_index(
            cfg.label, pipeline_indexer(cfg, corpora, settings), corpora, questions, qvecs,
            settings=settings, k=k, modes=modes, meta=config_meta(cfg),
        )  # fmt: skip
        say(f"done {cfg.label}: " + ", ".join(_brief(r) for r in results[-len(modes) :]))
    return report(results, corpora=corpora, questions=questions, k=k, settings=settings)


def config_meta(cfg: EvalConfig) -> dict:
    """What a result records about the configuration that produced it."""
    return {
        "spec": cfg.spec,
        "doc_type": cfg.doc_type,
        "model_truncates": cfg.model_truncates,
        "profile": cfg.profile.as_json(),
    }


def report(
    results: list[dict], *, corpora: dict, questions: Sequence[Question], k: int, settings: Settings
) -> dict:
    """The JSON document: run metadata and every result."""
    return {
        "meta": {
            "k": k,
            "model": settings.model,
            "questions": len(questions),
            "corpora": {c.id: len(c.text) for c in corpora.values()},
            "metrics": "Chroma span metrics (x100, mean and population std); hit rate %; MRR 0-1",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "results": results,
    }


def _brief(r: dict) -> str:
    s = r["summary"]
    return f"{r['mode']} recall {s['recall']['mean']:.1f} IoU {s['iou']['mean']:.1f}"


# ---------------------------------------------------------------------------------------- output


def markdown_table(results: Sequence[dict]) -> str:
    """One row per configuration and search mode: the figures people compare."""
    head = (
        "| Configuration | Search | Chunks | Mean tokens | Recall | Precision | Precision_Ω | IoU | Hit rate | MRR |\n"
        "| --- | --- | ---: | ---: | --- | --- | --- | --- | ---: | ---: |"
    )
    lines = [head]
    for r in results:
        s, ch = r["summary"], r["chunks"]
        cells = [f"{s[m]['mean']:.1f} ± {s[m]['std']:.1f}" for m in METRICS]
        lines.append(
            f"| {r['label']} | {r['mode']} | {ch['count']} | {ch['mean_cl100k']:.0f} | "
            + " | ".join(cells)
            + f" | {s['hit_rate']:.1f} | {s['mrr']:.3f} |"
        )
    return "\n".join(lines)


def per_corpus_table(results: Sequence[dict]) -> str:
    """Recall / IoU per corpus, one row per configuration and mode."""
    corpora = sorted({c for r in results for c in r["per_corpus"]})
    lines = [
        "| Configuration | Search | " + " | ".join(f"{c} R / IoU" for c in corpora) + " |",
        "| --- | --- |" + " --- |" * len(corpora),
    ]
    for r in results:
        cells = []
        for c in corpora:
            s = r["per_corpus"].get(c)
            cells.append(f"{s['recall']['mean']:.1f} / {s['iou']['mean']:.1f}" if s else "-")
        lines.append(f"| {r['label']} | {r['mode']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(
    results: Sequence[dict], path: Path | str, *, reference: Sequence[dict] = (), title: str = ""
) -> Path:
    """Recall against IoU, one labelled point per configuration (and published points, hollow)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("the plot needs matplotlib: pip install 'chunkyard[eval]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6.5))
    for r in results:
        s = r["summary"]
        x, y = s["iou"]["mean"], s["recall"]["mean"]
        ax.scatter([x], [y], marker="o" if r["mode"] == "vector" else "^", s=40)
        ax.annotate(f"{r['label']}" + ("" if r["mode"] == "vector" else f" ({r['mode']})"), (x, y), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")  # fmt: skip
    for p in reference:
        ax.scatter([p["iou"]], [p["recall"]], facecolors="none", edgecolors="grey", s=40)
        ax.annotate(p["label"], (p["iou"], p["recall"]), fontsize=6, color="grey", xytext=(4, -8),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("IoU (x100, mean over questions)")
    ax.set_ylabel("Recall (x100, mean over questions)")
    ax.set_title(title or f"Recall vs IoU, k = {results[0]['k'] if results else '?'}")
    ax.grid(alpha=0.3)
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def write_outputs(
    doc: dict, prefix: Path | str, *, reference: Sequence[dict] = ()
) -> tuple[Path, Path | None]:
    """`prefix`.json with every figure and `prefix`.png with the plot (None without matplotlib)."""
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    js = prefix.with_name(prefix.name + ".json")
    js.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    try:
        png = plot(doc["results"], prefix.with_name(prefix.name + ".png"), reference=reference)
    except ConfigError:  # the figures are written; only the picture needs the optional dependency
        png = None
    return js, png
