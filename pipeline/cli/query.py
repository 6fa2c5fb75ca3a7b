"""Commands that read: search, status, chunk (nothing stored) and eval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from pipeline import console
from pipeline.cli import (
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
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Top-k chunks for a query, with score, file, heading path and character range."""
    from pipeline.search import search as run_search

    found = run_search(
        query,
        settings=_settings(),
        collection=collection,
        k=k,
        mode=mode,
        with_parent=parent,  # type: ignore[arg-type]
    )
    if as_json:
        out.print_json(json.dumps([h.__dict__ for h in found]))
    else:
        console.hits(found, parent=parent)


@app.command()
def status(
    runs: Annotated[int, typer.Option(help="How many recent runs to show.")] = 5,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Collections with document/section/chunk counts and profiles, and the last runs."""
    from pipeline import db, store

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
    from pipeline.stages import preview_chunks

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


@app.command("eval")
def eval_(
    corpora: Annotated[Path, typer.Option("--corpora", help="Folder of corpus files (id = file stem).")],
    questions: Annotated[
        Path, typer.Option("--questions", help="Chroma-style CSV (question, references, corpus_id) or JSONL.")
    ],
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
    k: Annotated[int, typer.Option("-k", min=1, help="Chunks retrieved per question.")] = 5,
    search: Annotated[
        list[str] | None,
        typer.Option(
            "--search",
            help="Search mode to score (repeatable): vector, hybrid, rrf, fulltext. Default: vector and hybrid.",
        ),
    ] = None,
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
) -> None:
    """Score chunking configurations on questions with excerpt spans (Chroma's recall, precision, IoU)."""
    from pipeline import evaluate as ev
    from pipeline.store import SEARCH_MODES

    if as_type not in ("auto", "text", "markdown"):
        raise ConfigError(f"--as {as_type!r}: expected auto, text or markdown")
    modes = list(dict.fromkeys(search or ["vector", "hybrid"]))
    bad = [m for m in modes if m not in SEARCH_MODES]
    if bad:
        raise ConfigError(f"--search {bad[0]!r}: expected one of {', '.join(SEARCH_MODES)}")
    configs = [ev.parse_config(s, doc_type=as_type, section_tokens=section_tokens) for s in strategy or []]
    configs += [
        ev.profile_config(str(p), doc_type=as_type, section_tokens=section_tokens) for p in profile or []
    ]
    if not configs:
        configs = [ev.parse_config("default", doc_type=as_type, section_tokens=section_tokens)]
    doc = ev.run_eval(
        corpora, questions, configs, k=k, modes=modes, settings=_settings(),
        progress=lambda m: err.print(f"[dim]{m}[/]", highlight=False),
    )  # fmt: skip
    js, png = ev.write_outputs(doc, output)
    out.print(ev.markdown_table(doc["results"]), highlight=False, markup=False, soft_wrap=True)
    if per_corpus:
        out.print("\n" + ev.per_corpus_table(doc["results"]), highlight=False, markup=False, soft_wrap=True)
    plot_line = png or "skipped (matplotlib missing: pip install 'chunkyard[eval]')"
    out.print(f"\nfigures: {js}\nplot: {plot_line}", highlight=False)
