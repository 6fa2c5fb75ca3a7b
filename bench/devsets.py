"""Question sets written here over public documents, for checks beside Chroma's benchmark.

    python -m bench.eval_chroma target --set fastapi      # any harness run, on the FastAPI dev set
    python -m bench.peers --set contracts                 # the peers on the contracts dev set
    python -m bench.devsets fetch-contracts DEST          # the contracts' documents, at pinned commits
    python -m bench.devsets fetch-multilingual DEST       # the multilingual set's pages, at a pinned commit
    python -m bench.eval_chroma target --set ml-zh        # one language of the multilingual set

No set copies a document into the repository: each stores character spans `[start, end, sha256 prefix]` of
its documents, and is materialized at run time from a local folder, each span checked against its hash.

`fastapi` (`bench/data/fastapi-spans.jsonl`): questions written for this repository over the FastAPI
tutorial (release 0.140.0, top-level pages of docs/en/docs/tutorial; 41 files with real heading structure),
from ../shared (or $CHUNKYARD_FASTAPI_DIR). Some questions are short facts, some ask for whole lists or
paragraphs (long, clause-like answers), and some use a fixed template ("Highlight the parts (if any) of this
documentation related to ...") whose common words dominate a full-text ranking.

`fastapi-qa` (`bench/data/fastapi-qa.jsonl`, the live-eval question file of the README): 38 questions over
17 pages of release 0.141.1 (tutorial, advanced, deployment, release notes), answers as exact quotes; the
corpora are those 17 pages.

`contracts` (`bench/data/contracts-spans.jsonl`): 108 questions written for this repository over 15 public
agreements (terms of service, developer and partner agreements, license terms, an NDA), from
$CHUNKYARD_CONTRACTS_DIR (default ../shared/bench/contracts), a flat folder of `<corpus_id>.md` files that
`fetch-contracts` writes. 74 questions (24 categories) use the template of contract-review sets
("Highlight the parts (if any) of this contract related to "<Category>" that should be reviewed by a
lawyer. Details: <what the category is>"), with the same text for every agreement (the question does not name the agreement, so every
governing-law clause in the collection competes); 34 are plain questions. Answers are whole clauses
(median 666 characters, about 140 cl100k tokens; up to 3 spans). Sources (all public, licences permit reuse):

- github/site-policy @ 12992597c5d9d8cfc006693c54b9609d9993bc99 (CC0-1.0): 13 files of Policies/github-terms/
  (Terms of Service, Corporate Terms of Service, Sponsors Additional Terms, Marketplace Developer Agreement,
  Secret Scanning Partner Program Agreement, Registered Developer Agreement, Copilot Extension Developer
  Policy, Terms for Additional Products and Features, Educational Use Agreement, Marketplace Terms of
  Service, Pre-release License Terms, Research Program Terms, Event Terms);
- basecamp/policies @ d39f6f17bbd90d82b1df9fa7a0df845edd487de0 (CC BY 4.0, 37signals): terms/index.md;
- CommonPaper/Mutual-NDA @ 2a3068b6c0ab6015c440f541d5b215bc3ac2f4cb (CC BY 4.0, Common Paper): Mutual-NDA.md.

`contracts-footers`: the same documents and questions with a page footer ("<title> | Page N") inserted at a
paragraph break about every 3,000 characters (never inside an answer), as contracts converted from PDF
carry; spans are shifted to match. Evaluate it as plain text (`default:as=text`) to take the headings away too.

`contracts-plain`: the same documents and questions as plain-text agreements (`.txt` files): the front matter
replaced by the title as the first line, and no markup (heading marks, bold, link targets, inline HTML and
comments removed; a link keeps its text); spans are shifted to match. Their structure is what plain text
has: title lines, numbered clauses, capitalised lines (README, "Headings in plain text").

`licenses` (`bench/data/licenses-spans.jsonl`): 24 questions written for this repository over four license
texts as Debian ships them in /usr/share/common-licenses (Apache-2.0, GPL-3, MPL-2.0, LGPL-2.1; set
$CHUNKYARD_LICENSES_DIR to that folder), plain text with numbered sections. The questions were written
after the plain-text heading rules and never used to tune them: a check of those rules on documents they
were not written from. Answers are whole clauses or paragraphs (median about 400 characters).

`ml-en`, `ml-de`, `ml-es`, `ml-ru`, `ml-zh` (`bench/data/multilingual-spans.jsonl`, issue 24): one parallel
question set in five languages, to measure full-text, vector and hybrid search per language. Each language is
its own set, so its own corpora and collection: run the harness once per language and compare the rows.
Source: the FastAPI documentation and its translations (fastapi/fastapi @
c3f316b7e814667e8ee81e03a7330d00ee61e45c, release 0.141.1, MIT licence), the same 20 pages of
docs/<lang>/docs/tutorial/ in each language (ML_PAGES: background-tasks, body, cors, debugging,
dependencies/index, dependencies/dependencies-with-yield, encoder, extra-models, first-steps, handling-errors,
header-params, middleware, path-params, query-params, request-files, request-forms, response-status-code,
security/index, security/oauth2-jwt, testing), from $CHUNKYARD_MULTILINGUAL_DIR (default
../shared/bench/multilingual), a folder `<lang>/<corpus id>.md` that `fetch-multilingual` writes (corpus id:
the page's path with "/" as "__"). At that commit all 51 tutorial pages exist in en, de, es, ru and zh with
the same section anchors ("{ #anchor }"), and the 20 are real translations (no English fallback); there is no
Danish translation. Every page is in each corpus, asked about or not. 60 questions, the same in every language
(300 in all): written in English for this repository, then translated here by hand into German, Spanish,
Russian and Chinese as a user of that language would type them (identifiers such as `Depends` or `status_code`
kept, as users keep them). Each answer is one prose block (a sentence, a short paragraph or a bullet list;
never code, since code is the same in every language and would hide the language effect) of that language's
page: the block in the same section at the same position as the English one (each section that holds an answer
has the same number of prose blocks in all five languages, and each aligned block was read against the English
one), found by exact substring search in the page, so offsets are exact; 1 span per question. Median answer
length: English 126 characters, German 158, Spanish 142, Russian 136, Chinese 52. Expect English high and
Chinese and Russian low with an English-only model and the `english` text-search configuration: that gap is
what the set measures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.common import ROOT, shared_data

DATA = ROOT / "bench" / "data"

#: name -> (folder under ../shared/bench, subfolder, question file, env variable of the folder)
SETS = {
    "fastapi": ("fastapi-docs", "0.140.0/tutorial", DATA / "fastapi-spans.jsonl", "CHUNKYARD_FASTAPI_DIR"),
    "fastapi-qa": ("fastapi-docs", "0.141.1", DATA / "fastapi-qa.jsonl", "CHUNKYARD_FASTAPI_DIR"),
    "contracts": ("contracts", "", DATA / "contracts-spans.jsonl", "CHUNKYARD_CONTRACTS_DIR"),
    "contracts-footers": ("contracts", "", DATA / "contracts-spans.jsonl", "CHUNKYARD_CONTRACTS_DIR"),
    "contracts-plain": ("contracts", "", DATA / "contracts-spans.jsonl", "CHUNKYARD_CONTRACTS_DIR"),
    "licenses": ("licenses", "", DATA / "licenses-spans.jsonl", "CHUNKYARD_LICENSES_DIR"),
}

#: The multilingual set: one set per language (`ml-en`, `ml-de`, ...), each its own corpora and collection,
#: the same questions in each; the pages of every language come from one commit of fastapi/fastapi.
ML_LANGS = ("en", "de", "es", "ru", "zh")
ML_REPO, ML_COMMIT = "fastapi/fastapi", "c3f316b7e814667e8ee81e03a7330d00ee61e45c"
#: Pages of docs/<lang>/docs/tutorial/ (corpus id: the path with "/" as "__", without ".md").
ML_PAGES = (
    "background-tasks",
    "body",
    "cors",
    "debugging",
    "dependencies/index",
    "dependencies/dependencies-with-yield",
    "encoder",
    "extra-models",
    "first-steps",
    "handling-errors",
    "header-params",
    "middleware",
    "path-params",
    "query-params",
    "request-files",
    "request-forms",
    "response-status-code",
    "security/index",
    "security/oauth2-jwt",
    "testing",
)
for _lang in ML_LANGS:
    SETS[f"ml-{_lang}"] = ("multilingual", _lang, DATA / "multilingual-spans.jsonl", "CHUNKYARD_MULTILINGUAL_DIR")
NAMES = tuple(SETS)

#: Sets whose documents are plain text (written as .txt, so the pipeline reads them as such).
PLAIN = {"contracts-plain", "licenses"}

#: The contracts' documents: corpus id -> (repository, commit, path). Licences in the docstring.
_SP = ("github/site-policy", "12992597c5d9d8cfc006693c54b9609d9993bc99")
CONTRACT_FILES = {
    **{
        name: (*_SP, f"Policies/github-terms/{name}.md")
        for name in (
            "github-terms-of-service",
            "github-corporate-terms-of-service",
            "github-sponsors-additional-terms",
            "github-marketplace-developer-agreement",
            "github-secret-scanning-partner-program-agreement",
            "github-registered-developer-agreement",
            "github-copilot-extension-developer-policy",
            "github-terms-for-additional-products-and-features",
            "github-educational-use-agreement",
            "github-marketplace-terms-of-service",
            "github-pre-release-license-terms",
            "github-research-program-terms",
            "github-event-terms",
        )
    },
    "basecamp-terms": ("basecamp/policies", "d39f6f17bbd90d82b1df9fa7a0df845edd487de0", "terms/index.md"),
    "commonpaper-mutual-nda": (
        "CommonPaper/Mutual-NDA",
        "2a3068b6c0ab6015c440f541d5b215bc3ac2f4cb",
        "Mutual-NDA.md",
    ),
}

#: Characters between page footers in `contracts-footers` (about a printed page).
PAGE_CHARS = 3000


def source_dir(name: str) -> Path:
    """The public documents a set is written over (never inside the repository)."""
    folder, sub, _, var = SETS[name]
    base = shared_data(folder, var)
    return base / sub if sub else base


def _records(name: str) -> list[dict]:
    """The set's rows as {question, corpus_id, spans: [[start, end, digest or None]]} (text checked later)."""
    rows = [json.loads(x) for x in SETS[name][2].read_text(encoding="utf-8").splitlines() if x.strip()]
    if name.startswith("ml-"):  # one row per question, every language in it: this language's part
        lang = name.removeprefix("ml-")
        return [{"question": r[lang]["question"], "corpus_id": r["corpus_id"], "spans": r[lang]["spans"]}
                for r in rows]  # fmt: skip
    if name != "fastapi-qa":
        return rows
    out = []
    for r in rows:  # the live-eval format: a document path and answers as quotes (or {text, start})
        cid = r["document"].removesuffix(".md").replace("/", "__")
        text = (source_dir(name) / r["document"]).read_text(encoding="utf-8")
        spans = []
        for a in r["answers"]:
            quote, at = (a, None) if isinstance(a, str) else (a["text"], a.get("start"))
            s = text.find(quote) if at is None else at
            if s < 0:
                raise SystemExit(f"{name}: {r['document']}: answer not found: {quote[:60]!r}")
            spans.append([s, s + len(quote), hashlib.sha256(quote.encode()).hexdigest()[:16]])
        out.append({"question": r["question"], "corpus_id": cid, "spans": spans, "path": r["document"]})
    return out


