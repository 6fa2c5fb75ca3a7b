"""OCR of image-only PDF pages with RapidOCR (the optional `ocr` extra: PP-OCR ONNX models in the wheel)."""

from __future__ import annotations

import importlib.util
import logging
import threading
from functools import lru_cache
from typing import Any

from pipeline.parse.pdf_layout import Seg

#: Render scale for OCR (1.0 = 72 dpi): 144 dpi makes 9-point print ~18 px high, enough for PP-OCR, whose
#: detection time grows with the pixels (2.5 took 2.7x as long on a letter page for the same text).
SCALE = 2.0
_LOCK = threading.Lock()


def available() -> bool:
    """Whether the `ocr` extra is installed (rapidocr and its ONNX runtime)."""
    return all(importlib.util.find_spec(m) is not None for m in ("rapidocr", "onnxruntime"))


@lru_cache(maxsize=1)
def engine() -> Any:
    """One RapidOCR engine per process: loading its three models takes a few seconds."""
    from rapidocr import RapidOCR

    engine = RapidOCR()
    for name in ("RapidOCR", "rapidocr"):  # it logs every model path at INFO
        logging.getLogger(name).setLevel(logging.WARNING)
    return engine


def ocr_page(page: Any, height: float) -> tuple[list[Seg], float]:
    """Text runs of a rendered page (PDF points, y up) and the mean confidence per character (0-1)."""
    image = page.render(scale=SCALE).to_numpy()
    if image.ndim == 3 and image.shape[2] == 4:
        image = image[:, :, :3]
    with _LOCK:
        ocr = engine()
    result = ocr(image)
    boxes = result.boxes if result.boxes is not None else []
    segs: list[Seg] = []
    weighted = chars = 0.0
    for box, text, score in zip(boxes, result.txts or (), result.scores or (), strict=False):
        text = str(text).strip()
        if not text:
            continue
        xs, ys = [float(p[0]) / SCALE for p in box], [float(p[1]) / SCALE for p in box]
        top, bottom = height - min(ys), height - max(ys)
        segs.append(Seg(min(xs), bottom, max(xs), top, text, top - bottom))
        weighted += float(score) * len(text)
        chars += len(text)
    return segs, (weighted / chars if chars else 0.0)
