"""Commands that read: search, status, chunk (nothing stored) and eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline import console
from pipeline.cli.app import (
    CollectionOpt,
    ParamOpt,
    ProfileOpt,
    _profile,
    _settings,
    app,
)
from pipeline.console import err, out
from pipeline.errors import ConfigError

# ------------------------------------------------------------------------------------------ search


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", min=1, max=1000, help="How many chunks (1-1000).")] = 5,
    collection: CollectionOpt = "default",
    mode: Annotated[
        str,
        typer.Option(
            "--mode",
            "-m",
            help="hybrid: cosine and BM25 scores mixed (the best on Chroma's benchmark); rrf: reciprocal "
            "rank fusion of both; vector; fulltext (BM25).",
        ),
    ] = "hybrid",
    parent: Annotated[bool, typer.Option(help="Show the parent section text.")] = False,
    whole_sections: Annotated[
        bool,
        typer.Option(
            help="A section at least half retrieved comes back whole in place of its chunks (marked "
            "whole_section); --no-whole-sections: chunks only.",
        ),
    ] = True,
    budget: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Instead of k chunks, a context of this many tokens: chunks in rank order, and the rest of "
            "a section once half of it is read, in document order (the last chunk may go past the budget).",
        ),
    ] = None,
    source: Annotated[
        list[str] | None,
        typer.Option(
            "--source",
            help="Only files matching this path or glob (repeatable): a file or folder, or a pattern such as "
            "'*.md', 'docs/**' or 'api/*.py' matched after any '/' of the file's URI.",
        ),
    ] = None,
    document: Annotated[
        list[int] | None,
        typer.Option("--document", help="Only this document id (repeatable): a question about known documents."),
    ] = None,
    doc_type: Annotated[
        list[str] | None, typer.Option("--type", help="Only this document type (repeatable): markdown, pdf, code...")
    ] = None,
    language: Annotated[
        list[str] | None, typer.Option("--language", help="Only chunks in this language (ISO 639-1, repeatable).")
    ] = None,
    metadata: Annotated[
        str | None,
        typer.Option("--metadata", help='Only chunks whose metadata (or their document\'s) holds this JSON, e.g. \'{"page": 3}\'.'),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option("--since", help="Only documents written (new or changed) at or after this ISO date or time."),
    ] = None,
    rerank: Annotated[
        bool | None,
        typer.Option(
            "--rerank/--no-rerank",
            help="Reorder the top candidates with the cross-encoder CHUNKYARD_RERANK_MODEL names (the default "
            "when it is set); --no-rerank: the search's own order.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Top-k chunks for a query (or a context of --budget tokens), with score, file, heading path and
    character range; --source, --document, --type, --language, --metadata and --since narrow what is searched."""
    from pipeline.search import cli_filters
    from pipeline.search import search as run_search
    from pipeline.store import WHOLE_SECTION_SHARE

    found = run_search(
        query,
        settings=_settings(),
        collection=collection,
        k=k,
        mode=mode,  # type: ignore[arg-type]
        with_parent=parent,
        whole_sections=WHOLE_SECTION_SHARE if whole_sections else None,
        budget=budget,
        filters=cli_filters(source or [], document or [], doc_type or [], language or [], metadata, since),
        rerank=rerank,
    )
    if as_json:
        out.print_json(json.dumps([h.__dict__ for h in found]))
    else:
        console.hits(found, parent=parent)