#: Markdown that a plain-text agreement does not have (`contracts-plain`): front matter, comments, heading
#: marks, bold and underline marks, link targets and inline HTML tags; each match -> what replaces it.
_MARKUP = re.compile(
    r"(?P<front>\A---\n(?:.*?\n)??title: (?P<title>[^\n]+)\n.*?---\n)"
    r"|(?P<comment><!--.*?-->\n?)"
    r"|^(?P<hashes>#{1,6} )"
    r"|(?P<bold>\*\*|__)"
    r"|\[(?P<link>[^\]\n]+)\]\([^)\n]*\)"
    r"|(?P<tag></?span[^>]*>)",
    re.M | re.S,
)


def _as_plain(text: str, spans: list[list]) -> tuple[str, dict[int, int]]:
    """`text` as a plain-text agreement would read (its title as the first line, no markup), and the new
    offset of every old offset that is a span boundary (one inside removed markup goes to where it was)."""
    segs: list[tuple[int, int, str | None]] = []  # (old start, old end, replacement; None: kept as is)
    prev = 0
    for m in _MARKUP.finditer(text):
        segs.append((prev, m.start(), None))
        if m.group("link") is not None:  # "[text](target)" -> "text"
            segs += [(m.start(), m.start("link"), ""), (m.start("link"), m.end("link"), None)]
            segs.append((m.end("link"), m.end(), ""))
        else:
            title = m.group("title")
            segs.append((m.start(), m.end(), title.strip().strip("'\"") + "\n\n" if title else ""))
        prev = m.end()
    segs.append((prev, len(text), None))
    out, starts, at = [], [], 0
    for a, b, rep in segs:
        starts.append(at)
        piece = text[a:b] if rep is None else rep
        out.append(piece)
        at += len(piece)

    def moved(x: int) -> int:  # the first segment holding x (a kept one holds its end too)
        for (a, b, rep), at in zip(segs, starts, strict=True):
            if a <= x < b or (rep is None and x == b):
                return at + (x - a) if rep is None else at
        raise ValueError(x)

    return "".join(out), {x: moved(x) for s, e, _ in spans for x in (s, e)}


