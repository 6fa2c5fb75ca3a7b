"""The pages of `chunkyard ui`: thin Starlette routes over `store` reads, rendered with Jinja templates.

Read-only by construction: every connection is opened with `default_transaction_read_only` on and without
migrating, so the view works as chunkyard_reader and never writes. Errors become a page with the right
status (404 unknown or not yours, 400 a bad parameter, 503 no database), never a traceback.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from pipeline import db, store
from pipeline.config import Settings
from pipeline.errors import TransientError
from pipeline.store import browse
from pipeline.store import quality as q
from pipeline.ui import layout, plots

log = logging.getLogger(__name__)
HERE = Path(__file__).resolve().parent
PAGE_DOCS, PAGE_RUNS = 50, 20


class PageError(Exception):
    """A page that cannot be shown, with its HTTP status and what to tell the reader."""

    def __init__(self, status: int, title: str, detail: str = "") -> None:
        super().__init__(title)
        self.status, self.title, self.detail = status, title, detail


def _env() -> Environment:
    env = Environment(loader=FileSystemLoader(HERE / "templates"), autoescape=select_autoescape(["html"]))
    env.filters["num"] = lambda v: "-" if v is None else f"{v:,}" if isinstance(v, int) else f"{v:,.2f}"
    env.filters["when"] = lambda v: "-" if v is None else v.strftime("%Y-%m-%d %H:%M:%S")
    env.filters["path"] = lambda hp: " > ".join(h for h in (hp or []) if h) or "(top)"
    return env


def _int(request: Request, name: str, default: int | None, *, lo: int = 0, hi: int = 10**9) -> int | None:
    raw = request.query_params.get(name, "").strip()
    if not raw:
        return default
    try:
        v = int(raw)
    except ValueError:
        raise PageError(400, f"{name}={raw!r} is not a number") from None
    if not lo <= v <= hi:
        raise PageError(400, f"{name}={v} is out of range", f"expected {lo} to {hi}")
    return v


class UI:
    """The app's state: where the database is, the settings (for the query embedder), the templates."""

    def __init__(self, url: str, settings: Settings) -> None:
        self.url, self.settings, self.env = url, settings, _env()

    @contextmanager
    def conn(self) -> Iterator[psycopg.Connection]:
        """A read-only connection for one request (no migration: the view changes nothing)."""
        with db.connection(self.url, migrate_schema=False) as c:
            c.execute("SET default_transaction_read_only = on")
            yield c

    def render(self, template: str, code: int = 200, /, **ctx: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(template).render(**ctx), status_code=code)

    def error(self, status: int, title: str, detail: str = "") -> HTMLResponse:
        return self.render("error.html", status, title=title, detail=detail, status=status)

    # -------------------------------------------------------------------------------------- pages

    def index(self, request: Request) -> Response:
        with self.conn() as c:
            st = store.status(c, runs=10)
        return self.render("index.html", title="collections", st=st)

    def collection(self, request: Request) -> Response:
        name = request.path_params["name"]
        docs_page = _int(request, "docs", 0) or 0
        runs_page = _int(request, "runs", 0) or 0
        match = request.query_params.get("match") or None
        with self.conn() as c:
            facets = browse.collection_facets(c, name)
            if facets is None:
                raise PageError(404, f"no collection {name!r}", "it does not exist, or this role may not read it")
            coll = store.get_collection(c, name)
            counts = next((x for x in store.status(c, runs=0)["collections"] if x["name"] == name), {})
            docs, n_docs = browse.collection_documents(
                c, facets["id"], offset=docs_page * PAGE_DOCS, limit=PAGE_DOCS, match=match
            )
            runs, n_runs = browse.collection_runs(c, facets["id"], offset=runs_page * PAGE_RUNS, limit=PAGE_RUNS)
            history = browse.quality_history(c, facets["id"])
            evals = browse.eval_history(c, facets["id"])
        return self.render(
            "collection.html", title=name, c=facets, coll=coll, counts=counts, docs=docs, n_docs=n_docs,
            docs_page=docs_page, docs_pages=-(-n_docs // PAGE_DOCS), match=match or "", runs=runs,
            n_runs=n_runs, runs_page=runs_page, runs_pages=-(-n_runs // PAGE_RUNS),
            quality=_quality_plots(history), evals=_eval_plots(evals), eval_rows=evals[-10:][::-1],
        )  # fmt: skip

    def document(self, request: Request) -> Response:
        doc_id = _path_id(request, "doc_id")
        hl = _span(request.query_params.get("hl"))
        at = _int(request, "at", None)
        started = time.perf_counter()
        with self.conn() as c:
            d = browse.document_header(c, doc_id)
            if d is None:
                raise PageError(404, f"no document {doc_id}", "it does not exist, or this role may not read it")
            n_pages = layout.pages(d["chunks"])
            page = _int(request, "page", None, hi=n_pages - 1)
            if page is None:
                page = max(browse.chunks_before(c, doc_id, at + 1) - 1, 0) // layout.CHUNKS_PER_PAGE if at else 0
            rows = browse.document_chunks(
                c, doc_id, offset=page * layout.CHUNKS_PER_PAGE, limit=layout.CHUNKS_PER_PAGE
            )
            spans = [(r["id"], r["char_start"], r["char_end"]) for r in rows]
            lo, hi = layout.window(page, d["chunks"], d["chars"], spans)
            text = browse.document_text(c, doc_id, lo, hi)
            sections = browse.document_sections(c, doc_id)
        segs = layout.segments(text, lo, spans, highlight=hl)
        parity = {r["id"]: (page * layout.CHUNKS_PER_PAGE + i) % 2 for i, r in enumerate(rows)}
        first_seg = {}
        for i, s in enumerate(segs):
            for cid in s.chunks:
                first_seg.setdefault(cid, i)
        page_marks = _page_marks(rows, first_seg)
        chunk_info = {
            r["id"]: {
                "id": r["id"], "start": r["char_start"], "end": r["char_end"], "tokens": r["token_count"],
                "context": r["context"], "search_context": r["search_context"], "language": r["language"],
                "heading_path": r["heading_path"],
                "hash": r["content_hash"], "embed_hash": r["embed_hash"], "section": r["section_id"],
                "ordinal": r["ordinal"], "metadata": r["metadata"], "written_last": r["written_last"],
            }
            for r in rows
        }  # fmt: skip
        written = sum(1 for r in rows if r["written_last"])
        return self.render(
            "document.html", title=d["source_uri"], d=d, segs=segs, parity=parity, first_seg=first_seg,
            page_marks=page_marks, chunk_info=chunk_info, sections=_tree(sections), page=page,
            n_pages=n_pages, lo=lo, hi=hi, cut=hi < d["chars"] and page == n_pages - 1, written=written,
            shown=len(rows), hl=hl, pin=_int(request, "chunk", None),
            elapsed=f"{(time.perf_counter() - started) * 1000:.0f} ms",
        )  # fmt: skip

    def search(self, request: Request) -> Response:
        name = request.path_params["name"]
        qp = request.query_params
        query = qp.get("q", "").strip()
        mode = qp.get("mode", "hybrid")
        if mode not in store.SEARCH_MODES:
            raise PageError(400, f"mode={mode!r}", f"expected one of {', '.join(store.SEARCH_MODES)}")
        k = _int(request, "k", 5, lo=1, hi=1000) or 5
        budget = _int(request, "budget", None, lo=1, hi=1_000_000)
        whole = qp.get("whole", "1") != "0"
        hits: list[dict[str, Any]] = []
        with self.conn() as c:
            coll = store.get_collection(c, name)
            if coll is None:
                raise PageError(404, f"no collection {name!r}", "it does not exist, or this role may not read it")
            took = ""
            if query:
                started = time.perf_counter()
                vec = None
                if mode != "fulltext":
                    from pipeline.embed import query_embedder

                    vec = query_embedder(coll.embed_model, self.settings).encode([query])[0]
                share = store.WHOLE_SECTION_SHARE if whole else None
                if budget is not None:
                    found: list = store.context(c, name, vec, budget=budget, query_text=query, mode=mode,
                                                whole_sections=share)  # type: ignore[arg-type]  # fmt: skip
                else:
                    found = store.search(c, name, vec, k=k, query_text=query, mode=mode,
                                         whole_sections=share)  # type: ignore[arg-type]  # fmt: skip
                took = f"{(time.perf_counter() - started) * 1000:.0f} ms"
                parts = browse.score_parts(c, name, vec, query) if mode in ("hybrid", "rrf") else {}
                wins = browse.hit_windows(c, coll.id, [(h.source_uri, h.char_start, h.char_end) for h in found])
                for h, w in zip(found, wins, strict=True):
                    hits.append({"h": h, "w": w, "why": _explain(h, mode, parts.get(h.chunk_id, {}))})
        return self.render(
            "search.html", title=f"search {name}", name=name, query=query, mode=mode, k=k, budget=budget,
            whole=whole, hits=hits, modes=store.SEARCH_MODES, took=took,
        )  # fmt: skip

    def run(self, request: Request) -> Response:
        run_id = _path_id(request, "run_id")
        docs_page = _int(request, "docs", 0) or 0
        with self.conn() as c:
            r = browse.run_detail(c, run_id)
            if r is None:
                raise PageError(404, f"no run {run_id}", "it does not exist, or this role may not read it")
            errors = store.run_errors(c, run_id)
            docs, n_docs = browse.run_documents(c, run_id, offset=docs_page * PAGE_DOCS, limit=PAGE_DOCS)
            prev = None
            if r["quality"] and r["collection_id"] is not None:
                hist = browse.quality_history(c, r["collection_id"])
                before = [h for h in hist if h["run_id"] < run_id]
                prev = before[-1]["quality"] if before else None
        shifts = q.compare(r["quality"], prev) if r["quality"] else []
        return self.render(
            "run.html", title=f"run {run_id}", r=r, errors=errors, docs=docs, n_docs=n_docs, docs_page=docs_page,
            docs_pages=-(-n_docs // PAGE_DOCS), shifts=shifts,
            figures=[(k, lab) for k, lab, _ in q.FIGURES],
            types={t: q.with_shares(f) for t, f in (r["quality"] or {}).items()},
        )  # fmt: skip


# ------------------------------------------------------------------------------------------ helpers


def _path_id(request: Request, name: str) -> int:
    raw = request.path_params[name]
    if not raw.isdigit() or len(raw) > 18:
        raise PageError(404, f"no such id {raw!r}", "ids are whole numbers")
    return int(raw)


def _span(raw: str | None) -> tuple[int, int] | None:
    if not raw:
        return None
    a, _, b = raw.partition("-")
    if not (a.isdigit() and b.isdigit()) or int(a) > int(b):
        raise PageError(400, f"hl={raw!r}", "expected START-END character offsets")
    return int(a), int(b)


def _page_marks(rows: list[dict], first_seg: dict[int, int]) -> dict[int, int]:
    """Segment index -> PDF page number, where a chunk on a new page begins (chunks.metadata 'page')."""
    marks: dict[int, int] = {}
    last = None
    for r in rows:
        p = (r["metadata"] or {}).get("page")
        if p is not None and p != last and r["id"] in first_seg:
            marks.setdefault(first_seg[r["id"]], p)
            last = p
    return marks


def _tree(sections: list[dict]) -> list[dict]:
    """Sections with their depth in the parent tree (the order stays the text's)."""
    depth: dict[int, int] = {}
    for s in sections:
        depth[s["id"]] = depth.get(s["parent_id"], -1) + 1 if s["parent_id"] else 0
        s["depth"] = depth[s["id"]]
    return sections


def _explain(h: Any, mode: str, parts: dict) -> str:
    """Where a hit's score comes from, in words."""
    md = h.metadata or {}
    if h.score is None:
        return "no score: read to complete its section (at least half of it was retrieved)"
    vec, fts = parts.get("vector"), parts.get("fulltext")
    bits = []
    if vec:
        bits.append(f"cosine {vec[1]:.3f} (vector rank {vec[0]})")
    if fts:
        bits.append(f"BM25 {fts[1]:.2f} (full-text rank {fts[0]})")
    if mode in ("hybrid", "rrf") and not fts:
        bits.append("not in the full-text top 50")
    if mode in ("hybrid", "rrf") and not vec:
        bits.append("not in the vector top 50")
    head = {
        "vector": f"cosine similarity {h.score:.3f} between the question's and the chunk's embeddings",
        "fulltext": f"BM25 {h.score:.2f} (k1 1.2, b 0.75) over the chunk's words and its heading context",
        "hybrid": f"{h.score:.3f} = w × cosine + (1 − w) × BM25, each min-max scaled over the candidates; w = 0.5, "
        "or 0 (full text alone) when most candidates are in a language the embedding model was not trained on",
        "rrf": f"{h.score:.4f} = 1/(60 + vector rank) + 1/(60 + full-text rank)",
    }[mode]
    if md.get("whole_section"):
        head += "; the whole section is returned (its chunks covered at least half of it): the score is its best chunk's"
    return head + ("; " + ", ".join(bits) if bits else "")


def _quality_plots(history: list[dict]) -> dict[str, Any]:
    """The per-run figures of 'all' as lines, each point flagged where `status --quality` flags a shift."""
    labels = [f"#{h['run_id']}" for h in history]
    links = [f"/r/{h['run_id']}" for h in history]
    flags: list[dict[str, str]] = []
    for i, h in enumerate(history):
        before = history[i - 1]["quality"] if i else None
        found: dict[str, str] = {}
        for s in q.compare(h["quality"], before):
            found.setdefault(s.figure, f"{s.doc_type}: {s.why}")
        flags.append(found)
    figs = [q.with_shares(h["quality"].get("all", {})) for h in history]
    charts = []
    for key, title, fmt in (("chunks", "chunks", ",.0f"), ("tokens_mean", "tokens mean", ".1f"),
                            ("tokens_p50", "tokens p50", ".0f"), ("at_budget_share", "share at the budget", "%"),
                            ("tiny_share", "tiny chunks share", "%"), ("duplicate_share", "duplicates share", "%"),
                            ("chunks_per_section_mean", "chunks per section", ".2f")):  # fmt: skip
        fl = [f.get(key) or (f.get("histogram") if key == "tokens_mean" else None) for f in flags]
        charts.append(plots.line(title, labels, [f.get(key) for f in figs], flags=fl, fmt=fmt, links=links))
    hist = ""
    if figs and figs[-1].get("histogram"):
        edges = figs[-1].get("histogram_edges") or list(q.HISTOGRAM_EDGES)
        prev = figs[-2].get("histogram") if len(figs) > 1 else None
        hist = plots.histogram(f"tokens per chunk: run {labels[-1]} (bars), the run before (dashed)",
                               edges, figs[-1]["histogram"], prev)  # fmt: skip
    shifts = [(history[i]["run_id"], fig, why) for i, f in enumerate(flags) for fig, why in f.items()]
    return {"charts": charts, "histogram": hist, "shifts": shifts[-20:][::-1], "runs": len(history)}


def _eval_plots(evals: list[dict]) -> list[str]:
    """Recall (and IoU) over evaluation runs, one plot per question set and search setting; failed runs flagged."""
    groups: dict[tuple, list[dict]] = {}
    for e in evals:
        groups.setdefault((e["question_set"], e["search_mode"], e["k"]), []).append(e)
    out = []
    for (qs, mode, k), rows in groups.items():
        labels = [f"#{e['run_id']}" for e in rows]
        flags = [None if e["passed"] else f"recall dropped {e['recall_drop']:.1f} points (max {e['max_drop']})"
                 for e in rows]  # fmt: skip
        out.append(plots.line(f"recall % — {qs}, {mode}, k={k}", labels, [e["recall"] for e in rows], flags=flags,
                              links=[f"/r/{e['run_id']}" for e in rows]))  # fmt: skip
    return out


# ------------------------------------------------------------------------------------------ the app


def _guard(ui: UI, view: Callable[[Request], Response]) -> Callable[[Request], Response]:
    """Map every failure of a page to an error page with its status; the traceback goes to the log only."""

    @functools.wraps(view)
    def wrapped(request: Request) -> Response:
        try:
            return view(request)
        except PageError as e:
            return ui.error(e.status, e.title, e.detail)
        except (TransientError, psycopg.OperationalError) as e:
            first = (str(e).strip().splitlines() or [""])[0]
            return ui.error(503, "the database is not reachable", f"{first} — start it, then reload this page")
        except psycopg.errors.InsufficientPrivilege:
            return ui.error(403, "this role may not read that", "ask for chunkyard_reader (and a grant of the collection)")
        except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedColumn):
            return ui.error(503, "no chunkyard schema in this database",
                            "run `chunkyard db migrate` (or ingest something) as the schema's owner")  # fmt: skip
        except Exception:
            log.exception("chunkyard ui: %s failed", request.url.path)
            return ui.error(500, "this page failed", "the error is in the server's log")

    return wrapped


def create_app(url: str, *, settings: Settings | None = None) -> Starlette:
    """The web app over the database at `url` (read-only)."""
    ui = UI(url, settings or Settings())

    async def not_found(request: Request, exc: Exception) -> Response:
        status = getattr(exc, "status_code", 404)
        return ui.error(status, "no such page" if status == 404 else "bad request", str(getattr(exc, "detail", "")))

    routes = [
        Route("/", _guard(ui, ui.index)),
        Route("/c/{name}", _guard(ui, ui.collection)),
        Route("/c/{name}/search", _guard(ui, ui.search)),
        Route("/d/{doc_id}", _guard(ui, ui.document)),
        Route("/r/{run_id}", _guard(ui, ui.run)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, exception_handlers={HTTPException: not_found})
    app.state.ui = ui
    return app
