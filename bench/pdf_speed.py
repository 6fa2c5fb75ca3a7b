"""Pages per second reading PDFs: the text layer (../shared/bench/pdf) and OCR of generated scanned pages.

    python -m bench.pdf_speed                # text PDFs, then 4 scanned pages if the ocr extra is installed
    python -m bench.pdf_speed --scans 10

The parse alone (pipeline.parse), best of --repeat runs; OCR's one-off model load is timed separately.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from bench.common import shared_data
from pipeline.parse import parse, pdf_ocr

LINES = [
    "Invoice 2024-117 for services rendered in March.",
    "Payment is due within thirty days of the invoice date.",
    "Late payments incur a fee of two percent per month.",
    "Questions about this invoice go to accounts@example.com.",
] * 6


def best(data: bytes, repeat: int) -> float:
    """The fastest of `repeat` parses, in seconds."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        parse("pdf", data, filename="bench.pdf")
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--folder", type=Path, default=shared_data("pdf"))
    ap.add_argument("--scans", type=int, default=4, help="Scanned pages to OCR (0: skip).")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    import pypdfium2 as pdfium

    pages = seconds = 0.0
    print("| file | pages | seconds | pages/s |\n| --- | ---: | ---: | ---: |")
    for path in sorted(a.folder.rglob("*.pdf")):
        data = path.read_bytes()
        try:
            n = len(pdfium.PdfDocument(data))
            s = best(data, a.repeat)
        except Exception as exc:  # the encrypted sample, without its password
            print(f"| {path.name} | - | - | {type(exc).__name__} |")
            continue
        pages, seconds = pages + n, seconds + s
        print(f"| {path.name} | {n} | {s:.3f} | {n / s:.1f} |")
    if seconds:
        print(f"| **text layer, all** | {pages:.0f} | {seconds:.2f} | **{pages / seconds:.1f}** |")
    if a.scans and pdf_ocr.available():
        from tests.make_files import scanned_pdf

        t0 = time.perf_counter()
        pdf_ocr.engine()
        load = time.perf_counter() - t0
        data = scanned_pdf([LINES] * a.scans)
        s = best(data, 1)
        print(f"| **OCR** ({a.scans} scanned pages, {len(LINES)} lines each) | {a.scans} | {s:.2f} | "
              f"**{a.scans / s:.2f}** |")  # fmt: skip
        print(f"\nOCR model load (once per process): {load:.1f}s")


if __name__ == "__main__":
    main()