def _with_footers(cid: str, text: str, spans: list[list]) -> tuple[str, dict[int, int]]:
    """`text` with a footer at a paragraph break about every PAGE_CHARS characters outside `spans`, and the
    shift of every old offset that is a span boundary."""
    title = next(
        (m.group(1).strip() for m in re.finditer(r"^title: (.+)$|^# (.+)$", text, re.M) if m.group(1)),
        cid.replace("-", " ").title(),
    )
    inside = [(s, e) for s, e, _ in spans]
    breaks = [m.start() for m in re.finditer(r"\n\n", text)]
    cuts, last = [], 0
    for b in breaks:
        if b - last >= PAGE_CHARS and not any(s <= b < e for s, e in inside):
            cuts.append(b)
            last = b
    pieces, prev = [], 0
    for n, c in enumerate(cuts, 1):
        pieces += [text[prev:c], f"\n\n{title} | Page {n}"]
        prev = c
    pieces.append(text[prev:])
    shift = {}
    for s, e, _ in spans:
        for x in (s, e):
            shift[x] = x + sum(len(f"\n\n{title} | Page {n}") for n, c in enumerate(cuts, 1) if c < x)
    return "".join(pieces), shift


#: Sets whose documents are rewritten from the originals: (corpus id, text, spans) -> (text, new offsets).
REWRITES: dict[str, Callable[[str, str, list[list]], tuple[str, dict[int, int]]]] = {
    "contracts-footers": _with_footers,
    "contracts-plain": lambda cid, text, spans: _as_plain(text, spans),
}


