"""Evaluation of a live collection: a saved question set with answer spans, searched the way users search.

Where `run_eval` builds throwaway collections to compare chunking configurations, `run_live_eval` scores
the collection people query, as it is now, so a scheduled run notices when retrieval got worse (a new
profile, a new model, documents that changed). Each run is a ledger row of kind 'eval' and a row of
`eval_results`; a run whose recall fell more than `max_drop` points below the baseline's is 'failed'.

Question file (JSONL, one question per line; README "Watching retrieval quality"):

    {"question": "Which model is used by default?", "document": "faq.txt",
     "answers": [{"text": "all-MiniLM-L6-v2, which makes 384-dimensional vectors", "start": 612}]}

`document` is the stored source URI or a path that ends it ("faq.txt", "docs/faq.txt"); each answer is
the exact text of the span in the document's *normalized* text (documents.normalized_text, what chunk
offsets point into), with `start` (its character offset there) when the text occurs more than once.
Normalized offsets, because chunk offsets are in normalized text: the scores need no mapping, and they
exist for every type (an HTML, PDF or Word file has no character offsets of its own that match the text
a reader sees). The text is what keeps the set honest over months: when a document is edited and the
span no longer holds it, the run stops and says where the text is now, instead of scoring a stale span.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.config import Settings
from pipeline.errors import ConfigError
from pipeline.evaluate.data import EvalError, Question, _clip
from pipeline.evaluate.metrics import Retrieved, precision_omega, question_scores, summarize, union
from pipeline.model import RunKind, RunStatus, Span
from pipeline.rerank import label as rerank_label

#: Default k, search mode and allowed recall drop (percentage points) of a live evaluation.
DEFAULT_K, DEFAULT_MODE, DEFAULT_MAX_DROP = 5, "hybrid", 5.0
_MODES = ("vector", "fulltext", "hybrid", "rrf")


@dataclass(frozen=True)
class Answer:
    """One answer span as written in the question file: its exact text, and where it starts if given."""

    text: str
    start: int | None = None


@dataclass(frozen=True)
class LiveQuestion:
    """A question as written: its text, the document it is about, and the answer spans."""

    row: str
    text: str
    document: str
    answers: tuple[Answer, ...]


@dataclass(frozen=True)
class QuestionSet:
    """A question file, its name (file stem unless given) and the hash that keys its baseline."""

    path: Path
    name: str
    hash: str
    questions: tuple[LiveQuestion, ...]


# ------------------------------------------------------------------------------------- the file


def load_question_set(path: Path | str, *, name: str | None = None) -> QuestionSet:
    """Read and check a JSONL question file (no database needed); every problem is reported at once."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise EvalError(f"{p}: questions file not found")
    if p.suffix.lower() not in (".jsonl", ".ndjson"):
        raise EvalError(f"{p}: questions must be a .jsonl file (one JSON object per line)")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as exc:
        raise EvalError(f"{p}: not valid UTF-8 at byte {exc.start}") from exc
    questions: list[LiveQuestion] = []
    problems: list[str] = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            questions.append(_parse(f"line {n}", line))
        except EvalError as exc:
            problems.append(str(exc))
    _raise_problems(p, problems)
    if not questions:
        raise EvalError(f"{p}: no questions")
    canon = [[q.text, q.document, [[a.text, a.start] for a in q.answers]] for q in questions]
    digest = hashlib.sha256(json.dumps(canon, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()
    return QuestionSet(p, name or p.stem, digest, tuple(questions))


def _parse(label: str, line: str) -> LiveQuestion:
    """One line of the question file; each problem names the line and, where it applies, the answer."""
    try:
        rec = json.loads(line)
    except json.JSONDecodeError as exc:
        raise EvalError(f"{label}: not valid JSON ({exc.msg})") from exc
    if not isinstance(rec, dict):
        raise EvalError(f"{label}: expected an object with question, document, answers")
    unknown = sorted(set(rec) - {"question", "document", "answers", "id"})
    if unknown:
        raise EvalError(
            f"{label}: unknown field(s) {', '.join(unknown)} (expected question, document, answers)"
        )
    missing = [f for f in ("question", "document", "answers") if rec.get(f) in (None, "", [])]
    if missing:
        raise EvalError(f"{label}: missing {', '.join(missing)}")
    text, doc, answers = rec["question"], rec["document"], rec["answers"]
    if not isinstance(text, str) or not text.strip():
        raise EvalError(f"{label}: question must be non-empty text")
    if not isinstance(doc, str) or not doc.strip():
        raise EvalError(f"{label}: document must be a source URI or a path such as docs/faq.txt")
    if not isinstance(answers, list):
        raise EvalError(f"{label}: answers must be a list of {{text, start}} objects (or strings)")
    out = []
    for j, a in enumerate(answers, 1):
        where = f"{label}: answer {j}"
        if isinstance(a, str):
            a = {"text": a}
        if not isinstance(a, dict) or not isinstance(a.get("text"), str) or not a["text"].strip():
            raise EvalError(f'{where}: expected {{"text": "...", "start": N}} with the exact answer text')
        if set(a) - {"text", "start", "end"}:
            raise EvalError(
                f"{where}: unknown field(s) {', '.join(sorted(set(a) - {'text', 'start', 'end'}))}"
            )
        start, end = a.get("start"), a.get("end")
        for nm, v in (("start", start), ("end", end)):
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v < 0):
                raise EvalError(f"{where}: {nm} must be a character offset (an integer >= 0)")
        if end is not None and (start is None or end - start != len(a["text"])):
            raise EvalError(
                f"{where}: end must be start + the length of text ({len(a['text'])}); or leave end out"
            )
        out.append(Answer(a["text"], start))
    return LiveQuestion(label, text, doc.strip(), tuple(out))


def _raise_problems(p: Path, problems: list[str]) -> None:
    if problems:
        more = f"\n... and {len(problems) - 20} more" if len(problems) > 20 else ""
        raise EvalError(f"{p}: {len(problems)} invalid question(s):\n" + "\n".join(problems[:20]) + more)


# ------------------------------------------------------------------------- against the collection


def match_documents(refs: Sequence[str], uris: Sequence[str]) -> tuple[dict[str, str], dict[str, str]]:
    """Each document reference -> its stored source URI; and reference -> problem (unknown, ambiguous)."""
    from pipeline.sources import uri_path

    paths = {u: (p.as_posix() if (p := uri_path(u)) is not None else u) for u in uris}
    found: dict[str, str] = {}
    problems: dict[str, str] = {}
    for ref in dict.fromkeys(refs):
        if ref in paths:
            found[ref] = ref
            continue
        tail = ref.replace("\\", "/")
        while tail.startswith("./"):
            tail = tail[2:]
        hits = [u for u, p in paths.items() if p == tail or p.endswith("/" + tail)]
        if len(hits) == 1:
            found[ref] = hits[0]
        elif hits:
            shown = ", ".join(paths[u] for u in hits[:4])
            problems[ref] = f"document {ref!r} matches {len(hits)} documents ({shown}): give more of its path"
        else:
            problems[ref] = f"unknown document {ref!r}: {_near(tail, list(paths.values()))}"
    return found, problems


def _near(ref: str, paths: list[str]) -> str:
    """A hint for an unknown document: similar stored paths, or how many the collection has."""
    import difflib

    names = {p.rsplit("/", 1)[-1]: p for p in paths}
    close = difflib.get_close_matches(ref.rsplit("/", 1)[-1], list(names), n=3, cutoff=0.5)
    if close:
        return "did you mean " + ", ".join(repr(names[c]) for c in close) + "?"
    return (
        f"no live document of the collection ends with that path ({len(paths)} documents; "
        "SELECT source_uri FROM documents lists them)"
    )


def resolve(
    qset: QuestionSet, uris: Sequence[str], texts: Callable[[list[str]], dict[str, str]]
) -> list[Question]:
    """Questions with their answer spans as normalized-text ranges of stored documents, every one checked."""
    found, doc_problems = match_documents([q.document for q in qset.questions], uris)
    text_of = texts(sorted(set(found.values())))
    out: list[Question] = []
    problems: list[str] = []
    for q in qset.questions:
        uri = found.get(q.document)
        if uri is None:
            problems.append(f"{q.row}: {doc_problems[q.document]}")
            continue
        try:
            spans = [
                _span(f"{q.row}: answer {j}", a, q.document, text_of[uri]) for j, a in enumerate(q.answers, 1)
            ]
        except EvalError as exc:
            problems.append(str(exc))
            continue
        out.append(Question(q.row, q.text, uri, tuple(union(spans))))
    _raise_problems(qset.path, problems)
    return out


def _span(where: str, a: Answer, doc: str, text: str) -> Span:
    """The range of one answer in the normalized text: where `start` says, or its only occurrence."""
    n = len(a.text)
    if a.start is not None:
        if a.start + n > len(text):
            raise EvalError(
                f"{where}: span [{a.start}, {a.start + n}) is out of range for {doc!r} ({len(text)} characters "
                "of normalized text)"
            )
        if text[a.start : a.start + n] == a.text:
            return a.start, a.start + n
        at = _occurrences(text, a.text)
        now = f"it occurs at {', '.join(map(str, at[:5]))}: set start" if at else "it is not in the document"
        raise EvalError(
            f"{where}: {doc!r}[{a.start}:{a.start + n}] is {_clip(text[a.start : a.start + n])!r}, not "
            f"{_clip(a.text)!r} ({now}; offsets are in documents.normalized_text)"
        )
    at = _occurrences(text, a.text)
    if not at:
        raise EvalError(
            f"{where}: {_clip(a.text)!r} is not in {doc!r} (edited since the question set was written? answers "
            "must match documents.normalized_text exactly)"
        )
    if len(at) > 1:
        raise EvalError(
            f"{where}: {_clip(a.text)!r} occurs {len(at)} times in {doc!r} (at {', '.join(map(str, at[:5]))}): "
            "add start to say which"
        )
    return at[0], at[0] + n


def _occurrences(text: str, needle: str) -> list[int]:
    """Offsets of every occurrence of needle in text (overlapping ones too)."""
    out, i = [], text.find(needle)
    while i >= 0:
        out.append(i)
        i = text.find(needle, i + 1)
    return out


def score(
    conn: Any,
    collection: str,
    questions: Sequence[Question],
    qvecs: Any,
    chunks: dict[str, list[Span]],
    *,
    k: int,
    mode: str,
    settings: Settings | None = None,
) -> tuple[dict, list[dict]]:
    """Search every question as users do (the reranker of `settings` too, when one is set) and score the
    retrieved chunks against its answer spans."""
    from pipeline import store
    from pipeline.rerank import scorer

    rows: list[dict] = []
    n = settings.rerank_candidates if settings is not None else 0
    for i, q in enumerate(questions):
        vec = None if qvecs is None else qvecs[i]
        rr = scorer(q.text, settings) if settings is not None else None
        hits = store.search(conn, collection, vec, k=k, query_text=q.text, mode=mode,  # type: ignore[arg-type]
                            rerank=rr, candidates=n)  # fmt: skip
        got = [Retrieved(h.source_uri, h.char_start, h.char_end) for h in hits]
        sc = question_scores(q.excerpts, q.corpus_id, got)
        sc["precision_omega"] = precision_omega(q.excerpts, chunks.get(q.corpus_id, []))
        rows.append(
            {"row": q.row, "question": q.text, "document": q.corpus_id, **{m: round(v, 6) for m, v in sc.items()},
             "retrieved": [[r.corpus_id, r.start, r.end] for r in got]}
        )  # fmt: skip
    return summarize(rows), rows


# ------------------------------------------------------------------------------------------ a run


def run_live_eval(
    collection: str,
    questions: Path | str,
    *,
    k: int = DEFAULT_K,
    mode: str = DEFAULT_MODE,
    max_drop: float = DEFAULT_MAX_DROP,
    set_baseline: bool = False,
    name: str | None = None,
    settings: Settings | None = None,
) -> dict[str, Any]:
    """Score a question set against a collection, store the run, judge it against the baseline.

    Waits for a run writing the collection to finish (its lock), so it scores a consistent state.
    Returns the run's figures and verdict; `passed` is False when recall dropped beyond `max_drop`.
    """
    from pipeline import db, store

    if mode not in _MODES:
        raise ConfigError(f"--search {mode!r}: expected one of {', '.join(_MODES)}")
    if k < 1 or max_drop < 0:
        raise ConfigError("k must be at least 1 and --max-drop at least 0")
    settings = settings or Settings()
    qset = load_question_set(questions, name=name)
    t0 = time.perf_counter()
    with db.connection(db.database_url(settings)) as conn:
        coll = store.get_collection(conn, collection)
        if coll is None:
            raise ConfigError(
                f"no collection {collection!r}: run `chunkyard ingest PATH -c {collection}` first"
            )
        store.lock_collection(conn, coll.id)  # released when the connection closes
        coll = store.get_collection(conn, collection) or coll  # as it is now (a model switch may have landed)
        resolved = resolve(
            qset, store.source_uris(conn, coll.id), lambda u: store.document_texts(conn, coll.id, u)
        )
        params = {"questions": str(qset.path), "question_set": qset.name, "questions_hash": qset.hash,
                  "k": k, "mode": mode, "max_drop": max_drop, "set_baseline": set_baseline,
                  "rerank": rerank_label(settings), "rerank_candidates": settings.rerank_candidates}  # fmt: skip
        run_id = store.start_run(conn, coll.id, kind=RunKind.EVAL, params=params)
        try:
            t1 = time.perf_counter()
            qvecs = None
            if mode != "fulltext":
                from pipeline.embed import query_embedder

                qvecs = query_embedder(coll.embed_model, settings).encode([q.text for q in resolved])
            t2 = time.perf_counter()
            chunks = store.chunk_spans(conn, coll.id, sorted({q.corpus_id for q in resolved}))
            summary, per_q = score(conn, collection, resolved, qvecs, chunks, k=k, mode=mode, settings=settings)
            t3 = time.perf_counter()
            result: dict[str, Any] = {
                "run_id": run_id, "collection_id": coll.id, "question_set": qset.name,
                "questions_hash": qset.hash, "k": k, "search_mode": mode, "n_questions": len(resolved),
                **{m: summary[m]["mean"] for m in ("recall", "precision", "precision_omega", "iou")},
                "hit_rate": summary["hit_rate"], "mrr": summary["mrr"], "max_drop": float(max_drop),
                "rerank": rerank_label(settings),
            }  # fmt: skip
            verdict = store.record_eval(conn, result, per_question=per_q, set_baseline=set_baseline)
            status = RunStatus.COMPLETED if verdict["passed"] else RunStatus.FAILED
            timings = {"resolve": round(t1 - t0, 3), "embed": round(t2 - t1, 3), "search": round(t3 - t2, 3)}
            store.finish_run(
                conn, run_id, status=status, counts={"questions": len(resolved)}, timings=timings
            )
        except BaseException:
            with contextlib.suppress(Exception):  # the database is what failed: the next run marks it
                store.finish_run(conn, run_id, status=RunStatus.CRASHED, counts={}, timings={})
            raise
    worst = sorted(per_q, key=lambda r: (r["recall"], r["row"]))[:3]
    return {
        **{f: v for f, v in result.items() if f != "collection_id"},
        **verdict,
        "collection": collection,
        "questions": str(qset.path),
        "status": str(status),
        "seconds": round(time.perf_counter() - t0, 2),
        "worst": [
            {"row": r["row"], "question": r["question"], "recall": round(r["recall"] * 100, 1)} for r in worst
        ],
    }


def verdict_line(res: dict[str, Any]) -> str:
    """One line for the Prefect UI, logs and the terminal: the recall, the baseline, pass or fail."""
    head = (
        f"eval run {res['run_id']} of collection {res['collection']!r}, question set {res['question_set']!r} "
        f"({res['n_questions']} questions, {res['search_mode']} k={res['k']}"
        f"{', reranked by ' + res['rerank'] if res.get('rerank') else ''}): recall {res['recall']:.1f}%"
    )
    if res["baseline_run_id"] is None:
        return f"{head}, the baseline from now on"
    base = f"baseline run {res['baseline_run_id']} {res['baseline_recall']:.1f}%"
    drop = f"{-res['recall_drop']:+.1f}"
    if res["is_baseline"]:
        return f"{head} ({drop} points from {base}), marked the new baseline"
    if res["passed"]:
        return f"{head} ({drop} points from {base}, allowed -{res['max_drop']:.1f})"
    return (
        f"{head}: dropped {res['recall_drop']:.1f} points below {base} (more than the {res['max_drop']:.1f} "
        f"allowed); per question: SELECT per_question FROM eval_results WHERE run_id = {res['run_id']}"
    )
