"""The `chunkyard` command: ingest, search, status, chunk, db."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import datetime
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote, urlparse

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.config import Profile, Settings, load_profile, strategy_profile
from pipeline.errors import ChunkyardError, ConfigError

app = typer.Typer(
    add_completion=False, no_args_is_help=True, help="Document ingestion into Postgres + pgvector."
)
db_app = typer.Typer(no_args_is_help=True, help="The database: migrate, start, stop, url.")
app.add_typer(db_app, name="db")
out = Console()
err = Console(stderr=True)

EXIT_OK, EXIT_FAILED_FILES, EXIT_ERROR = 0, 1, 2


def show_path(uri: str) -> str:
    """A file URI as a path relative to the working directory when it is below it."""
    if not uri.startswith("file://"):
        return uri
    p = Path(unquote(urlparse(uri).path))
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


def _profile(profile: Path | None, strategy: str | None, params: list[str] | None) -> Profile:
    if strategy:
        kv = {}
        for item in params or []:
            if "=" not in item:
                raise ConfigError(f"--param {item!r}: expected NAME=VALUE")
            k, v = item.split("=", 1)
            try:
                kv[k] = json.loads(v)  # numbers, booleans, lists
            except json.JSONDecodeError:
                kv[k] = v  # plain strings such as language=tr
        return strategy_profile(strategy, **kv)
    return load_profile(profile)


#: Options several commands share, declared once.
CollectionOpt = Annotated[str, typer.Option("--collection", "-c")]
ProfileOpt = Annotated[Path | None, typer.Option(help="Chunking profile (TOML).")]
StrategyOpt = Annotated[str | None, typer.Option(help="One strategy for every document type.")]
ParamOpt = Annotated[list[str] | None, typer.Option(help="Strategy parameter NAME=VALUE (repeatable).")]


# ------------------------------------------------------------------------------------------ ingest


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files or folders to ingest.")],
    collection: CollectionOpt = "default",
    profile: ProfileOpt = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the plan; write nothing.")] = False,
    prune: Annotated[bool, typer.Option(help="Delete rows of files gone from the given folders.")] = True,
    soft_delete: Annotated[
        bool, typer.Option(help="Mark vanished files deleted instead of deleting.")
    ] = False,
    prefect: Annotated[
        bool, typer.Option(help="Run as a Prefect flow (default) or as plain functions.")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Load, normalize, chunk, embed and store documents; only changed sections are re-embedded."""
    prof = _profile(profile, strategy, param)
    stats_json = _run_with_progress(
        [str(p) for p in paths],
        collection=collection,
        profile=prof,
        dry_run=dry_run,
        prune=prune,
        soft_delete=soft_delete,
        use_prefect=prefect,
        quiet=as_json,
    )
    if as_json:
        out.print_json(json.dumps(stats_json))
    else:
        _print_summary(stats_json)
    raise typer.Exit(EXIT_FAILED_FILES if stats_json["errors"] else EXIT_OK)


