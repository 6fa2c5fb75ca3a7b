"""Export a sentence-transformers model once, offline, from its local weights: OpenVINO int8 or ONNX.

OpenVINO's converter and NNCF's post-training quantisation are called directly (not through optimum-intel,
whose releases pin transformers < 5.6). The graph takes `input_ids` and `attention_mask` and returns the
pooled, normalized sentence vector, so the run-time side (`embed_runtime`) needs neither torch nor
transformers. Calibration uses prose that ships with Python (the language reference in `pydoc_data`), never
a benchmark's questions.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import tempfile
import warnings
from pathlib import Path

from pipeline.config import BACKEND_TAGS
from pipeline.tokens import model_path, sentence_modules

log = logging.getLogger(__name__)

#: Calibration passages for NNCF: a few hundred, long paragraphs and short sentences (queries are short).
CALIBRATION_SIZE = 300

#: Bump when the exported graph changes: an older export is redone, never loaded.
EXPORT_VERSION = 1


def pooling(model: str) -> tuple[str, bool]:
    """(mean | cls, normalize) from the model's sentence-transformers files; other poolings are refused."""
    modules = sentence_modules(model)
    kinds = [kind for kind, _ in modules]
    other = [k for k in kinds if k not in ("Transformer", "Pooling", "Normalize")]
    if other:  # a Dense layer, say: the exported graph would leave it out and make other vectors
        raise NotImplementedError(
            f"{model}: its {', '.join(other)} module cannot be exported; use the torch backend"
        )
    normalize = "Normalize" in kinds
    cfg = next((c for kind, c in modules if kind == "Pooling"), None)
    if cfg is None:  # no pooling module listed: the conventional folder
        cfg_file = Path(model_path(model)) / "1_Pooling" / "config.json"
        cfg = json.loads(cfg_file.read_text()) if cfg_file.exists() else {}
    cfg = cfg or {"pooling_mode_mean_tokens": True}  # no pooling config: mean, as sentence-transformers does
    mode = cfg.get("pooling_mode")  # newer sentence-transformers write one string
    if cfg.get("pooling_mode_mean_tokens") or mode == "mean":
        return "mean", normalize
    if cfg.get("pooling_mode_cls_token") or mode == "cls":
        return "cls", normalize
    raise NotImplementedError(f"{model}: only mean or CLS pooling can be exported; use the torch backend")


def exportable(model: str) -> bool:
    """Whether `pooling` accepts the model: the exported graph would make the same vectors as torch."""
    try:
        pooling(model)
    except (NotImplementedError, OSError, ValueError):
        return False
    return True