def materialize(name: str, dest: Path | None = None) -> tuple[Path, Path]:
    """A corpora folder and a questions JSONL (Chroma's fields) for `name`, built in a temporary folder."""
    src = source_dir(name)
    if not src.is_dir():
        hint = {"contracts": "fetch-contracts", "ml-": "fetch-multilingual"}
        cmd = next((c for k, c in hint.items() if name.startswith(k)), None)
        hint = f"; create it with: python -m bench.devsets {cmd} DIR" if cmd else ""
        raise SystemExit(f"{name}: no documents at {src} (set ${SETS[name][3]}){hint}")
    dest = dest or Path(tempfile.mkdtemp(prefix=f"chunkyard-{name}-"))
    corpora = dest / "corpora"
    corpora.mkdir(parents=True, exist_ok=True)
    recs = _records(name)
    texts: dict[str, str] = {}
    for rec in recs:
        cid = rec["corpus_id"]
        if cid not in texts:
            texts[cid] = (src / rec.get("path", f"{cid}.md")).read_text(encoding="utf-8")
        for s, e, digest in rec["spans"]:
            if hashlib.sha256(texts[cid][s:e].encode()).hexdigest()[: len(digest)] != digest:
                raise SystemExit(f"{name}: {cid}[{s}:{e}] changed; the set is for {src}")
    rewrite = REWRITES.get(name)
    if rewrite is not None:  # each document rewritten, its spans moved with it
        for cid in list(texts):
            spans = [sp for r in recs if r["corpus_id"] == cid for sp in r["spans"]]
            texts[cid], shift = rewrite(cid, texts[cid], spans)
            for r in recs:
                if r["corpus_id"] == cid:
                    r["spans"] = [[shift[s], shift[e], d] for s, e, d in r["spans"]]
    rows = []
    for rec in recs:
        text = texts[rec["corpus_id"]]
        refs = [{"content": text[s:e], "start_index": s, "end_index": e} for s, e, _ in rec["spans"]]
        rows.append({"question": rec["question"], "references": refs, "corpus_id": rec["corpus_id"]})
    if name in ("fastapi",):  # every page of the folder, asked about or not
        for p in sorted(src.glob("*.md")):
            shutil.copyfile(p, corpora / p.name)
    elif name.startswith("ml-"):  # every page of the language, asked about or not
        for cid in (p.replace("/", "__") for p in ML_PAGES):
            shutil.copyfile(src / f"{cid}.md", corpora / f"{cid}.md")
    else:
        ext = ".txt" if name in PLAIN else ".md"  # plain text is read as plain text
        for cid, text in texts.items():
            (corpora / f"{cid}{ext}").write_text(text, encoding="utf-8")
    questions = dest / "questions.jsonl"
    questions.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return corpora, questions