@app.command()
def status(
    runs: Annotated[int, typer.Option(help="How many recent runs to show.")] = 5,
    quality: Annotated[
        bool,
        typer.Option(
            "--quality",
            help="Chunk quality of each collection's last run (per document type), the change from the run "
            "before, and the shifts past their thresholds.",
        ),
    ] = False,
    collection: Annotated[
        str | None, typer.Option("--collection", "-c", help="Only this collection (with --quality).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Collections with document/section/chunk counts and profiles, and the last runs."""
    from pipeline import db, store

    if quality:
        with db.connection(db.database_url()) as conn:
            report = store.quality_report(conn, collection)
        if as_json:
            out.print_json(json.dumps(report, default=str))
        else:
            console.quality(report, collection=collection)
        return
    with db.connection(db.database_url()) as conn:
        st = store.status(conn, runs=runs)
    if as_json:
        out.print_json(json.dumps(st, default=str))
    else:
        console.status(st)


@app.command()
def chunk(
    file: Annotated[Path, typer.Argument(help="One file to chunk (nothing is stored).")],
    strategy: Annotated[
        str | None, typer.Option(help="Strategy; default: what the profile's router picks.")
    ] = None,
    param: ParamOpt = None,
    profile: ProfileOpt = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print the chunks of one file with offsets and token counts, for tuning a profile."""
    from pipeline.jobs import preview_chunks

    doc, chunker_line, found = preview_chunks(
        file, _profile(profile, strategy, param), model=_settings().model
    )
    rows = [
        {
            "section": i,
            "heading_path": list(doc.sections[i].heading_path),
            "start": ch.start,
            "end": ch.end,
            "tokens": ch.token_count,
            "context": ch.context,
            "text": ch.text,
        }
        for i, ch in found
    ]
    if as_json:
        out.print_json(json.dumps(rows))
    else:
        console.chunks(file, doc.doc_type, len(doc.sections), rows, chunker_line)


# -------------------------------------------------------------------------------------------- eval


def _optional_collection(name: str | None) -> str | None:
    from pipeline.config import check_collection_name

    return None if name is None else check_collection_name(name)


@app.command("eval")
def eval_(
    questions: Annotated[
        Path,
        typer.Option(
            "--questions",
            help="With --collection: JSONL of question, document, answers (README: Watching retrieval quality). "
            "With --corpora: Chroma-style CSV (question, references, corpus_id) or JSONL.",
        ),
    ],
    collection: Annotated[
        str | None,
        typer.Option(
            "--collection",
            "-c",
            callback=_optional_collection,
            help="Score this live collection, store the run, fail on a recall drop from the baseline.",
        ),
    ] = None,
    corpora: Annotated[
        Path | None,
        typer.Option("--corpora", help="Benchmark: folder of corpus files (id = file stem), indexed afresh."),
    ] = None,
    strategy: Annotated[
        list[str] | None,
        typer.Option(
            "--strategy",
            "-s",
            help="KIND[:k=v,...] (repeatable), e.g. recursive:size=200,overlap=0; also label=, as=text, "
            "section_tokens=, truncate=true (eval-only), separators=chroma. `default` = the default profile.",
        ),
    ] = None,
    profile: Annotated[
        list[Path] | None, typer.Option("--profile", help="A TOML profile to evaluate (repeatable).")
    ] = None,
    k: Annotated[int, typer.Option("-k", min=1, max=1000, help="Chunks retrieved per question.")] = 5,
    search: Annotated[
        list[str] | None,
        typer.Option(
            "--search",
            help="Search mode to score (repeatable): vector, hybrid, rrf, fulltext. Default: vector and hybrid; "
            "one mode with --collection (default hybrid, what `chunkyard search` does).",
        ),
    ] = None,
    max_drop: Annotated[
        float,
        typer.Option(min=0, help="With --collection: recall points below the baseline that fail the run."),
    ] = 5.0,
    set_baseline: Annotated[
        bool, typer.Option("--set-baseline", help="With --collection: this run becomes the baseline.")
    ] = False,
    name: Annotated[
        str | None, typer.Option(help="With --collection: the question set's name (default: file stem).")
    ] = None,
    prefect: Annotated[
        bool | None,
        typer.Option(help="With --collection: a Prefect flow run (default when a Prefect server is there) or not."),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="With --collection: print the run as JSON.")
    ] = False,
    as_type: Annotated[
        str, typer.Option("--as", help="Type corpora by suffix (auto) or treat all as text / markdown.")
    ] = "auto",
    section_tokens: Annotated[
        int | None, typer.Option(help="Override the profiles' section size (cl100k).")
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Writes OUTPUT.json (every figure) and OUTPUT.png.")
    ] = Path("chunkyard-eval"),
    per_corpus: Annotated[bool, typer.Option(help="Also print recall / IoU per corpus.")] = False,
    budget: Annotated[
        list[str] | None,
        typer.Option(
            "--budget",
            help="Also score each search at a budget of N cl100k tokens (repeatable or a list, e.g. "
            "256,512,1024): chunks in rank order until N tokens are used, the last one cut at the budget.",
        ),
    ] = None,
) -> None:
    """Retrieval quality in answer spans (Chroma's recall, precision, IoU): of a live collection
    (--collection, stored per run; exit 1 when recall dropped), or of chunking configurations (--corpora)."""
    from pipeline import evaluate as ev
    from pipeline.store import SEARCH_MODES

    budgets = _budgets(budget or [])
    modes = list(dict.fromkeys(search or []))
    bad = [m for m in modes if m not in SEARCH_MODES]
    if bad:
        raise ConfigError(f"--search {bad[0]!r}: expected one of {', '.join(SEARCH_MODES)}")
    if collection is not None:
        if corpora is not None or strategy or profile:
            raise ConfigError("--collection scores a live collection: --corpora, --strategy and --profile are "
                              "for the benchmark of chunking configurations")  # fmt: skip
        if len(modes) > 1:
            raise ConfigError("--collection scores one search mode per run: give --search once")
        if budgets:
            raise ConfigError("--budget scores chunking configurations (--corpora), not a live collection")
        _live_eval(
            collection, questions, k=k, mode=(modes or ["hybrid"])[0], max_drop=max_drop,
            set_baseline=set_baseline, name=name, prefect=prefect, as_json=as_json,
        )  # fmt: skip
        return
    if corpora is None:
        raise ConfigError(
            "give --collection NAME (score a live collection) or --corpora FOLDER (compare chunking configurations)"
        )
    if as_type not in ("auto", "text", "markdown"):
        raise ConfigError(f"--as {as_type!r}: expected auto, text or markdown")
    modes = modes or ["vector", "hybrid"]
    configs = [ev.parse_config(s, doc_type=as_type, section_tokens=section_tokens) for s in strategy or []]
    configs += [
        ev.profile_config(str(p), doc_type=as_type, section_tokens=section_tokens) for p in profile or []
    ]
    if not configs:
        configs = [ev.parse_config("default", doc_type=as_type, section_tokens=section_tokens)]
    doc = ev.run_eval(
        corpora, questions, configs, k=k, modes=modes, settings=_settings(),
        progress=lambda m: err.print(f"[dim]{m}[/]", highlight=False), budgets=budgets,
    )  # fmt: skip
    js, png = ev.write_outputs(doc, output)
    tables = [ev.markdown_table(doc["results"])]
    if per_corpus:
        tables.append(ev.per_corpus_table(doc["results"]))
    if budgets:
        tables.append(ev.budget_table(doc["results"]))
        if per_corpus:
            tables.append(ev.budget_per_corpus_table(doc["results"]))
    out.print("\n\n".join(tables), highlight=False, markup=False, soft_wrap=True)
    plot_line = png or "skipped (matplotlib missing: pip install 'chunkyard[eval]')"
    if png and budgets:
        plot_line = f"{png}, {png.with_name(png.stem + '-budget.png')}"
    out.print(f"\nfigures: {js}\nplot: {plot_line}", highlight=False)


def _budgets(values: list[str]) -> list[int]:
    """`--budget 256 --budget 512,1024` as sorted distinct token counts; a bad one is a ConfigError."""
    found: set[int] = set()
    for v in values:
        for part in v.replace(" ", ",").split(","):
            if not part:
                continue
            if not part.isdigit() or int(part) < 1:
                raise ConfigError(f"--budget {part!r}: expected a positive number of cl100k tokens")
            found.add(int(part))
    return sorted(found)


def _live_eval(
    collection: str,
    questions: Path,
    *,
    k: int,
    mode: str,
    max_drop: float,
    set_baseline: bool,
    name: str | None,
    prefect: bool | None,
    as_json: bool,
) -> None:
    """Score a question set on a live collection (a Prefect flow run by default); exit 1 when recall dropped."""
    import os

    from pipeline.evaluate.live import load_question_set, verdict_line
    from pipeline.model import NoProgress

    load_question_set(questions, name=name)  # a malformed file is one clear error before anything starts
    params = {
        "collection": collection, "questions": str(questions.expanduser().resolve()), "k": k, "mode": mode,
        "max_drop": max_drop, "set_baseline": set_baseline, "name": name,
    }  # fmt: skip
    if prefect is not False:
        from pipeline.cli.app import _flow, _preflight

        _preflight(collection)
        result = _flow("evaluate", params, prefect=prefect)(NoProgress())  # type: ignore[arg-type]
    else:
        from pipeline.evaluate.live import run_live_eval

        result = run_live_eval(**params, settings=_settings())  # type: ignore[arg-type]
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        out.print(
            f"recall {result['recall']:.1f}%  precision {result['precision']:.1f}%  "
            f"precision_omega {result['precision_omega']:.1f}%  IoU {result['iou']:.1f}%  "
            f"hit rate {result['hit_rate']:.1f}%  MRR {result['mrr']:.3f}",
            highlight=False,
            soft_wrap=True,
        )
        for w in result["worst"]:
            if w["recall"] < 100:
                out.print(
                    f"  lowest recall: {w['row']} ({w['recall']:.1f}%) {w['question']}",
                    highlight=False,
                    markup=False,
                    soft_wrap=True,
                )
        (out if result["passed"] else err).print(
            verdict_line(result), highlight=False, markup=False, soft_wrap=True
        )
        if os.environ.get("PREFECT_API_URL") and result.get("flow_run_id"):
            err.print(f"flow run {result['flow_run_id']} on {os.environ['PREFECT_API_URL']}", highlight=False)
    raise typer.Exit(0 if result["passed"] else 1)
