"""Chroma's chunking benchmark through `chunkyard eval`: reproduce the published MiniLM rows, try profiles.

    python -m bench.eval_chroma published              # the 6 reproducible MiniLM rows vs PUBLISHED.md
    python -m bench.eval_chroma target                 # the default profile: vector, hybrid and rrf search
    python -m bench.eval_chroma specs -s 'recursive:size=128,label=r128' -s default:as=text
    python -m bench.eval_chroma target --budget 256,512,1024,2048     # also at budgets of cl100k tokens

The data stays in ../shared/bench/chroma (or $CHUNKYARD_CHROMA_DIR); results go to bench/results/.
Run from the repository root; set CHUNKYARD_DATA_DIR to keep the embedded Postgres out of the way.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

from bench.common import chroma_dir, result_path
from pipeline import evaluate as ev
from pipeline.config import Settings

#: One section per corpus, as Chroma chunked whole corpora (the pipeline's default cuts at 1024 cl100k).
WHOLE = 10**8
#: Chroma embedded the bare chunk text, each corpus as plain text; its long chunks were truncated by the model.
REPRO = f"context=false,as=text,section_tokens={WHOLE},truncate=true"

PUBLISHED_CONFIGS = {
    "Recursive 250/125": f"recursive:size=250,overlap=125,separators=chroma,{REPRO}",
    "TokenText 250/125": f"fixed:size=250,overlap=125,{REPRO}",
    "Recursive 250/0": f"recursive:size=250,overlap=0,separators=chroma,{REPRO}",
    "TokenText 250/0": f"fixed:size=250,overlap=0,{REPRO}",
    "Recursive 200/0": f"recursive:size=200,overlap=0,separators=chroma,{REPRO}",
    "TokenText 200/0": f"fixed:size=200,overlap=0,{REPRO}",
}

#: Budgets of context (cl100k tokens) the peer comparison reports beside k (`chunkyard eval --budget`).
BUDGETS = (256, 512, 1024, 2048)

#: The quality target's candidates, each one change away from its neighbour (see the report).
TARGET_CONFIGS = {
    "default (as text)": "default:as=text",
    "default (files as typed: markdown)": "default",
}


def published(data: Path) -> dict[str, dict]:
    """The MiniLM rows of PUBLISHED.md as {"Recursive 250/125": {"recall": 78.7, ...}}."""
    text = (data / "PUBLISHED.md").read_text(encoding="utf-8")
    block = text.split("## all-MiniLM-L6-v2", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in block.splitlines():
        cells = [c.strip().strip("*") for c in line.strip().strip("|").split("|")]
        if len(cells) != 7 or not re.match(r"\d", cells[1]):
            continue
        name = cells[0].split(" (")[0]
        size = cells[1].split()[0]
        vals = [float(c.split("±")[0].strip(" *")) for c in cells[3:]]
        out[f"{name} {size}/{cells[2]}"] = dict(
            zip(("recall", "precision", "precision_omega", "iou"), vals, strict=True)
        )
    return out


def comparison_table(results: list[dict], pub: dict[str, dict]) -> str:
    """Harness vs published, metric by metric, for rows whose label names a published configuration."""
    lines = [
        "| Configuration | Chunks | Mean cl100k | Over model limit | Recall (ours / pub / Δ) | Precision | Precision_Ω | IoU |",
        "| --- | ---: | ---: | ---: | --- | --- | --- | --- |",
    ]
    for r in results:
        p = pub.get(r["label"])
        if p is None or r["mode"] != "vector":
            continue
        s, ch = r["summary"], r["chunks"]
        cells = []
        for m in ev.METRICS:
            ours = s[m]["mean"]
            cells.append(f"{ours:.1f} / {p[m]:.1f} / {ours - p[m]:+.1f}")
        lines.append(
            f"| {r['label']} | {ch['count']} | {ch['mean_cl100k']:.0f} | {ch['over_model_limit']} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def reference_points(pub: dict[str, dict]) -> list[dict]:
    """Published rows as hollow points on the plot."""
    return [{"label": f"pub {k}", "recall": v["recall"], "iou": v["iou"]} for k, v in pub.items()]


def load_set(name: str) -> tuple[dict, list, dict[str, dict]]:
    """Corpora, questions and published rows of a question set: Chroma's, or one of bench/devsets.py."""
    if name == "chroma":
        data = chroma_dir()
        corpora = ev.load_corpora(data / "corpora")
        return corpora, ev.load_questions(data / "questions_df.csv", corpora), published(data)
    from bench.devsets import materialize

    folder, qfile = materialize(name)
    corpora = ev.load_corpora(folder)
    return corpora, ev.load_questions(qfile, corpora), {}


