"""The one printer of the CLI: progress bars for a run, its warnings and errors, and its tables."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import unquote, urlparse

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

out = Console()
err = Console(stderr=True, soft_wrap=True)  # one line per problem, also when stderr is a file

#: Bars shown for a run, in order; "files" counts whole files, the others the stages of the pipeline.
BARS = ("files", "load", "normalize", "chunk", "embed", "store")


def show_path(uri: str) -> str:
    """A file URI as a path relative to the working directory when it is below it."""
    if not uri.startswith("file://"):
        return uri
    p = Path(unquote(urlparse(uri).path))
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)


class Bars:
    """A run's progress (the `pipeline.stages.Progress` protocol) as rich progress bars on stderr."""

    def __init__(self, *, quiet: bool = False) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("{task.description:>10}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=err,
            disable=quiet or not err.is_terminal and not os.environ.get("CHUNKYARD_PROGRESS"),
        )
        self._bars = {name: self._progress.add_task(name, total=0) for name in BARS}

    def add_total(self, stage: str, n: int) -> None:
        if stage in self._bars and n:
            task = self._bars[stage]
            self._progress.update(task, total=(self._progress.tasks[task].total or 0) + n)

    def advance(self, stage: str, n: int = 1) -> None:
        if stage in self._bars and n:
            self._progress.advance(self._bars[stage], n)

    @contextmanager
    def shown(self) -> Iterator[Bars]:
        with self._progress:
            yield self


def problems(result: dict) -> None:
    """Warnings, skipped files (other than unsupported types) and errors, one line each, on stderr."""
    for uri, msg in result.get("warnings", []):
        err.print(f"[yellow]warning[/]: {escape(show_path(uri))}: {escape(msg)}", highlight=False)
    for uri, msg in result.get("skipped", []):
        if not msg.startswith("unsupported file type"):
            err.print(f"[dim]skipped[/]: {escape(show_path(uri))}: {escape(msg)}", highlight=False)
    for uri, stage, msg in result.get("errors", []):
        err.print(
            f"[red]error[/]: {escape(show_path(uri))}: {escape(msg)} [dim](stage {stage})[/]", highlight=False
        )


