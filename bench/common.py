"""What the bench scripts share: the repository root, data folders kept outside it, results, corpora, timing."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from pipeline.model import Document

ROOT = Path(__file__).resolve().parents[1]

#: Where scripts write what they measure (ignored by git): tables, JSON, plots, caches.
RESULTS = ROOT / "bench" / "results"

T = TypeVar("T")

#: Chroma's chunking-benchmark corpora, each `corpora/<name>.md` under `chroma_dir()`.
CORPORA = ("chatlogs", "finance", "pubmed", "state_of_the_union", "wikitexts")


def shared_data(folder: str, env: str | None = None) -> Path:
    """A data folder never copied into the repository: $env when set, else ../shared/bench/<folder>."""
    value = os.environ.get(env) if env else None
    return Path(value) if value else ROOT.parent / "shared" / "bench" / folder


def chroma_dir() -> Path:
    """Chroma's benchmark data (corpora, questions, PUBLISHED.md): $CHUNKYARD_CHROMA_DIR or ../shared."""
    return shared_data("chroma", "CHUNKYARD_CHROMA_DIR")


def result_path(name: str | Path) -> Path:
    """A file under bench/results/ (made on first use); an absolute path is kept as given."""
    path = RESULTS / name
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def load_corpus(path: Path, section_tokens: int) -> Document:
    """A corpus normalized as the pipeline would (a .md file: markdown), sections included."""
    from pipeline.normalize import normalize  # here: the scripts without corpora skip the parsers
    from pipeline.sources import SourceFile, detect, source_uri

    kind = detect(path)
    assert kind is not None, path
    src = SourceFile(path, source_uri(path), kind[0], kind[1])
    return normalize(src, path.read_bytes(), section_tokens=section_tokens)


def timed(make: Callable[[], Callable[[], T]], repeats: int) -> tuple[float, float, T]:
    """Median CPU and wall seconds of `repeats` runs (each from a fresh `make()`), and the last result."""
    cpu: list[float] = []
    wall: list[float] = []
    out = None
    for _ in range(repeats):
        run = make()
        c0, t0 = time.process_time(), time.perf_counter()
        out = run()
        cpu.append(time.process_time() - c0)
        wall.append(time.perf_counter() - t0)
    return statistics.median(cpu), statistics.median(wall), out  # type: ignore[return-value]


def table(headers: list[str], rows: list[list[str]]) -> str:
    """A markdown table, columns padded, cells right-aligned."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(headers)]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join([line, sep, *body])
