"""What an evaluation leaves behind: the JSON document, the markdown tables people compare, the plot."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline.config import Settings
from pipeline.errors import ConfigError
from pipeline.evaluate.data import Corpus, Question
from pipeline.evaluate.metrics import METRICS


def report(
    results: list[dict],
    *,
    corpora: dict[str, Corpus],
    questions: Sequence[Question],
    k: int,
    settings: Settings,
    budgets: Sequence[int] = (),
) -> dict:
    """The JSON document: run metadata and every result."""
    return {
        "meta": {
            "k": k,
            "budgets": list(budgets),
            "model": settings.model,
            "questions": len(questions),
            "corpora": {c.id: len(c.text) for c in corpora.values()},
            "metrics": "Chroma span metrics (x100, mean and population std); hit rate %; MRR 0-1",
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        },
        "results": results,
    }


def brief(r: dict) -> str:
    """One line of a configuration's result, for progress messages."""
    s = r["summary"]
    return f"{r['mode']} recall {s['recall']['mean']:.1f} IoU {s['iou']['mean']:.1f}"


def markdown_table(results: Sequence[dict]) -> str:
    """One row per configuration and search mode: the figures people compare."""
    head = (
        "| Configuration | Search | Chunks | Mean tokens | Recall | Precision | Precision_Ω | IoU | Hit rate | MRR |\n"
        "| --- | --- | ---: | ---: | --- | --- | --- | --- | ---: | ---: |"
    )
    lines = [head]
    for r in results:
        s, ch = r["summary"], r["chunks"]
        cells = [f"{s[m]['mean']:.1f} ± {s[m]['std']:.1f}" for m in METRICS]
        lines.append(
            f"| {r['label']} | {r['mode']} | {ch['count']} | {ch['mean_cl100k']:.0f} | "
            + " | ".join(cells)
            + f" | {s['hit_rate']:.1f} | {s['mrr']:.3f} |"
        )
    return "\n".join(lines)


