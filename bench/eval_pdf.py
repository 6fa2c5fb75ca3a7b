"""Retrieval on PDFs vs the same text as markdown: Chroma's corpora rendered to PDF, scored by `chunkyard eval`.

    python -m bench.eval_pdf                                   # 4 corpora, vector + hybrid search
    python -m bench.eval_pdf --corpus state_of_the_union --search vector

Each corpus is rendered to an A4 PDF with fpdf2 (the `bench` extra; DejaVu Sans from matplotlib, 10 pt,
a page number in every footer) and read back by the pipeline. Question excerpts point into the markdown
file, so they are located in the PDF's normalized text: the excerpt and the text are compared with all
whitespace removed (line wrapping, paragraph joins and removed hyphens change only whitespace), and the
occurrence nearest the excerpt's relative position wins. Questions with an excerpt that cannot be found
(a glyph the font lacks, e.g. Japanese in wikitexts) are dropped from BOTH sides, so markdown and PDF are
scored on the same questions. The PDF side's "corpus" is its normalized text, so its offsets are identity.

Also prints pages/s for reading the PDFs (text layer; no OCR). Run from the repository root; set
CHUNKYARD_DATA_DIR to keep the embedded Postgres out of the way.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from pathlib import Path

from bench.common import chroma_dir
from pipeline import evaluate as ev
from pipeline.config import Settings

CORPORA = ("state_of_the_union", "wikitexts", "chatlogs", "pubmed")


def render_pdf(text: str, dest: Path) -> int:
    """The text as an A4 PDF, line by line (blank lines as gaps), page numbers in the footer; returns pages."""
    import matplotlib
    from fpdf import FPDF

    class Paged(FPDF):
        def footer(self) -> None:
            self.set_y(-15)
            self.set_font("DejaVu", size=8)
            self.cell(0, 10, str(self.page_no()), align="C")

    pdf = Paged(format="A4")
    pdf.add_font("DejaVu", fname=str(Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"))
    pdf.set_font("DejaVu", size=10)
    pdf.set_auto_page_break(True, margin=20)
    pdf.add_page()
    for line in text.split("\n"):
        if line.strip():
            pdf.multi_cell(0, 5, line, new_x="LMARGIN", new_y="NEXT")
        else:
            pdf.ln(4)
    pdf.output(str(dest))
    return pdf.page_no()


class Locator:
    """Finds excerpt text in a normalized text with whitespace ignored, mapping back to real offsets."""

    def __init__(self, text: str) -> None:
        self.pos = [i for i, c in enumerate(text) if not c.isspace()]
        self.squeezed = "".join(text[i] for i in self.pos)

    def find(self, excerpt: str, near: float) -> tuple[int, int] | None:
        """The occurrence closest to relative position `near` (0-1), as a span of the real text."""
        key = re.sub(r"\s+", "", excerpt)
        if not key:
            return None
        hits = [m.start() for m in re.finditer(re.escape(key), self.squeezed)]
        if not hits:
            return None
        target = near * len(self.squeezed)
        k = min(hits, key=lambda h: abs(h - target))
        return self.pos[k], self.pos[k + len(key) - 1] + 1


def remap(questions: list, md: dict, pdf_text: dict[str, str]) -> tuple[list, list, dict[str, int]]:
    """(markdown questions, PDF questions, dropped per corpus): only questions found on both sides."""
    locators = {cid: Locator(t) for cid, t in pdf_text.items()}
    keep_md, keep_pdf, dropped = [], [], dict.fromkeys(pdf_text, 0)
    for q in questions:
        if q.corpus_id not in pdf_text:
            continue
        raw = md[q.corpus_id].text
        spans = [locators[q.corpus_id].find(raw[s:e], s / len(raw)) for s, e in q.excerpts]
        if any(sp is None for sp in spans):
            dropped[q.corpus_id] += 1
            continue
        merged: list[tuple[int, int]] = []
        for a, b in sorted(spans):  # excerpts disjoint in markdown stay disjoint; merge any that touch
            if merged and a < merged[-1][1]:
                merged[-1] = (merged[-1][0], max(b, merged[-1][1]))
            else:
                merged.append((a, b))
        keep_md.append(q)
        keep_pdf.append(ev.Question(q.row, q.text, q.corpus_id, tuple(merged)))
    return keep_md, keep_pdf, dropped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", action="append", help=f"Corpus ids (default: {', '.join(CORPORA)}).")
    ap.add_argument("--search", action="append", choices=["vector", "hybrid", "fulltext", "rrf"])
    ap.add_argument("-k", type=int, default=5)
    a = ap.parse_args()
    modes = tuple(a.search or ["vector", "hybrid"])
    data = chroma_dir()
    settings = Settings()
    md_all = ev.load_corpora(data / "corpora")
    wanted = a.corpus or list(CORPORA)
    md = {cid: md_all[cid] for cid in wanted}
    questions = ev.load_questions(data / "questions_df.csv", md_all)
    from pipeline.normalize import normalize
    from pipeline.sources import SourceFile, source_uri

    with tempfile.TemporaryDirectory(prefix="chunkyard-pdf-eval-") as tmp:
        pdf_corpora: dict[str, ev.Corpus] = {}
        pages_total, read_s = 0, 0.0
        for cid, c in md.items():
            dest = Path(tmp) / f"{cid}.pdf"
            t0 = time.perf_counter()
            n = render_pdf(c.text, dest)
            t1 = time.perf_counter()
            doc = normalize(SourceFile(dest, source_uri(dest), "pdf"), dest.read_bytes())
            t2 = time.perf_counter()
            pages_total += n
            read_s += t2 - t1
            print(f"{cid}: {n} pages, rendered in {t1 - t0:.1f}s, read in {t2 - t1:.1f}s", file=sys.stderr)
            pdf_corpora[cid] = ev.Corpus(cid, dest, doc.text)
        print(f"PDF text layer: {pages_total} pages in {read_s:.1f}s = {pages_total / read_s:.1f} pages/s")
        q_md, q_pdf, dropped = remap(questions, md, {k: v.text for k, v in pdf_corpora.items()})
        print(f"questions: {len(q_md)} kept, dropped (excerpt not found in the PDF text): {dropped}")
        qvecs = ev.embed_questions(q_md, settings)
        cfg = ev.parse_config("default")
        results = []
        for label, corpora, qs in (("markdown", md, q_md), ("pdf", pdf_corpora, q_pdf)):
            results += ev.evaluate_index(
                label, ev.pipeline_indexer(cfg, corpora, settings), corpora, qs, qvecs,
                settings=settings, k=a.k, modes=modes,
            )  # fmt: skip
    print(table(results, list(md)))


def table(results: list[dict], corpora: list[str]) -> str:
    """Recall and IoU, markdown vs PDF, per corpus and overall, per search mode."""
    lines = [
        "| Search | Corpus | Questions | Recall md | Recall pdf | Δ | IoU md | IoU pdf | Δ |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    by = {(r["label"], r["mode"]): r for r in results}
    for mode in dict.fromkeys(r["mode"] for r in results):
        m, p = by[("markdown", mode)], by[("pdf", mode)]
        for cid in [*corpora, "all"]:
            sm = m["summary"] if cid == "all" else m["per_corpus"].get(cid)
            sp = p["summary"] if cid == "all" else p["per_corpus"].get(cid)
            if not sm or not sp:
                continue
            rm, rp = sm["recall"]["mean"], sp["recall"]["mean"]
            im, ip = sm["iou"]["mean"], sp["iou"]["mean"]
            lines.append(
                f"| {mode} | {cid} | {sm['questions']} | {rm:.1f} | {rp:.1f} | {rp - rm:+.1f} | "
                f"{im:.1f} | {ip:.1f} | {ip - im:+.1f} |"
            )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