def fetch_contracts(dest: Path, git_dirs: dict[str, str]) -> None:
    """Write the contracts' documents to `dest` from clones of their repositories (cloned here unless given)."""
    dest.mkdir(parents=True, exist_ok=True)
    tmp = None
    for cid, (repo, commit, path) in CONTRACT_FILES.items():
        gd = git_dirs.get(repo)
        if gd is None:
            tmp = tmp or Path(tempfile.mkdtemp(prefix="chunkyard-contracts-"))
            gd = str(tmp / repo.replace("/", "+"))
            if not Path(gd).exists():
                subprocess.run(["git", "clone", "--bare", "--filter=blob:none", f"https://github.com/{repo}", gd],
                               check=True)  # fmt: skip
            git_dirs[repo] = gd
        blob = subprocess.run(["git", "-C", gd, "show", f"{commit}:{path}"], check=True, capture_output=True)
        (dest / f"{cid}.md").write_bytes(blob.stdout)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    materialize("contracts", Path(tempfile.mkdtemp(prefix="chunkyard-check-")))  # every span checked
    print(f"{len(CONTRACT_FILES)} documents in {dest}; export CHUNKYARD_CONTRACTS_DIR={dest}")


def fetch_multilingual(dest: Path, git_dir: str | None) -> None:
    """Write the multilingual set's pages (ML_COMMIT) to `dest`/<lang>/<corpus id>.md from a clone of fastapi."""
    tmp = None
    if git_dir is None:
        tmp = Path(tempfile.mkdtemp(prefix="chunkyard-multilingual-"))
        git_dir = str(tmp / "fastapi.git")
        subprocess.run(["git", "clone", "--bare", "--filter=blob:none", f"https://github.com/{ML_REPO}", git_dir],
                       check=True)  # fmt: skip
    for lang in ML_LANGS:
        (dest / lang).mkdir(parents=True, exist_ok=True)
        for page in ML_PAGES:
            path = f"{ML_COMMIT}:docs/{lang}/docs/tutorial/{page}.md"
            blob = subprocess.run(["git", "-C", git_dir, "show", path], check=True, capture_output=True)
            (dest / lang / f"{page.replace('/', '__')}.md").write_bytes(blob.stdout)
    if tmp:
        shutil.rmtree(tmp, ignore_errors=True)
    for lang in ML_LANGS:  # every span checked
        materialize(f"ml-{lang}", Path(tempfile.mkdtemp(prefix="chunkyard-check-")))
    print(f"{len(ML_PAGES)} pages x {len(ML_LANGS)} languages in {dest}; export CHUNKYARD_MULTILINGUAL_DIR={dest}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fetch-contracts", help="Write the contracts' documents (pinned commits) to DEST.")
    f.add_argument("dest", type=Path)
    f.add_argument("--git-dir", action="append", default=[], metavar="OWNER/NAME=PATH",
                   help="An existing clone (bare or not) of a source repository instead of cloning it.")  # fmt: skip
    m = sub.add_parser("fetch-multilingual", help="Write the multilingual set's pages (pinned commit) to DEST.")
    m.add_argument("dest", type=Path)
    m.add_argument("--git-dir", metavar="PATH", help="An existing clone (bare or not) of fastapi/fastapi.")
    a = ap.parse_args()
    if a.cmd == "fetch-multilingual":
        os.environ["CHUNKYARD_MULTILINGUAL_DIR"] = str(a.dest.resolve())
        fetch_multilingual(a.dest, a.git_dir)
        return
    git_dirs = dict(x.split("=", 1) for x in a.git_dir)
    os.environ["CHUNKYARD_CONTRACTS_DIR"] = str(a.dest.resolve())
    fetch_contracts(a.dest, git_dirs)


if __name__ == "__main__":
    main()