def _run_with_progress(
    paths, *, collection, profile, dry_run, prune, soft_delete, use_prefect, quiet
) -> dict:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from pipeline import ingest as stages
    from pipeline.sources import discover

    files, _, _ = discover(paths)
    n = len(files)
    progress = Progress(
        TextColumn("{task.description:>10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
        disable=quiet or not err.is_terminal and not os.environ.get("CHUNKYARD_PROGRESS"),
    )
    bars = {s: progress.add_task(s, total=n) for s in ("load", "normalize", "chunk", "embed", "store")}
    progress.update(bars["embed"], total=0)

    def report(stage: str, k: int, total: int | None) -> None:
        if stage not in bars:
            return
        if total is not None:
            t = progress.tasks[bars[stage]].total or 0
            progress.update(bars[stage], total=t + total)
        if k:
            progress.advance(bars[stage], k)

    stages.set_reporter(report)
    try:
        with progress:
            if use_prefect:
                from flows.common import outcome
                from flows.ingest import ingest_flow

                result = outcome(  # a run with failed files ends Failed; its summary is still the result
                    ingest_flow(
                        paths=paths,
                        collection=collection,
                        profile=profile.as_json(),
                        dry_run=dry_run,
                        prune=prune,
                        soft_delete=soft_delete,
                        return_state=True,
                    )
                )
            else:
                stats, run_id, status = stages.run_ingest(
                    paths,
                    settings=Settings(),
                    collection=collection,
                    profile=profile,
                    dry_run=dry_run,
                    prune=prune,
                    soft_delete=soft_delete,
                )
                result = stats.to_json() | {"run_id": run_id, "status": status}
    finally:
        stages.set_reporter(None)
    for uri, msg in result["warnings"]:
        err.print(f"[yellow]warning[/]: {show_path(uri)}: {msg}", highlight=False)
    for uri, msg in result["skipped"]:
        if not msg.startswith("unsupported file type"):
            err.print(f"[dim]skipped[/]: {show_path(uri)}: {msg}", highlight=False)
    for uri, stage, msg in result["errors"]:
        err.print(f"[red]error[/]: {show_path(uri)}: {msg} [dim](stage {stage})[/]", highlight=False)
    return result


def _print_summary(s: dict) -> None:
    g = s["counts"].get
    dry = bool(s["plan"]) or s.get("run_id") == -1
    t = Table(
        title=f"run {s.get('run_id')} · {s.get('status')}" + (" · dry run" if dry else ""), show_header=False
    )
    t.add_column(style="bold")
    t.add_column()

    def line(*pairs: tuple[str, str]) -> str:
        return " · ".join(f"{label} {g(key, 0)}" for label, key in pairs)

    t.add_row(
        "files",
        f"seen {g('documents_seen', 0)} · ingested {g('documents_new', 0) + g('documents_changed', 0)} · "
        + line(("unchanged", "documents_unchanged"), ("skipped", "documents_skipped"),
               ("failed", "documents_failed"), ("deleted", "documents_deleted")),
    )  # fmt: skip
    t.add_row("sections", line(("kept", "sections_kept"), ("re-chunked", "sections_rechunked"),
                               ("deleted", "sections_deleted")))  # fmt: skip
    t.add_row("chunks", line(("written", "chunks_written"), ("embedded", "chunks_embedded"),
                             ("from cache", "chunks_cached"), ("deleted", "chunks_deleted")))  # fmt: skip
    tm = s["timings"]
    stages = ("load", "normalize", "diff", "chunk", "embed", "store", "prune")
    t.add_row("seconds", " · ".join(f"{st} {tm.get(st, 0.0):.2f}" for st in stages))
    out.print(t)
    if s["plan"]:
        pt = Table(title="plan (nothing written)")
        for col in ("file", "action", "sections kept", "re-chunk", "delete", "chunks"):
            pt.add_column(col)
        for r in s["plan"]:
            pt.add_row(
                show_path(r["uri"]),
                r["action"],
                str(r["sections_kept"]),
                str(r["sections_rechunked"]),
                str(r["sections_deleted"]),
                str(r["chunks"]),
            )
        out.print(pt)


# ------------------------------------------------------------------------------------------ search


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    k: Annotated[int, typer.Option("-k", help="How many chunks.")] = 5,
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
    from pipeline import db, store
    from pipeline.embed import get_embedder

    if mode not in store.SEARCH_MODES:
        raise ConfigError(f"--mode {mode!r}: expected one of {', '.join(store.SEARCH_MODES)}")
    settings = Settings()
    with db.connection(db.database_url(settings)) as conn:
        if store.get_collection(conn, collection) is None:
            raise ConfigError(
                f"no collection {collection!r}: run `chunkyard ingest PATH -c {collection}` first"
            )
        vec = None if mode == "fulltext" else get_embedder(settings.model, settings.device).encode([query])[0]
        hits = store.search(conn, collection, vec, k=k, query_text=query, mode=mode, with_parent=parent)
    if as_json:
        out.print_json(json.dumps([h.__dict__ for h in hits]))
        return
    if not hits:
        out.print("no results")
    for i, h in enumerate(hits, 1):
        path = " > ".join(h.heading_path) or "-"
        out.print(
            f"[bold]{i}. {h.score:.3f}[/]  {show_path(h.source_uri)}  [{h.char_start}:{h.char_end}]  [cyan]{path}[/]",
            highlight=False,
        )
        body = h.parent_text if parent and h.parent_text else h.text
        snippet = body if len(body) <= 600 else body[:600] + " …"
        out.print("   " + snippet.replace("\n", "\n   "), highlight=False, markup=False)


# ------------------------------------------------------------------------------------------ status


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
        return
    t = Table(title="collections")
    for col in ("name", "documents", "sections", "chunks", "model", "profile"):
        t.add_column(col)
    for c in st["collections"]:
        prof = ", ".join(
            f"{k}={v['kind']}/{v.get('size')}" for k, v in c["profile"].items() if isinstance(v, dict)
        )
        t.add_row(
            c["name"],
            str(c["documents"]),
            str(c["sections"]),
            str(c["chunks"]),
            c["model"].split("/")[-1],
            prof,
        )
    out.print(t)
    r = Table(title="last runs")
    for col in ("id", "collection", "kind", "status", "started", "seconds", "counts"):
        r.add_column(col)
    for x in st["runs"]:
        secs = (x["finished_at"] - x["started_at"]).total_seconds() if x["finished_at"] else None
        counts = ", ".join(f"{k}={v}" for k, v in sorted(x["counts"].items()) if v)
        r.add_row(
            str(x["id"]),
            x["collection"] or "-",
            x["kind"],
            x["status"],
            x["started_at"].strftime("%Y-%m-%d %H:%M:%S"),
            f"{secs:.1f}" if secs is not None else "-",
            counts,
        )
    out.print(r)


# ------------------------------------------------------------------------------------------- chunk


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
    from pipeline.chunkers.router import Router
    from pipeline.normalize import normalize
    from pipeline.sources import SourceFile, detect, read_bytes, source_uri

    kind = detect(file)
    if kind is None:
        raise ConfigError(f"{file}: unsupported file type {file.suffix!r}")
    src = SourceFile(file, source_uri(file), kind[0], kind[1])
    prof = _profile(profile, strategy, param)
    doc = normalize(src, read_bytes(src), section_tokens=prof.section_tokens_for(src.doc_type))
    chunker = Router(prof, model=Settings().model).chunker_for(doc.doc_type)
    rows = []
    for i, sec in enumerate(doc.sections):
        for ch in chunker.chunk(doc, sec):
            rows.append(
                {
                    "section": i,
                    "heading_path": list(sec.heading_path),
                    "start": ch.start,
                    "end": ch.end,
                    "tokens": ch.token_count,
                    "context": ch.context,
                    "text": ch.text,
                }
            )
    if as_json:
        out.print_json(json.dumps(rows))
        return
    out.print(
        f"{file}: {doc.doc_type}, {len(doc.sections)} sections, {len(rows)} chunks, chunker "
        f"{chunker.config.kind} size={chunker.config.size} {chunker.config.unit}",
        highlight=False,
    )
    for r in rows:
        out.print(
            f"[bold]§{r['section']} \\[{r['start']}:{r['end']}] {r['tokens']} tok[/] "
            f"[cyan]{escape(' > '.join(r['heading_path']))}[/]",
            highlight=False,
        )
        out.print("  " + r["text"].replace("\n", "\n  "), highlight=False, markup=False)


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
        corpora, questions, configs, k=k, modes=modes, settings=Settings(),
        progress=lambda m: err.print(f"[dim]{m}[/]", highlight=False),
    )  # fmt: skip
    js, png = ev.write_outputs(doc, output)
    out.print(ev.markdown_table(doc["results"]), highlight=False, markup=False, soft_wrap=True)
    if per_corpus:
        out.print("\n" + ev.per_corpus_table(doc["results"]), highlight=False, markup=False, soft_wrap=True)
    plot_line = png or "skipped (matplotlib missing: pip install 'chunkyard[eval]')"
    out.print(f"\nfigures: {js}\nplot: {plot_line}", highlight=False)


