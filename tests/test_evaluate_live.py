"""Evaluation of a live collection: question files checked, runs stored with a baseline, the flow Failed
when recall drops (a profile that cuts every chunk to 8 tokens), and scheduled like ingestion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import flows  # noqa: F401  (quiet Prefect defaults before Prefect is imported)
from pipeline.cli import app
from pipeline.config import strategy_profile
from pipeline.errors import ConfigError
from pipeline.evaluate import EvalError
from pipeline.evaluate.live import load_question_set, run_live_eval
from pipeline.ingest import run_ingest, run_reindex

#: Questions about examples/docs, each answer an exact span of the document's normalized text.
QUESTIONS = [
    ("Why does chunkyard store sections as well as chunks?", "faq.txt",
     ["Small chunks retrieve well because their embeddings are specific, but a language model answers better\n"
      "when it sees the whole section around the match."]),
    ("What happens when I edit one paragraph of a long document?", "docs/faq.txt",
     [{"text": "Only the section that holds the paragraph is re-chunked and re-embedded. Every other section "
               "keeps its\nrows and embeddings, because sections are matched by the hash of their content, not "
               "by their position."}]),
    ("Which embedding model is used by default?", "faq.txt",
     ["all-MiniLM-L6-v2, which makes 384-dimensional vectors and reads at most 256 word pieces."]),
    ("Can several workers ingest into the same collection?", "faq.txt",
     ["Each run takes an advisory lock on its collection, and every document is swapped in within one\n"
      "transaction, so a crash leaves the previous state intact and the next run completes the work."]),
    ("How do I install chunkyard on a machine with an NVIDIA GPU?", "getting-started.md",
     ["On a machine with an NVIDIA GPU, install the CUDA build of PyTorch first, then chunkyard."]),
    ("How do I rotate the API keys?", "operations.html",
     ["To rotate the API keys, create the new key first, deploy it to every worker, and only then revoke\n"
      "the old key."]),
]  # fmt: skip


def write_questions(path: Path, rows=QUESTIONS) -> Path:
    path.write_text(
        "".join(json.dumps({"question": q, "document": d, "answers": a}) + "\n" for q, d, a in rows),
        encoding="utf-8",
    )
    return path


@pytest.fixture
def collection(settings, docs) -> str:
    """examples/docs (a private copy) ingested with the default profile into collection 'docs'."""
    assert run_ingest([docs], settings=settings, collection="docs").stats.errors == []
    return "docs"


# -------------------------------------------------------------------------------------- the file


def test_question_file_format_is_checked_without_a_database(tmp_path):
    qs = load_question_set(write_questions(tmp_path / "qa.jsonl"))
    assert qs.name == "qa" and len(qs.questions) == len(QUESTIONS) and len(qs.hash) == 64
    assert qs.questions[1].answers[0].text.startswith("Only the section")
    # the hash is of the content, not the file name or its layout
    again = tmp_path / "other.jsonl"
    again.write_text("\n\n" + (tmp_path / "qa.jsonl").read_text())
    assert load_question_set(again, name="x").hash == qs.hash
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "not json\n"
        '{"question": "a?", "answers": ["x"]}\n'
        '{"question": "b?", "document": "faq.txt", "answers": [{"text": "abc", "start": 3, "end": 9}]}\n'
        '{"question": "c?", "document": "faq.txt", "answers": [{"txt": "abc"}]}\n'
        '{"question": "d?", "document": "faq.txt", "answers": ["ok"], "extra": 1}\n'
    )
    with pytest.raises(EvalError) as e:
        load_question_set(bad)
    msg = str(e.value)
    assert "5 invalid question(s)" in msg
    assert "line 1: not valid JSON" in msg and "line 2: missing document" in msg
    assert "line 3: answer 1: end must be start + the length of text (3)" in msg
    assert 'line 4: answer 1: expected {"text"' in msg and "line 5: unknown field(s) extra" in msg
    (tmp_path / "qa.csv").write_text("question,document\n")
    with pytest.raises(EvalError, match="must be a .jsonl"):
        load_question_set(tmp_path / "qa.csv")


@pytest.mark.slow
def test_spans_are_checked_against_the_collection_before_a_run_starts(collection, settings, conn, tmp_path):
    rows = [
        ("a?", "faqs.txt", ["Small chunks"]),  # unknown document: a near name is suggested
        ("b?", "faq.txt", [{"text": "Small chunks", "start": 5000}]),  # out of range
        ("c?", "faq.txt", [{"text": "Small chunks", "start": 3}]),  # the text is elsewhere: where
        ("d?", "faq.txt", ["chunkyard"]),  # ambiguous without start
        ("e?", "faq.txt", ["not in the document at all"]),
        ("f?", "missing.md", ["x"]),
    ]
    with pytest.raises(EvalError) as e:
        run_live_eval(collection, write_questions(tmp_path / "bad.jsonl", rows), settings=settings)
    lines = str(e.value).splitlines()[1:]
    assert (
        lines[0].startswith("line 1: unknown document 'faqs.txt': did you mean '") and "faq.txt'?" in lines[0]
    )
    assert lines[1] == (
        "line 2: answer 1: span [5000, 5012) is out of range for 'faq.txt' (1084 characters of normalized text)"
    )
    assert lines[2].startswith(
        "line 3: answer 1: 'faq.txt'[3:15] is 'quently aske', not 'Small chunks' (it occurs at 81"
    )
    assert lines[3].startswith("line 4: answer 1: 'chunkyard' occurs 3 times in 'faq.txt' (at 37, 232, 755)")
    assert "is not in 'faq.txt'" in lines[4] and "unknown document 'missing.md'" in lines[5]
    # nothing was recorded for a question set that does not fit the collection
    assert conn.execute("SELECT count(*) FROM runs WHERE kind = 'eval'").fetchone()[0] == 0
    with pytest.raises(ConfigError, match="no collection 'nope'"):
        run_live_eval("nope", write_questions(tmp_path / "qa.jsonl"), settings=settings)


# ------------------------------------------------------------------------------- runs and the flow


@pytest.mark.slow
def test_evaluate_flow_fails_when_recall_drops(
    prefect_api, collection, settings, conn, tmp_path, monkeypatch
):
    from flows.common import outcome
    from flows.evaluate import evaluate_flow

    qa = str(write_questions(tmp_path / "docs-qa.jsonl"))
    first = evaluate_flow(collection=collection, questions=qa, return_state=True)
    assert first.is_completed(), first.message
    base = outcome(first)
    assert base["is_baseline"] and base["passed"] and base["baseline_run_id"] is None
    assert base["n_questions"] == len(QUESTIONS) and base["recall"] >= 85, base
    assert (base["k"], base["search_mode"], base["status"]) == (5, "hybrid", "completed")
    same = outcome(evaluate_flow(collection=collection, questions=qa, return_state=True))
    assert same["passed"] and not same["is_baseline"] and same["baseline_run_id"] == base["run_id"]
    assert same["recall_drop"] == pytest.approx(0, abs=1e-6)

    # every chunk cut to 8 tokens: five of them hold far less than an answer
    tiny = run_reindex(collection, settings=settings, profile=strategy_profile("fixed", size=8))
    assert tiny.stats.errors == [] and tiny.stats.counts["documents_changed"] == 4
    dropped = evaluate_flow(collection=collection, questions=qa, return_state=True)
    assert dropped.is_failed()
    assert "dropped" in dropped.message and f"baseline run {base['run_id']}" in dropped.message
    res = outcome(dropped)  # the Failed state carries the figures
    assert not res["passed"] and res["status"] == "failed"
    assert res["recall_drop"] > 5 and res["recall"] < base["recall"] - 5

    rows = conn.execute(
        """SELECT r.kind, r.status, r.counts->>'questions', e.is_baseline, e.passed, e.k, e.search_mode,
                  e.n_questions, jsonb_array_length(e.per_question), e.question_set
           FROM eval_results e JOIN runs r ON r.id = e.run_id ORDER BY e.run_id"""
    ).fetchall()
    n = str(len(QUESTIONS))
    assert rows == [
        ("eval", "completed", n, True, True, 5, "hybrid", len(QUESTIONS), len(QUESTIONS), "docs-qa"),
        ("eval", "completed", n, False, True, 5, "hybrid", len(QUESTIONS), len(QUESTIONS), "docs-qa"),
        ("eval", "failed", n, False, False, 5, "hybrid", len(QUESTIONS), len(QUESTIONS), "docs-qa"),
    ]

    # the CLI: through Prefect and without it, exit 1 on the drop; --set-baseline accepts the new level
    monkeypatch.setenv("CHUNKYARD_TEMP_SERVER_OWNER", "0")  # run_flow sets it; restored after the test
    runner = CliRunner()
    res = runner.invoke(app, ["eval", "-c", collection, "--questions", qa, "--prefect"])
    assert res.exit_code == 1, res.output
    assert "dropped" in res.output and "recall" in res.output
    res = runner.invoke(app, ["eval", "-c", collection, "--questions", qa, "--no-prefect", "--json"])
    assert res.exit_code == 1, res.output
    assert json.loads(res.stdout)["passed"] is False
    res = runner.invoke(app, ["eval", "-c", collection, "--questions", qa, "--no-prefect", "--set-baseline"])
    assert res.exit_code == 0, res.output
    assert "marked the new baseline" in res.output
    res = runner.invoke(app, ["eval", "-c", collection, "--questions", qa, "--no-prefect"])
    assert res.exit_code == 0, res.output
    baselines = conn.execute("SELECT count(*) FROM eval_results WHERE is_baseline").fetchone()[0]
    assert baselines == 1
    # another k is another baseline, not a comparison with k=5
    res = runner.invoke(app, ["eval", "-c", collection, "--questions", qa, "--no-prefect", "-k", "1"])
    assert res.exit_code == 0 and "the baseline from now on" in res.output, res.output


@pytest.mark.slow
def test_eval_results_are_granted_and_covered_by_row_level_security(collection, conn, settings, tmp_path):
    run_live_eval(collection, write_questions(tmp_path / "qa.jsonl"), settings=settings, mode="fulltext")
    privileges = conn.execute(
        """SELECT has_table_privilege('chunkyard_reader', 'eval_results', 'SELECT'),
                  has_table_privilege('chunkyard_reader', 'eval_results', 'INSERT'),
                  has_table_privilege('chunkyard_writer', 'eval_results', 'INSERT')"""
    ).fetchone()
    assert privileges == (True, False, True)
    conn.execute("SELECT chunkyard_enable_rls()")
    on = dict(conn.execute("SELECT relname, relrowsecurity FROM pg_class WHERE relkind = 'r'").fetchall())
    assert on["eval_results"] and on["chunks"] and on["fts_terms"] and not on["collection_readers"]
    conn.execute("SELECT chunkyard_disable_rls()")
    assert not conn.execute("SELECT relrowsecurity FROM pg_class WHERE relname = 'eval_results'").fetchone()[
        0
    ]


# ------------------------------------------------------------------------------------- scheduling


def test_eval_schedules_come_from_the_sources_file(tmp_path):
    from flows import serve as scheduling

    write_questions(tmp_path / "docs-qa.jsonl")
    f = tmp_path / "sources.toml"
    f.write_text(
        '[[source]]\npaths = ["docs"]\ncollection = "docs"\ncron = "0 2 * * *"\n\n'
        '[[eval]]\ncollection = "docs"\nquestions = "docs-qa.jsonl"\ncron = "0 3 * * *"\nmax_drop = 3\n'
    )
    ingest, ev = scheduling.load_schedules(f)
    assert ingest.deployment_name == "ingest-docs" and ev.deployment_name == "eval-docs-docs-qa"
    assert ev.questions == str((tmp_path / "docs-qa.jsonl").resolve()) and (ev.k, ev.mode) == (5, "hybrid")
    f.write_text('[[eval]]\nquestions = "nope.jsonl"\nevery = "1d"\n')
    with pytest.raises(ConfigError, match="eval 1: .*questions file not found"):
        scheduling.load_schedules(f)
    f.write_text('[[eval]]\nquestions = "docs-qa.jsonl"\nevery = "1d"\nmode = "bm25"\n')
    with pytest.raises(ConfigError, match="eval 1: mode"):
        scheduling.load_schedules(f)


@pytest.mark.slow
def test_scheduled_evaluation_deployment(prefect_api, tmp_path):
    from datetime import timedelta

    from prefect import get_client

    from flows import serve as scheduling

    qa = write_questions(tmp_path / "docs-qa.jsonl")
    s = scheduling.EvalSchedule(questions=str(qa), collection="docs", every="1d", max_drop=2.5)
    dep_id = scheduling.deployment(s).apply()
    with get_client(sync_client=True) as client:
        dep = client.read_deployment(dep_id)
    assert dep.name == "eval-docs-docs-qa" and "eval" in dep.tags
    assert [x.schedule.interval for x in dep.schedules] == [timedelta(days=1)]
    assert dep.parameters == {
        "collection": "docs", "questions": str(qa.resolve()), "k": 5, "mode": "hybrid", "max_drop": 2.5,
    }  # fmt: skip
    assert dep.global_concurrency_limit is not None and dep.global_concurrency_limit.limit == 1