def calibration_texts(n: int = CALIBRATION_SIZE) -> list[str]:
    """Real English prose shipped with Python: paragraphs of the language reference, some first sentences."""
    import pydoc_data.topics as topics

    paras = [
        " ".join(p.split())
        for _, text in sorted(topics.topics.items())
        for p in re.split(r"\n\s*\n", text)
        if len(p.split()) >= 8 and not p.lstrip().startswith(("::=", ">>>"))
    ]
    long_n = n * 4 // 5
    step = max(1, len(paras) // long_n)
    picked = paras[::step][:long_n]
    short = [re.split(r"(?<=[.?!])\s", p, maxsplit=1)[0] for p in paras[step // 2 :: step]]
    return picked + short[: n - len(picked)]


def source_stamp(model: str) -> str:
    """What identifies the local weights an export was made from (names, sizes, config)."""
    root = Path(model_path(model))
    files = sorted(p for p in root.glob("*") if p.suffix in (".safetensors", ".bin", ".json") and p.is_file())
    return ";".join(f"{p.name}:{p.stat().st_size}" for p in files)


def export_dir(model: str, backend: str, cache_dir: Path) -> Path:
    """The folder an export lives in: one per model and backend (the tag names the quantisation)."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "--", model.strip("/"))[-120:]
    return cache_dir / slug / BACKEND_TAGS[backend]


def is_current(folder: Path, model: str) -> bool:
    """Whether a finished export of these weights, by this exporter version, is in the folder."""
    meta = folder / "meta.json"
    if not meta.exists():
        return False
    m = json.loads(meta.read_text())
    return m.get("version") == EXPORT_VERSION and m.get("source") == source_stamp(model)


def ensure_exported(model: str, backend: str, cache_dir: Path) -> Path:
    """The export's folder, exporting first if needed (one process at a time; others wait and reuse it)."""
    from filelock import FileLock

    folder = export_dir(model, backend, cache_dir)
    if is_current(folder, model):
        return folder
    from pipeline.embed import require_export_modules

    require_export_modules(model, backend, cache_dir=cache_dir)  # one line, not the export subprocess's traceback
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        if is_current(folder, model):
            return folder
        log.warning("exporting %s for the %s backend once, into %s (about a minute)", model, backend, folder)
        tmp = Path(tempfile.mkdtemp(prefix=".export-", dir=folder.parent))
        tmp.chmod(0o755)
        try:
            _export_in_subprocess(model, backend, tmp)
            meta = {"model": model, "backend": backend, "tag": BACKEND_TAGS[backend]}
            meta |= {"version": EXPORT_VERSION, "source": source_stamp(model)}
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            if folder.exists():
                shutil.rmtree(folder)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def _export_in_subprocess(model: str, backend: str, dest: Path) -> None:
    """Export in a child process: torch and NNCF never share a process with the model that then runs
    (a compiled OpenVINO model destroyed in a process that had run them hung in its stream threads' join)."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "pipeline.embed_export", model, backend, str(dest)]
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"exporting {model} for {backend} failed (exit {proc.returncode}); see above")


def _pooled_module(model: str):
    """The transformer with pooling (and normalization) inside: one graph from token ids to the vector."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    import transformers
    from transformers import AutoModel

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()

    mode, normalize = pooling(model)

    class Pooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = AutoModel.from_pretrained(model_path(model))

        def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
            if mode == "cls":
                v = h[:, 0]
            else:
                m = attention_mask.unsqueeze(-1).to(h.dtype)
                v = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(v, dim=-1) if normalize else v

    return Pooled().eval()


def _example(model: str, texts: list[str]) -> dict:
    """Token ids and attention mask for texts, as the run-time tokenizer makes them."""
    from pipeline.embed_runtime import load_tokenizer, pad

    ids, mask = pad(load_tokenizer(model).encode_batch(texts))
    return {"input_ids": ids, "attention_mask": mask}


def export_openvino(model: str, dest: Path) -> None:
    """Convert to OpenVINO and quantise to int8 with NNCF (post-training, calibrated on real prose)."""
    import nncf
    import openvino as ov
    import torch

    nncf.set_log_level(logging.ERROR)
    module = _pooled_module(model)
    example = {k: torch.from_numpy(v) for k, v in _example(model, ["an example", "a second one"]).items()}
    dyn = [(name, ov.PartialShape([-1, -1]), ov.Type.i64) for name in ("input_ids", "attention_mask")]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tracer warnings about shapes: the graph is checked by the tests
        fp32 = ov.convert_model(module, example_input=example, input=dyn)
    data = [_example(model, [t]) for t in calibration_texts()]
    int8 = nncf.quantize(
        fp32, nncf.Dataset(data), model_type=nncf.ModelType.TRANSFORMER, subset_size=len(data)
    )
    ov.save_model(int8, dest / "model.xml")


def export_onnx(model: str, dest: Path) -> None:
    """Export to ONNX (fp32: ONNX Runtime's dynamic int8 measured too lossy, cosine 0.93 to torch)."""
    import torch

    module = _pooled_module(model)
    ex = _example(model, ["an example", "a second one"])
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            module,
            (torch.from_numpy(ex["input_ids"]), torch.from_numpy(ex["attention_mask"])),
            str(dest / "model.onnx"),
            input_names=["input_ids", "attention_mask"],
            output_names=["embedding"],
            dynamic_axes=axes,
            opset_version=17,
            dynamo=False,
        )


if __name__ == "__main__":  # python -m pipeline.embed_export MODEL BACKEND DEST (what ensure_exported runs)
    import sys

    _model, _backend, _dest = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    (export_openvino if _backend == "openvino" else export_onnx)(_model, _dest)