# ------------------------------------------------------------------- flows: backfill, reindex, prune, serve

_Workers = Annotated[
    int, typer.Option(min=0, help="Local Dask worker processes (0: threads here; CHUNKYARD_DASK_WORKERS).")
]
_DaskAddress = Annotated[
    str | None, typer.Option(help="Dask scheduler to run tasks on, tcp://host:8786 (CHUNKYARD_DASK_ADDRESS).")
]


def _run_flow(name: str, params: dict, *, workers: int, dask_address: str | None, quiet: bool) -> dict:
    """Run a flow here with a files progress bar; its runs show in the UI when PREFECT_API_URL is set."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from flows.common import set_progress
    from flows.run import run_flow

    progress = Progress(
        TextColumn("{task.description:>10}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        disable=quiet or name == "prune" or not err.is_terminal and not os.environ.get("CHUNKYARD_PROGRESS"),
    )
    bar = progress.add_task("files", total=None)

    def report(k: int, total: int | None) -> None:
        if total is not None:
            progress.update(bar, total=total)
        progress.advance(bar, k)

    set_progress(report)
    try:
        with progress:
            result = run_flow(name, params, workers=workers, address=dask_address)
    finally:
        set_progress(None)
    for uri, msg in result.get("warnings", []):
        err.print(f"[yellow]warning[/]: {show_path(uri)}: {msg}", highlight=False)
    for uri, stage, msg in result.get("errors", []):
        err.print(f"[red]error[/]: {show_path(uri)}: {msg} [dim](stage {stage})[/]", highlight=False)
    if os.environ.get("PREFECT_API_URL") and not quiet:
        err.print(f"flow run {result['flow_run_id']} on {os.environ['PREFECT_API_URL']}", highlight=False)
    return result


def _finish(result: dict, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps(result, default=str))
    else:
        _print_summary(result)
    raise typer.Exit(EXIT_FAILED_FILES if result["errors"] else EXIT_OK)


@app.command()
def backfill(
    sources: Annotated[list[str], typer.Argument(help="Files, folders or glob patterns ('docs/**/*.md').")],
    collection: CollectionOpt = "default",
    profile: ProfileOpt = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    since: Annotated[datetime | None, typer.Option(help="Only files modified at or after this time.")] = None,
    until: Annotated[datetime | None, typer.Option(help="Only files modified before this time.")] = None,
    prune: Annotated[
        bool, typer.Option(help="Also delete rows of files gone from these folders (no globs, no dates).")
    ] = False,
    files_per_batch: Annotated[int | None, typer.Option(min=1, help="Most files per task.")] = None,
    batch_bytes: Annotated[int | None, typer.Option(min=1024, help="About this many bytes per task.")] = None,
    workers: _Workers = 0,
    dask_address: _DaskAddress = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Ingest many sources as one Prefect run; run it again after an interruption and it does only the rest."""
    from flows.common import BATCH_BYTES

    params = {
        "sources": sources,
        "collection": collection,
        "profile": _profile(profile, strategy, param).as_json(),
        "modified_since": since,
        "modified_until": until,
        "prune": prune,
        "files_per_batch": files_per_batch,
        "batch_bytes": batch_bytes or BATCH_BYTES,
    }
    _finish(_run_flow("backfill", params, workers=workers, dask_address=dask_address, quiet=as_json), as_json)


