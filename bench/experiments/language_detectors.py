"""Language detectors side by side on the multilingual dev set's pages and paragraphs (docs/languages.md).

    CHUNKYARD_MULTILINGUAL_DIR=/tmp/mlpages python -m bench.experiments.language_detectors

Pages and their prose paragraphs of at least 80 characters (code, URLs and tags taken out by
`pipeline.language.prose`, as the pipeline does), each labelled with its folder's language; accuracy,
throughput and model load time of pycld2 (what the pipeline uses), py3langid and lingua (the bench extra).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import shared_data
from pipeline.language import _code, prose

LANGS = ("en", "de", "es", "ru", "zh")


def samples(root: Path) -> dict[str, list[tuple[str, str]]]:
    pages = [(lang, prose(p.read_text(encoding="utf-8"))) for lang in LANGS for p in sorted((root / lang).rglob("*.md"))]
    paras = [
        (lang, para)
        for lang, text in pages
        for para in text.split("\n\n")
        if len(para.strip()) >= 80 and not para.lstrip().startswith(("#", "|", "!!!", "{*"))
    ]
    return {"pages": pages, "paragraphs": paras}


def detectors() -> list[tuple[str, Callable[[str], str], float]]:
    import pycld2

    def cld2(text: str) -> str:
        try:
            return _code(pycld2.detect(text, bestEffort=True)[2][0][1])
        except pycld2.error:
            return "?"

    t0 = time.perf_counter()
    import py3langid.langid as langid

    ident = langid._get_identifier()
    langid_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    from lingua import LanguageDetectorBuilder

    lingua = LanguageDetectorBuilder.from_all_languages().build()
    lingua_load = time.perf_counter() - t0

    def by_lingua(text: str) -> str:
        found = lingua.detect_language_of(text)
        return found.iso_code_639_1.name.lower() if found else "?"

    return [("pycld2", cld2, 0.0), ("py3langid", lambda t: ident.classify(t)[0], langid_load),
            ("lingua", by_lingua, lingua_load)]  # fmt: skip


def main() -> None:
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    root = shared_data("multilingual", "CHUNKYARD_MULTILINGUAL_DIR")
    if not (root / "en").is_dir():
        sys.exit(f"no pages in {root}: python -m bench.devsets fetch-multilingual DEST, then CHUNKYARD_MULTILINGUAL_DIR=DEST")
    sets = samples(root)
    print("| detector | set | n | right | MB/s | model load (s) |\n| --- | --- | ---: | ---: | ---: | ---: |")
    for name, fn, load in detectors():
        for label, data in sets.items():
            t0 = time.perf_counter()
            right = sum(fn(text) == lang for lang, text in data)
            mb = sum(len(text.encode()) for _, text in data) / 1e6
            print(f"| {name} | {label} | {len(data)} | {100 * right / len(data):.1f}% | "
                  f"{mb / (time.perf_counter() - t0):.2f} | {load:.1f} |")  # fmt: skip


if __name__ == "__main__":
    main()