def add_set_option(ap: argparse.ArgumentParser) -> None:
    """`--set NAME`: Chroma's benchmark (default) or a question set written here (bench/devsets.py)."""
    from bench.devsets import NAMES

    ap.add_argument("--set", dest="qset", choices=["chroma", *NAMES], default="chroma",
                    help="Question set: Chroma's benchmark or a dev set of bench/devsets.py.")  # fmt: skip


def run(
    configs: dict[str, str],
    name: str,
    *,
    k: int,
    modes: tuple[str, ...],
    budgets: tuple[int, ...] = (),
    qset: str = "chroma",
) -> dict:
    """Evaluate configurations one after another, saving after each so a long run can be watched."""
    settings = Settings()
    corpora, questions, pub = load_set(qset)
    qvecs = ev.embed_questions(questions, settings)
    out = result_path(name)
    results: list[dict] = []
    for label, spec in configs.items():
        cfg = ev.parse_config(f"{spec},label={label}" if ":" in spec else f"{spec}:label={label}")
        t0 = time.perf_counter()
        results += ev.evaluate_index(
            cfg.label, ev.pipeline_indexer(cfg, corpora, settings), corpora, questions, qvecs,
            settings=settings, k=k, modes=modes, meta=ev.config_meta(cfg), budgets=budgets,
        )  # fmt: skip
        doc = ev.report(
            results, corpora=corpora, questions=questions, k=k, settings=settings, budgets=budgets
        )
        ev.write_outputs(doc, out, reference=reference_points(pub))
        print(f"{label}: {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    print_tables(results, out, pub)
    return doc


def print_tables(results: list[dict], out: Path, pub: dict[str, dict] | None = None) -> None:
    """The tables of a run (budget tables when it had budgets) and where its files are."""
    print(ev.markdown_table(results))
    print()
    print(ev.per_corpus_table(results))
    if pub and any(r["label"] in pub for r in results):
        print()
        print(comparison_table(results, pub))
    files = f"{out}.json  {out}.png"
    if any(r.get("budgets") for r in results):
        print()
        print(ev.budget_table(results))
        print()
        print(ev.budget_per_corpus_table(results))
        files += f"  {out}-budget.png"
    print(f"\n{files}")


def add_search_option(ap: argparse.ArgumentParser, default: str) -> None:
    """`--search MODE` (repeatable), one of the search modes `chunkyard eval` scores."""
    from pipeline.store import SEARCH_MODES

    ap.add_argument(
        "--search",
        action="append",
        choices=SEARCH_MODES,
        help=f"Search modes to score (repeatable; default: {default}).",
    )


def add_budget_option(ap: argparse.ArgumentParser, default: str) -> None:
    """`--budget N` (repeatable or a list): also score at N cl100k tokens of context."""

    def budgets(v: str) -> list[int]:
        try:
            out = [int(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{v!r}: expected numbers of tokens, e.g. 256,512") from None
        if any(b < 1 for b in out):
            raise argparse.ArgumentTypeError(f"{v!r}: budgets are positive")
        return out

    ap.add_argument("--budget", action="extend", type=budgets, help=f"Token budgets (default: {default}).")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("set", choices=["published", "target", "specs"])
    ap.add_argument("-s", "--spec", action="append", default=[], help="LABEL=SPEC or SPEC (repeatable)")
    ap.add_argument("--only", action="append", default=[], help="Run only these labels of the set.")
    ap.add_argument("--name", help="Results file name under bench/results/.")
    ap.add_argument("-k", type=int, default=5)
    add_search_option(ap, "vector for `published`, else vector, hybrid, rrf")
    add_budget_option(ap, "none")
    add_set_option(ap)
    a = ap.parse_args()
    if a.set == "published":
        configs = dict(PUBLISHED_CONFIGS)
    elif a.set == "target":
        configs = dict(TARGET_CONFIGS)
    else:
        configs = {}
    for s in a.spec:
        label, _, spec = s.partition("=") if re.match(r"^[^:=]+=[a-z]+(:|$)", s) else ("", "", s)
        configs[label or spec] = spec
    if a.only:
        configs = {k: v for k, v in configs.items() if k in a.only}
    if not configs:
        ap.error("nothing to evaluate")
    modes = tuple(a.search or (["vector"] if a.set == "published" else ["vector", "hybrid", "rrf"]))
    run(configs, a.name or a.set, k=a.k, modes=modes, budgets=tuple(sorted(set(a.budget or []))), qset=a.qset)


if __name__ == "__main__":
    main()