def per_corpus_table(results: Sequence[dict]) -> str:
    """Recall / IoU per corpus, one row per configuration and mode."""
    corpora = sorted({c for r in results for c in r["per_corpus"]})
    lines = [
        "| Configuration | Search | " + " | ".join(f"{c} R / IoU" for c in corpora) + " |",
        "| --- | --- |" + " --- |" * len(corpora),
    ]
    for r in results:
        cells = []
        for c in corpora:
            s = r["per_corpus"].get(c)
            cells.append(f"{s['recall']['mean']:.1f} / {s['iou']['mean']:.1f}" if s else "-")
        lines.append(f"| {r['label']} | {r['mode']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _budgets(results: Sequence[dict]) -> list[str]:
    """The budgets the results were scored at, smallest first."""
    return sorted({b for r in results for b in r.get("budgets", {})}, key=int)


def budget_table(results: Sequence[dict]) -> str:
    """Recall / precision / IoU at each token budget beside fixed k, one row per configuration and mode."""
    budgets = _budgets(results)
    k = results[0]["k"] if results else "k"
    lines = [
        f"| Configuration | Search | k={k} R / P / IoU | "
        + " | ".join(f"{b} tokens R / P / IoU" for b in budgets)
        + " |",
        "| --- | --- | --- |" + " --- |" * len(budgets),
    ]
    for r in results:
        cells = [_rpi(r["summary"])]
        for b in budgets:
            got = r.get("budgets", {}).get(b)
            cells.append(_rpi(got["summary"]) if got else "-")
        lines.append(f"| {r['label']} | {r['mode']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def budget_per_corpus_table(results: Sequence[dict]) -> str:
    """Recall at each budget (and at k) per corpus: a change that lifts one corpus by sinking another shows."""
    budgets = _budgets(results)
    k = results[0]["k"] if results else "k"
    lines = [
        f"| Configuration | Search | Corpus | k={k} | " + " | ".join(budgets) + " |",
        "| --- | --- | --- | ---: |" + " ---: |" * len(budgets),
    ]
    for r in results:
        for c in sorted(r["per_corpus"]):
            cells = [f"{r['per_corpus'][c]['recall']['mean']:.1f}"]
            for b in budgets:
                got = r.get("budgets", {}).get(b, {}).get("per_corpus", {}).get(c)
                cells.append(f"{got['recall']['mean']:.1f}" if got else "-")
            lines.append(f"| {r['label']} | {r['mode']} | {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _save(fig, path: Path | str) -> Path:  # noqa: ANN001 - a matplotlib Figure
    """Write a figure as PNG (its folder made if missing) and free it."""
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(out, dpi=130)
    plt.close(fig)
    return out


def _rpi(s: dict) -> str:
    return f"{s['recall']['mean']:.1f} / {s['precision']['mean']:.1f} / {s['iou']['mean']:.1f}"


def budget_plot(results: Sequence[dict], path: Path | str, *, title: str = "") -> Path:
    """Recall against the token budget, one line per configuration (the first one bold), one panel per mode."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("the plot needs matplotlib: pip install 'chunkyard[eval]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    modes = list(dict.fromkeys(r["mode"] for r in results if r.get("budgets")))
    fig, axes = plt.subplots(1, len(modes), figsize=(6.5 * len(modes), 5.5), sharey=True, squeeze=False)
    for ax, mode in zip(axes[0], modes, strict=True):
        for r in results:
            if r["mode"] != mode or not r.get("budgets"):
                continue
            bs = sorted(r["budgets"], key=int)
            ax.plot([int(b) for b in bs], [r["budgets"][b]["summary"]["recall"]["mean"] for b in bs],
                    marker="o", label=r["label"], linewidth=2.5 if r["label"] == results[0]["label"] else 1.2)  # fmt: skip
        ax.set_xscale("log", base=2)
        ticks = [int(b) for b in _budgets(results)]
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_xlabel("context budget (cl100k tokens)")
        ax.set_title(f"{mode} search")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel("Recall (x100, mean over questions)")
    if title:
        fig.suptitle(title)
    return _save(fig, path)


def plot(
    results: Sequence[dict], path: Path | str, *, reference: Sequence[dict] = (), title: str = ""
) -> Path:
    """Recall against IoU, one labelled point per configuration (and published points, hollow)."""
    try:
        import matplotlib
    except ImportError as exc:
        raise ConfigError("the plot needs matplotlib: pip install 'chunkyard[eval]'") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 6.5))
    for r in results:
        s = r["summary"]
        x, y = s["iou"]["mean"], s["recall"]["mean"]
        ax.scatter([x], [y], marker="o" if r["mode"] == "vector" else "^", s=40)
        ax.annotate(f"{r['label']}" + ("" if r["mode"] == "vector" else f" ({r['mode']})"), (x, y), fontsize=7,
                    xytext=(4, 3), textcoords="offset points")  # fmt: skip
    for p in reference:
        ax.scatter([p["iou"]], [p["recall"]], facecolors="none", edgecolors="grey", s=40)
        ax.annotate(p["label"], (p["iou"], p["recall"]), fontsize=6, color="grey", xytext=(4, -8),
                    textcoords="offset points")  # fmt: skip
    ax.set_xlabel("IoU (x100, mean over questions)")
    ax.set_ylabel("Recall (x100, mean over questions)")
    ax.set_title(title or f"Recall vs IoU, k = {results[0]['k'] if results else '?'}")
    ax.grid(alpha=0.3)
    return _save(fig, path)


def write_outputs(
    doc: dict, prefix: Path | str, *, reference: Sequence[dict] = ()
) -> tuple[Path, Path | None]:
    """`prefix`.json with every figure and `prefix`.png with the plot (None without matplotlib).

    Results scored at token budgets also get `prefix`-budget.png (recall against budget).
    """
    prefix = Path(prefix)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    js = prefix.with_name(prefix.name + ".json")
    js.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    try:
        png = plot(doc["results"], prefix.with_name(prefix.name + ".png"), reference=reference)
        if any(r.get("budgets") for r in doc["results"]):
            budget_plot(doc["results"], prefix.with_name(prefix.name + "-budget.png"))
    except ConfigError:  # the figures are written; only the picture needs the optional dependency
        png = None
    return js, png
