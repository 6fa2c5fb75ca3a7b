"""Export a sentence-transformers model once, offline, from its local weights: OpenVINO int8 or ONNX.

OpenVINO's converter and NNCF's post-training quantisation are called directly (not through optimum-intel,
whose releases pin transformers < 5.6). The graph takes `input_ids` and `attention_mask` and returns the
pooled, normalized sentence vector, so the run-time side (`runtime`) needs neither torch nor
transformers. Calibration uses prose that ships with Python (the language reference in `pydoc_data`), never
a benchmark's questions.

Where exports are kept, and how they are made once: `export_cache`.
"""

from __future__ import annotations

import json
import logging
import os
import re
import warnings
from pathlib import Path

from pipeline.embed.meta import model_path, sentence_modules

#: Calibration passages for NNCF: a few hundred, long paragraphs and short sentences (queries are short).
CALIBRATION_SIZE = 300


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
    from pipeline.embed.inputs import load_tokenizer, pad

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


def export(model: str, backend: str, dest: str | Path) -> None:
    """Export a model for a backend into `dest` (what `export_cache.ensure_exported` runs in a child)."""
    (export_openvino if backend == "openvino" else export_onnx)(model, Path(dest))