@app.command()
def reindex(
    collection: Annotated[str, typer.Option("--collection", "-c", help="The collection to redo.")],
    profile: Annotated[
        Path | None, typer.Option(help="New chunking profile (TOML); default: stored.")
    ] = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    workers: _Workers = 0,
    dask_address: _DaskAddress = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Re-chunk and re-embed a collection from its source files after a profile or CHUNKYARD_MODEL change."""
    prof = _profile(profile, strategy, param) if (profile or strategy) else None
    params = {"collection": collection, "profile": prof.as_json() if prof else None}
    _finish(_run_flow("reindex", params, workers=workers, dask_address=dask_address, quiet=as_json), as_json)


@app.command("prune")
def prune_cmd(
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Only documents under these paths (default: all).")
    ] = None,
    collection: CollectionOpt = "default",
    soft: Annotated[bool, typer.Option(help="Mark deleted instead of deleting.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the run summary as JSON.")] = False,
) -> None:
    """Delete the rows of documents whose source files are gone."""
    params = {"collection": collection, "paths": [str(p) for p in paths or []], "soft": soft}
    _finish(_run_flow("prune", params, workers=0, dask_address=None, quiet=as_json), as_json)


@app.command()
def serve(
    paths: Annotated[list[Path] | None, typer.Argument(help="Files or folders to re-ingest.")] = None,
    collection: CollectionOpt = "default",
    every: Annotated[str | None, typer.Option(help="Interval: 30s, 15m, 1h30m, 1d.")] = None,
    cron: Annotated[str | None, typer.Option(help="Cron schedule, e.g. '*/15 * * * *'.")] = None,
    name: Annotated[str | None, typer.Option(help="Deployment name (default ingest-COLLECTION).")] = None,
    sources: Annotated[
        Path | None, typer.Option(help="TOML file of [[source]] tables (paths, collection, every|cron).")
    ] = None,
    profile: ProfileOpt = None,
    strategy: StrategyOpt = None,
    param: ParamOpt = None,
    prune: Annotated[bool, typer.Option(help="Delete rows of files gone from the folders.")] = True,
    workers: _Workers = 0,
    dask_address: _DaskAddress = None,
) -> None:
    """Re-ingest sources on a schedule (`chunkyard serve ./docs --every 15m`) until interrupted."""
    from pydantic import ValidationError

    from flows import serve as scheduling
    from flows.runners import task_runner

    if sources is not None:
        if paths:
            raise ConfigError("give paths or --sources, not both")
        schedules = scheduling.load_schedules(sources)
    elif not paths:
        raise ConfigError("nothing to serve: give paths (with --every or --cron) or --sources FILE")
    else:
        try:
            schedules = [
                scheduling.Schedule(
                    paths=[str(p) for p in paths],
                    collection=collection,
                    every=every,
                    cron=cron,
                    prune=prune,
                    name=name,
                )
            ]
        except ValidationError as exc:
            raise ConfigError(
                "; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())
            ) from exc
    prof = _profile(profile, strategy, param) if (profile or strategy) else None
    s = Settings()
    runner = None
    if workers or dask_address or s.dask_workers or s.dask_address:
        runner = task_runner(workers=workers or s.dask_workers, address=dask_address or s.dask_address)
    scheduling.serve(schedules, task_runner=runner, profile=prof)


# ---------------------------------------------------------------------------------------------- db


@app.command("db-url")
def db_url() -> None:
    """Print the database URL (starting the embedded server and leaving it running: `chunkyard db stop`)."""
    from pipeline import db

    out.print(db.database_url(keep_running=True), highlight=False, soft_wrap=True)


@db_app.command("migrate")
def db_migrate() -> None:
    """Apply pending migrations and re-apply the SQL functions."""
    from pipeline import db

    url = db.database_url()
    with db.connection(url, migrate_schema=False) as conn:
        applied = db.migrate(conn)
    out.print(f"applied: {', '.join(applied)}" if applied else "schema is up to date")


@db_app.command("start")
def db_start() -> None:
    """Start the embedded server and leave it running."""
    from pipeline import db

    out.print(db.database_url(keep_running=True), highlight=False, soft_wrap=True)


@db_app.command("stop")
def db_stop() -> None:
    """Stop the embedded server."""
    from pipeline import db

    s = Settings()
    out.print("stopped" if db.stop_embedded(s.pgdata) else "not running")


# ---------------------------------------------------------------------------------------- entry


def main() -> None:
    """Console entry point: errors become one clear line and an exit code, not a traceback."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    from pipeline.errors import TransientError

    try:
        rv = app(standalone_mode=False)
        if isinstance(rv, int):
            sys.exit(rv)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except (ChunkyardError, TransientError) as e:
        err.print(f"[red]error[/]: {e}", highlight=False)
        sys.exit(EXIT_ERROR)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    except Exception as e:  # click usage errors and the like
        import click

        if isinstance(e, click.exceptions.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(130)
        raise


if __name__ == "__main__":
    main()
