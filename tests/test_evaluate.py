"""Retrieval evaluation: Chroma's span metrics on hand-computed cases, input checks, and `chunkyard eval`."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from pipeline import db, store
from pipeline import evaluate as ev
from pipeline.cli import app
from pipeline.evaluate import EvalError, Retrieved, precision_omega, question_scores
from pipeline.normalize import clean

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "eval"


# ------------------------------------------------------------------------------------------ metrics


def test_union_and_covered_count_each_character_once():
    assert ev.union([(5, 10), (0, 3), (8, 12), (12, 14)]) == [(0, 3), (5, 14)]
    assert ev.covered([(0, 10), (5, 15), (20, 21)]) == 16
    assert ev.intersect((0, 10), (10, 20)) == (10, 10)  # touching: empty, but it intersects
    assert ev.intersect((0, 10), (11, 20)) is None


def test_scores_overlapping_and_cross_corpus_chunks_count_in_full():
    # excerpt [10, 20) of corpus a; chunks [0, 15) and [12, 30) overlap; [10, 20) of corpus b is elsewhere
    got = [Retrieved("a", 0, 15), Retrieved("a", 12, 30), Retrieved("b", 10, 20)]
    s = question_scores([(10, 20)], "a", got)
    # I = [10, 15) ∪ [12, 20) = 10 chars; |E| = 10; |R| = 15 + 18 + 10 = 43 (a sum, not a union)
    assert s["recall"] == 1.0
    assert s["precision"] == pytest.approx(10 / 43)
    assert s["iou"] == pytest.approx(10 / (43 + 10 - 10))
    assert (s["hit"], s["rr"]) == (1.0, 1.0)


def test_scores_partial_recall_and_rank():
    # two excerpts (10 + 20 chars); rank 1 misses (other corpus), rank 2 only touches, rank 3 covers 5 chars
    got = [Retrieved("b", 0, 100), Retrieved("a", 20, 30), Retrieved("a", 45, 50)]
    s = question_scores([(10, 20), (40, 60)], "a", got)
    assert s["recall"] == pytest.approx(5 / 30)
    assert s["precision"] == pytest.approx(5 / 115)
    assert s["iou"] == pytest.approx(5 / (115 + 30 - 5))
    assert s["hit"] == 1.0 and s["rr"] == pytest.approx(1 / 3)


def test_scores_nothing_found():
    s = question_scores([(10, 20)], "a", [Retrieved("a", 30, 40)])
    assert s == {"recall": 0.0, "precision": 0.0, "iou": 0.0, "hit": 0.0, "rr": 0.0}


def test_precision_omega():
    # every chunk meeting an excerpt counts, the union of them is the denominator
    chunks = [(0, 15), (15, 30), (30, 45), (45, 60), (60, 70)]
    assert precision_omega([(10, 20), (40, 50)], chunks) == pytest.approx(20 / 60)
    # touching counts (Chroma): [0, 10) and [20, 30) touch [10, 20)
    assert precision_omega([(10, 20)], [(0, 10), (10, 20), (20, 30)]) == pytest.approx(10 / 30)
    # an excerpt part no chunk covers joins the denominator: (0..15) ∪ (15..20)
    assert precision_omega([(10, 20)], [(0, 15), (30, 40)]) == pytest.approx(5 / 20)
    # overlapping chunks: the union, not the sum
    assert precision_omega([(10, 20)], [(0, 20), (5, 25)]) == pytest.approx(10 / 25)


# -------------------------------------------------------------------------------------- token budget


def _tokens(n: int, width: int = 10) -> list[int]:
    """Token ends of a chunk of n tokens of `width` characters each: 10, 20, ..."""
    return [width * (j + 1) for j in range(n)]


def test_budget_takes_chunks_in_rank_order_and_cuts_the_last_one():
    # chunks of 4, 3 and 5 tokens (10 characters each); a budget of 9 takes the first two whole (7 tokens)
    # and the first 2 tokens (20 characters) of the third
    got = [Retrieved("a", 100, 140), Retrieved("a", 0, 30), Retrieved("a", 200, 250)]
    ends = [_tokens(4), _tokens(3), _tokens(5)]
    assert ev.within_budget(got, ends, 9) == [got[0], got[1], Retrieved("a", 200, 220)]
    assert ev.within_budget(got, ends, 7) == got[:2]  # exactly spent: nothing of the third
    assert ev.within_budget(got, ends, 100) == got  # the ranking ran out first
    # excerpt [205, 245): only [205, 220) of it is inside the budget
    s = ev.budget_scores([(205, 245)], "a", got, ends, 9)
    assert s["recall"] == pytest.approx(15 / 40)
    assert s["precision"] == pytest.approx(15 / (40 + 30 + 20))
    assert s["iou"] == pytest.approx(15 / (90 + 40 - 15))
    assert (s["chunks"], s["tokens"], s["rr"]) == (3, 9, pytest.approx(1 / 3))
    # the same excerpt at a budget of 7: not reached
    assert ev.budget_scores([(205, 245)], "a", got, ends, 7)["recall"] == 0.0


def test_budget_smaller_than_the_first_chunk_keeps_its_first_tokens():
    # tokens of uneven width: the cut falls where the 3rd token ends (characters 0-2, 2-7, 7-15, ...)
    got = [Retrieved("a", 50, 80), Retrieved("a", 0, 10)]
    ends = [[2, 7, 15, 22, 30], [5, 10]]
    assert ev.within_budget(got, ends, 3) == [Retrieved("a", 50, 65)]
    s = ev.budget_scores([(60, 70)], "a", got, ends, 3)
    # retrieved [50, 65): 5 of the excerpt's 10 characters, 15 characters read
    assert s["recall"] == pytest.approx(0.5) and s["precision"] == pytest.approx(5 / 15)
    assert s["iou"] == pytest.approx(5 / (15 + 10 - 5))
    assert (s["chunks"], s["tokens"]) == (1, 3)
    assert ev.within_budget(got, ends, 0) == []


def test_budget_counts_overlapping_chunks_in_full():
    # overlapping chunks each cost their tokens (the reader reads both), and their text counts twice in
    # precision while the excerpt's characters count once (the span metrics' own rule)
    got = [Retrieved("a", 0, 40), Retrieved("a", 20, 60), Retrieved("b", 0, 40)]
    ends = [_tokens(4), _tokens(4), _tokens(4)]
    s = ev.budget_scores([(10, 50)], "a", got, ends, 6)
    # rank 1 whole [0, 40), rank 2 cut after 2 tokens: [20, 40), inside rank 1: recall stays 30 / 40
    assert ev.within_budget(got, ends, 6)[1] == Retrieved("a", 20, 40)
    assert s["recall"] == pytest.approx(30 / 40)
    assert s["precision"] == pytest.approx(30 / 60)
    assert s["iou"] == pytest.approx(30 / (60 + 40 - 30))
    # with 8 tokens rank 2 is whole and reaches 50; rank 3 (another corpus) would only cost
    s = ev.budget_scores([(10, 50)], "a", got, ends, 8)
    assert s["recall"] == 1.0 and s["precision"] == pytest.approx(40 / 80)
    s = ev.budget_scores([(10, 50)], "a", got, ends, 12)
    assert s["recall"] == 1.0 and s["precision"] == pytest.approx(40 / 120) and s["tokens"] == 12


def test_budget_option_takes_repeats_and_lists():
    from pipeline.cli.query import _budgets

    assert _budgets(["1024", "256,512", "512"]) == [256, 512, 1024]
    with pytest.raises(ev.ConfigError, match="--budget '0'"):
        _budgets(["256,0"])
    with pytest.raises(ev.ConfigError, match="--budget 'many'"):
        _budgets(["many"])


def test_summarize_is_x100_with_population_std():
    rows = [
        {"recall": 1.0, "precision": 0.1, "precision_omega": 0.5, "iou": 0.1, "hit": 1.0, "rr": 1.0},
        {"recall": 0.0, "precision": 0.0, "precision_omega": 0.3, "iou": 0.0, "hit": 0.0, "rr": 0.0},
    ]
    s = ev.summarize(rows)
    assert s["recall"] == {"mean": 50.0, "std": 50.0}
    assert s["precision_omega"]["mean"] == pytest.approx(40.0)
    assert s["hit_rate"] == 50.0 and s["mrr"] == 0.5 and s["questions"] == 2


# -------------------------------------------------------------------------------- offset mapping


def test_offset_map_undoes_cleanup():
    raw = "ab\r\ncafe\u0301 x\x07y\r\nend"
    norm = clean(raw)
    assert norm == "ab\ncafé xy\nend"
    m = ev.OffsetMap(raw, norm, "t")
    s = norm.index("café")
    assert raw[slice(*m.to_raw(s, s + 4))] == "cafe\u0301"
    s = norm.index("xy")
    a, b = m.to_raw(s, s + 2)
    assert raw[a:b] == "x\x07y"
    assert m.to_raw(0, len(norm)) == (0, len(raw))
    assert ev.OffsetMap("same", "same", "t").to_raw(1, 3) == (1, 3)


def test_offset_map_refuses_rewritten_text():
    with pytest.raises(EvalError, match="beyond character cleanup"):
        ev.OffsetMap("<p>hi</p>", "hi", "page")


# ------------------------------------------------------------------------------------------- input


def _write_csv(path: Path, rows: list[dict]) -> Path:
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["question", "references", "corpus_id"])
        w.writeheader()
        for r in rows:
            w.writerow({**r, "references": json.dumps(r["references"])})
    return path


def _ref(text: str, s: int, e: int) -> dict:
    return {"content": text[s:e], "start_index": s, "end_index": e}


def test_questions_load_from_csv_and_jsonl_alike():
    corpora = ev.load_corpora(FIXTURE / "corpora")
    assert sorted(corpora) == ["bees", "trains"]
    a = ev.load_questions(FIXTURE / "questions.csv", corpora)
    b = ev.load_questions(FIXTURE / "questions.jsonl", corpora)
    assert [(q.text, q.corpus_id, q.excerpts) for q in a] == [(q.text, q.corpus_id, q.excerpts) for q in b]
    assert len(a) == 7 and a[3].excerpts[0] < a[3].excerpts[1]


def test_invalid_questions_name_the_row(tmp_path):
    corpora = ev.load_corpora(FIXTURE / "corpora")
    text = corpora["bees"].text
    good = _ref(text, 2, 14)
    bad_content = {**_ref(text, 2, 14), "content": "something else"}
    rows = [
        {"question": "fine", "references": [good], "corpus_id": "bees"},
        {
            "question": "range",
            "references": [_ref(text, 2, 14) | {"end_index": len(text) + 5}],
            "corpus_id": "bees",
        },
        {"question": "mismatch", "references": [good, bad_content], "corpus_id": "bees"},
        {"question": "corpus", "references": [good], "corpus_id": "wasps"},
        {"question": "overlap", "references": [good, _ref(text, 10, 20)], "corpus_id": "bees"},
    ]
    with pytest.raises(EvalError) as exc:
        ev.load_questions(_write_csv(tmp_path / "q.csv", rows), corpora)
    msg = str(exc.value)
    assert "4 invalid question(s)" in msg
    assert "row 2 (line 3): reference 1: span [2, " in msg and "out of range for corpus 'bees'" in msg
    assert "row 3 (line 4): reference 2: corpus 'bees'[2:14] does not match" in msg
    assert "row 4 (line 5): unknown corpus_id 'wasps' (corpora: bees, trains)" in msg
    assert "row 5 (line 6): references [2, 14) and [10, 20) overlap" in msg
    assert "row 1 " not in msg


def test_invalid_jsonl_names_the_line(tmp_path):
    corpora = ev.load_corpora(FIXTURE / "corpora")
    p = tmp_path / "q.jsonl"
    p.write_text('{"question": "q", "references": "not json", "corpus_id": "bees"}\n{oops\n')
    with pytest.raises(EvalError) as exc:
        ev.load_questions(p, corpora)
    assert "line 1: references is not valid JSON" in str(exc.value)
    assert "line 2: not valid JSON" in str(exc.value)


def test_parse_config():
    c = ev.parse_config(
        "recursive:size=250,overlap=125,separators=chroma,context=false,truncate=true,label=R"
    )
    assert c.label == "R" and c.model_truncates
    assert c.profile.text.size == 250 and c.profile.text.overlap == 125
    assert tuple(c.profile.text.separators) == ev.CHROMA_SEPARATORS
    assert c.profile.markdown == c.profile.text and c.profile.text.context == "none"
    d = ev.parse_config("default:section_tokens=100000,as=text")
    assert d.doc_type == "text" and d.profile.section_tokens == 100000
    s = ev.parse_config('recursive:separators=["\\n\\n", ". "],size=64')
    assert tuple(s.profile.text.separators) == ("\n\n", ". ")
    with pytest.raises(ev.ConfigError, match="`default` takes only"):
        ev.parse_config("default:size=3")
    with pytest.raises(ev.ConfigError, match="as='pdf'"):
        ev.parse_config("recursive:as=pdf")


# -------------------------------------------------------------------------------------- end to end


@pytest.mark.slow
def test_chunkyard_eval_end_to_end(settings, tmp_path):
    runner = CliRunner()
    out = tmp_path / "res" / "eval"
    res = runner.invoke(
        app,
        [
            "eval", "--corpora", str(FIXTURE / "corpora"), "--questions", str(FIXTURE / "questions.csv"),
            "-s", "recursive:size=48,overlap=0,context=false,label=small", "-s", "default:as=text,label=default",
            "-k", "2", "--search", "vector", "--search", "hybrid", "--search", "rrf", "-o", str(out), "--per-corpus",
            "--budget", "64", "--budget", "16,32",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "| k=2 R / P / IoU | 16 tokens R / P / IoU | 32 tokens R / P / IoU | 64 tokens R / P / IoU |" in res.output
    assert out.with_name("eval-budget.png").stat().st_size > 1000
    assert "| small | vector |" in res.output and "| default | hybrid |" in res.output
    assert "| default | rrf |" in res.output
    assert "bees R / IoU" in res.output
    doc = json.loads(out.with_suffix(".json").read_text())
    assert out.with_suffix(".png").stat().st_size > 1000
    assert [(r["label"], r["mode"]) for r in doc["results"]] == [
        ("small", "vector"), ("small", "hybrid"), ("small", "rrf"),
        ("default", "vector"), ("default", "hybrid"), ("default", "rrf"),
    ]  # fmt: skip
    corpora = ev.load_corpora(FIXTURE / "corpora")
    for r in doc["results"]:
        assert r["summary"]["questions"] == 7 and len(r["per_question"]) == 7
        assert r["summary"]["hit_rate"] >= 70  # obvious questions on a tiny corpus
        assert r["chunks"]["over_model_limit"] == 0
        assert set(r["normalization"].values()) == {"unchanged"}
        assert list(r["budgets"]) == ["16", "32", "64"]
        assert set(r["budgets"]["16"]["per_corpus"]) == {"bees", "trains"}
        for q in r["per_question"]:
            b = q["budgets"]
            assert [b[n]["tokens"] for n in ("16", "32", "64")] == [16, 32, 64]  # chunks enough for each
            assert b["16"]["recall"] <= b["32"]["recall"] <= b["64"]["recall"]  # a budget reads a prefix
            assert 1 <= len(q["retrieved"]) <= 2  # a section at least half retrieved comes back once, whole
            for cid, s, e in q["retrieved"]:  # retrieved ranges are real, stripped spans of the corpus
                span = corpora[cid].text[s:e]
                assert span and span == span.strip()
    small = doc["results"][0]
    assert small["chunks"]["count"] > doc["results"][3]["chunks"]["count"]  # the default: bigger chunks
    assert small["ann_agreement"] == 1.0
    # the throwaway collections are gone
    with db.connection(settings.database_url) as conn:
        assert store.status(conn)["collections"] == []


@pytest.mark.slow
def test_offsets_are_mapped_back_when_normalization_changes_the_text(settings, tmp_path):
    corpus = tmp_path / "corpora"
    corpus.mkdir()
    raw = (FIXTURE / "corpora" / "trains.txt").read_text().replace("\n", "\r\n").replace("e", "e\u0301", 3)
    (corpus / "trains.txt").write_bytes(raw.encode())
    shutil.copy(FIXTURE / "corpora" / "bees.md", corpus)
    target = "A low voltage is applied to the rails"
    s = raw.index(target)
    q = _write_csv(
        tmp_path / "q.csv",
        [{"question": "How does a track circuit work?", "references": [_ref(raw, s, s + len(target))],
          "corpus_id": "trains"}],
    )  # fmt: skip
    cfg = ev.parse_config("recursive:size=4000,context=false")  # one chunk per corpus
    doc = ev.run_eval(corpus, q, [cfg], k=1, settings=settings)
    r = doc["results"][0]
    assert r["normalization"] == {"bees": "unchanged", "trains": "mapped"}
    assert r["per_question"][0]["retrieved"] == [["trains", 0, len(raw.rstrip())]]
    assert r["summary"]["recall"]["mean"] == 100.0
    assert r["summary"]["precision"]["mean"] == pytest.approx(100 * len(target) / len(raw.rstrip()), abs=1e-3)


@pytest.mark.slow
def test_spans_indexer_scores_chunks_made_elsewhere(settings):
    corpora = ev.load_corpora(FIXTURE / "corpora")
    questions = ev.load_questions(FIXTURE / "questions.csv", corpora)
    spans = {cid: [(m, m + 1) for m in []] for cid in corpora}
    for cid, c in corpora.items():  # one chunk per paragraph
        start = 0
        for para in c.text.split("\n\n"):
            spans[cid].append((start, start + len(para.rstrip())))
            start += len(para) + 2
    qvecs = ev.embed_questions(questions, settings)
    res = ev.evaluate_index(
        "paragraphs", ev.spans_indexer("paragraphs", corpora, spans, settings), corpora, questions, qvecs,
        settings=settings, k=1,
    )  # fmt: skip
    r = res[0]
    assert r["chunks"]["count"] == sum(len(v) for v in spans.values())
    # precision_Ω depends on the chunks only: check one question by hand
    q = questions[0]
    assert r["per_question"][0]["precision_omega"] == pytest.approx(
        precision_omega(q.excerpts, spans[q.corpus_id]), abs=1e-6
    )
    assert r["summary"]["recall"]["mean"] >= 70


@pytest.mark.slow
def test_hybrid_search_matches_any_word_of_a_question(settings, conn):
    """A question never has all its words in one chunk: full text must match any of them (not all)."""
    from pipeline.embed import get_embedder
    from pipeline.ingest import run_ingest

    run_ingest([FIXTURE / "corpora"], settings=settings, profile=ev.parse_config("recursive:size=48").profile)
    question = "What does a track circuit detect, and how?"
    off_topic = get_embedder(settings.model).encode(["honey bee colonies and their queens"])[0]
    vector = store.search(conn, "default", off_topic, k=3)
    assert all("bees" in h.source_uri for h in vector)
    hybrid = store.search(conn, "default", off_topic, k=3, query_text=question, mode="hybrid")
    assert any("Track circuits detect trains" in h.text for h in hybrid)