def summary(s: dict) -> None:
    """A run's summary as a compact key/value table that fits 80 columns, and a dry run's plan."""
    g = s["counts"].get
    dry = bool(s["plan"]) or s.get("run_id") is None
    title = "dry run · nothing written" if s.get("run_id") is None else f"run {s['run_id']} · {s.get('status')}"
    t = Table(
        title=title + (" · dry run" if dry and s.get("run_id") is not None else ""),
        caption="task-seconds: each stage's time summed over batches, which may run at once",
        show_header=False,
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
    if {"switched", "to_embed", "already_active"} & s["counts"].keys():  # a model switch
        if "to_embed" in s["counts"]:  # its dry run
            row = line(("chunks", "chunks"), ("in the new set", "have_vector"), ("in cache", "in_cache"),
                       ("to embed", "to_embed"))  # fmt: skip
        else:
            state = "on that model already" if g("already_active") else "switched" if g("switched") else "not switched"
            row = line(("chunks", "chunks"), ("kept", "vectors_kept"), ("embedded", "chunks_embedded"),
                       ("from cache", "chunks_cached")) + f" · {state}"  # fmt: skip
        t.add_row("vectors", row)
    tm = s["timings"]
    stages = ("load", "normalize", "diff", "chunk", "embed", "store", "prune")
    t.add_row("task-seconds", " · ".join(f"{st} {tm.get(st, 0.0):.2f}" for st in stages))
    out.print(t)
    if s["plan"]:
        pt = Table(title="plan (nothing written) · sections kept, re-chunked, deleted")
        pt.add_column("file", overflow="fold", ratio=1)  # a long name wraps; it is never cut
        for col in ("action", "kept", "re-chunk", "delete", "chunks"):
            pt.add_column(col, no_wrap=True)
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


def hits(found: list, *, parent: bool) -> None:
    """Search results: rank, score, file, character range, heading path, then the text (or its parent)."""
    if not found:
        out.print("no results")
    for i, h in enumerate(found, 1):
        path = " > ".join(h.heading_path) or "-"
        score = "  -  " if h.score is None else f"{h.score:.3f}"  # a chunk read to complete its section
        note = (
            "  whole section" if h.metadata.get("whole_section")
            else "  rest of the section" if h.metadata.get("completes_section")
            else ""
        )  # fmt: skip
        tokens = f"  {h.tokens_before + h.tokens} tokens" if hasattr(h, "tokens_before") else ""
        out.print(
            f"[bold]{i}. {score}[/]  {escape(show_path(h.source_uri))}{_pages(h.metadata)}  "
            f"\\[{h.char_start}:{h.char_end}]{note}{tokens}  [cyan]{escape(path)}[/]",
            highlight=False,
        )
        snippet = in_parent(h.text, h.parent_text) if parent and h.parent_text else _cut(h.text, 600)
        out.print("   " + snippet.replace("\n", "\n   "), highlight=False, markup=False)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + " …"


def in_parent(chunk: str, parent: str, limit: int = 600) -> str:
    """A hit's chunk within its parent section (`search --parent`): the section around the chunk, about
    `limit` characters of it, the chunk marked »like this«; each hit of one section shows its own chunk."""
    at = parent.find(chunk)
    if at < 0 or len(chunk) >= limit:  # not found (never: offsets are a contract), or no room around it
        return _cut(parent, limit) if at < 0 else "»" + _cut(chunk, limit) + "«"
    room = max(0, limit - len(chunk)) // 2
    lo, hi = max(0, at - room), min(len(parent), at + len(chunk) + room)
    return ("… " if lo else "") + parent[lo:at] + "»" + chunk + "«" + parent[at + len(chunk) : hi] + (" …" if hi < len(parent) else "")


def _pages(meta: dict) -> str:
    """ "  p. 60" or "  pp. 60-61" for a chunk of a paged document (PDF), with OCR noted; else ""."""
    first, last = meta.get("page"), meta.get("page_end")
    if first is None:
        return ""
    where = f"p. {first}" if last in (None, first) else f"pp. {first}-{last}"
    if meta.get("ocr"):
        where += f" (OCR {meta.get('ocr_confidence', 0):.0%})"
    return "  " + where


def status(st: dict) -> None:
    """Collections with their counts, and the last runs: short cells in tables, then the long ones (profiles,
    run counts) as lines of their own, so 80 columns or a pipe cuts no key from its value."""
    t = Table(title="collections")
    for col in ("name", "documents", "sections", "chunks", "languages", "model"):
        t.add_column(col, overflow="fold")  # a long name wraps; it is never cut
    profiles = []
    for c in st["collections"]:
        prof = ", ".join(
            f"{k}={v['kind']}/{v.get('size')}" for k, v in c["profile"].items() if isinstance(v, dict) and "kind" in v
        )
        profiles.append(f"profile of {c['name']}: {prof}")
        t.add_row(
            c["name"],
            str(c["documents"]),
            str(c["sections"]),
            str(c["chunks"]),
            ", ".join(f"{lang or 'no letters'} {n}" for lang, n in c["languages"].items()),
            c["model"].split("/")[-1],
        )
    out.print(t)
    _lines(profiles)
    r = Table(title="last runs")
    for col in ("id", "collection", "kind", "status", "started", "seconds"):
        r.add_column(col, overflow="fold")
    counts = []
    for x in st["runs"]:
        secs = (x["finished_at"] - x["started_at"]).total_seconds() if x["finished_at"] else None
        counts.append(f"run {x['id']}: " + ", ".join(f"{k}={v}" for k, v in sorted(x["counts"].items()) if v))
        r.add_row(
            str(x["id"]),
            x["collection"] or "-",
            x["kind"],
            x["status"],
            x["started_at"].strftime("%Y-%m-%d %H:%M:%S"),
            f"{secs:.1f}" if secs is not None else "-",
        )
    out.print(r)
    _lines(counts)


def _lines(lines: list[str]) -> None:
    """Long `key=value, ...` lines, wrapped between items on a terminal, whole in a pipe."""
    for line in lines:
        out.print(escape(line), highlight=False, soft_wrap=not out.is_terminal)


def chunks(file: Path, doc_type: str, sections: int, rows: list[dict], chunker_line: str) -> None:
    """The chunks of one file with offsets, token counts and heading paths (`chunkyard chunk`)."""
    out.print(
        f"{file}: {doc_type}, {sections} sections, {len(rows)} chunks, chunker {chunker_line}",
        highlight=False,
    )
    for r in rows:
        out.print(
            f"[bold]§{r['section']} \\[{r['start']}:{r['end']}] {r['tokens']} tok[/] "
            f"[cyan]{escape(' > '.join(r['heading_path']))}[/]",
            highlight=False,
        )
        out.print("  " + r["text"].replace("\n", "\n  "), highlight=False, markup=False)


def quality(report: list[dict], *, collection: str | None = None) -> None:
    """Chunk quality per collection: figures per document type with the change from the previous run,
    a token histogram per type, and the large shifts (`chunkyard status --quality`)."""
    from pipeline.store.quality import FIGURES, HISTOGRAM_EDGES, histogram_distance

    if not report:
        where = f"collection {collection!r}" if collection else "any collection"
        out.print(f"no quality figures for {where} yet: they are measured at the end of every run")
        return
    for rep in report:
        now, before = rep["types"], rep["previous"]
        prev = rep["previous_run_id"]
        title = f"chunk quality · {rep['collection']} · run {rep['run_id']} ({rep['kind']}, {rep['status']})"
        out.print(f"[bold]{escape(title)}" + (f" vs run {prev}" if prev else " · first measured run") + "[/]")
        t = Table()
        t.add_column("figure", style="bold", no_wrap=True)
        for name in now:
            t.add_column(name, justify="right")
        flagged = {(s["doc_type"], s["figure"]) for s in rep["shifts"]}
        for key, label, how in FIGURES:
            cells = []
            for name, f in now.items():
                p = before.get(name)
                cell = _figure(f.get(key), how)
                cell = f"[red]{cell} ![/]" if (name, key) in flagged else cell
                cells.append(cell + _change(f.get(key), p.get(key) if p else None, how))
            t.add_row(label, *cells)
        out.print(t)
        edges = list(HISTOGRAM_EDGES)
        out.print(
            "chunks per token bucket (a column counts from its own size up to the next)"
            + ("; moved: the share of chunks in another bucket than in the previous run" if prev else ""),
            highlight=False,
        )
        h = Table(
            box=box.SIMPLE_HEAD,
            show_edge=False,
            padding=(0, 0, 0, 1),
        )
        h.add_column("type", style="bold", no_wrap=True, min_width=8)
        for col in [f"<{edges[0]}", *map(str, edges[:-1]), f"{edges[-1]}+"]:
            h.add_column(col, justify="right", no_wrap=True)
        if prev:
            h.add_column("moved", justify="right", no_wrap=True)
        for name, f in now.items():
            row = [str(n) for n in f.get("histogram") or []]
            p = before.get(name)
            if prev:
                moved = (
                    f"{histogram_distance(p['histogram'], f['histogram']):.0%}"
                    if p and p.get("histogram")
                    else "-"
                )
                row.append(f"[red]{moved} ![/]" if (name, "histogram") in flagged else moved)
            h.add_row(name, *row)
        out.print(h)
        if not prev:
            out.print("first run with figures: nothing to compare yet")
        for s in rep["shifts"]:
            label = dict((k, lab) for k, lab, _ in FIGURES).get(s["figure"], s["figure"])
            out.print(
                f"[yellow]shift[/]: {escape(s['doc_type'])} {escape(label)}: {escape(s['why'])}",
                highlight=False,
            )
        if prev and not rep["shifts"]:
            out.print(f"no large shifts since run {prev}")


def _figure(v: float | None, how: str) -> str:
    if v is None:
        return "-"
    if how == "share":
        return f"{v:.1%}" if v == 0 or v >= 0.001 else f"{v:.3%}"
    return f"{v:g}" if isinstance(v, float) else str(v)


def _change(v: float | None, p: float | None, how: str) -> str:
    """The change from the previous run, dim, on a line of its own: points for shares, per cent for means,
    the difference for counts."""
    if v is None or p is None or v == p:
        return ""
    if how == "share":
        d = f"{(v - p) * 100:+.1f}pt"
    elif how == "relative" and p:
        d = f"{(v - p) / p:+.0%}"
    else:
        d = f"{v - p:+g}"
    return f"\n[dim]{d}[/]"
