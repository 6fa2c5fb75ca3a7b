"""Run an exported model (OpenVINO int8 or ONNX) with the `tokenizers` library: no torch, no transformers.

Loading it takes a fraction of a second, so `chunkyard search` embeds a question without importing torch.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from pipeline.embed.export_cache import ensure_exported
from pipeline.embed.inputs import load_tokenizer, pad
from pipeline.embed.keys import embedding_key
from pipeline.embed.meta import declared_dim

#: Runs batches of (ids, mask) and calls back (batch number, vectors) for each as it finishes.
Runner = Callable[[Sequence[tuple[np.ndarray, np.ndarray]], Callable[[int, np.ndarray], None]], None]


class ExportedEmbedder:
    """An exported model behind the torch one's `encode`: batches of similar length, unit vectors."""

    def __init__(self, name: str, model: str, run: Runner, *, dim: int, batch_size: int) -> None:
        self.name, self.dim, self.batch_size = name, dim, batch_size
        self._tokenizer = load_tokenizer(model)
        self._run = run

    def encode(self, texts: Sequence[str], *, progress: Callable[[int], None] | None = None) -> np.ndarray:
        """Unit-norm float32 embeddings; texts sorted by token count so each batch pads little."""
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        if not texts:
            return out
        enc = self._tokenizer.encode_batch(list(texts))
        order = sorted(range(len(texts)), key=lambda i: -len(enc[i].ids))
        groups = [order[k : k + self.batch_size] for k in range(0, len(order), self.batch_size)]
        window = 8  # batches handed to the runner at once: progress moves while a long list is embedded
        for w in range(0, len(groups), window):
            part = groups[w : w + window]

            def done(n: int, vecs: np.ndarray, part: list[list[int]] = part) -> None:
                out[part[n]] = vecs

            self._run([pad([enc[i] for i in idx]) for idx in part], done)
            if progress:
                progress(sum(len(idx) for idx in part))
        return out


def openvino_runner(folder: Path) -> Runner:
    """OpenVINO, throughput hint: one stream per core, batches in flight on all of them at once (1.6x one
    stream on both cores, measured on 2 cores); the compiled blob is cached next to the model."""
    import openvino as ov

    core = ov.Core()
    core.set_property({"CACHE_DIR": str(folder / "compiled")})
    # f32 for what int8 leaves: as fast here (measured), and the same vectors on CPUs with and without bf16
    config = {"PERFORMANCE_HINT": "THROUGHPUT", "INFERENCE_PRECISION_HINT": "f32"}
    compiled = core.compile_model(folder / "model.xml", "CPU", config)
    jobs = int(compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))

    def run(
        batches: Sequence[tuple[np.ndarray, np.ndarray]], done: Callable[[int, np.ndarray], None]
    ) -> None:
        if len(batches) == 1:  # a question: no queue to set up
            req = compiled.create_infer_request()
            req.infer({"input_ids": batches[0][0], "attention_mask": batches[0][1]})
            done(0, np.array(req.get_output_tensor(0).data, dtype=np.float32))
            return
        # Requests of this call (flow tasks may encode from several threads), round robin, results read here:
        # no Python callback runs on OpenVINO's stream threads. With AsyncInferQueue's callbacks a stream
        # thread could be waiting for the GIL when a compiled model was destroyed (GIL held, joining that
        # thread): the process hung (py-spy: ~CPUStreamsExecutor in std::thread::join).
        reqs = [compiled.create_infer_request() for _ in range(min(jobs, len(batches)))]
        pending: list[int | None] = [None] * len(reqs)

        def collect(i: int) -> None:
            n = pending[i]
            if n is not None:
                reqs[i].wait()
                done(n, np.array(reqs[i].get_output_tensor(0).data, dtype=np.float32))
                pending[i] = None

        for n, (ids, mask) in enumerate(batches):
            i = n % len(reqs)
            collect(i)
            reqs[i].start_async({"input_ids": ids, "attention_mask": mask})
            pending[i] = n
        for i in range(len(reqs)):
            collect(i)

    return run


def onnx_runner(folder: Path) -> Runner:
    """An ONNX Runtime session on the CPU with every graph optimisation, batches one after another."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads = os.cpu_count() or 1
    sess = ort.InferenceSession(str(folder / "model.onnx"), opts, providers=["CPUExecutionProvider"])

    def run(
        batches: Sequence[tuple[np.ndarray, np.ndarray]], done: Callable[[int, np.ndarray], None]
    ) -> None:
        for n, (ids, mask) in enumerate(batches):
            vecs = sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
            done(n, vecs.astype(np.float32, copy=False))

    return run


def load_exported(
    model: str, backend: str, *, cache_dir: Path | None = None, batch_size: int
) -> ExportedEmbedder:
    """The exported model for a backend, exported first from the local weights if it is not there yet."""
    folder = ensure_exported(model, backend, cache_dir)
    run = (openvino_runner if backend == "openvino" else onnx_runner)(folder)
    dim = declared_dim(model) or _probe_dim(run, model)
    return ExportedEmbedder(embedding_key(model, backend), model, run, dim=dim, batch_size=batch_size)


def _probe_dim(run: Runner, model: str) -> int:
    """The width of the vector the exported graph makes, for a folder that declares none (no torch)."""
    out: list[np.ndarray] = []
    run([pad(load_tokenizer(model).encode_batch(["dimension"]))], lambda _n, vecs: out.append(vecs))
    return int(out[0].shape[1])
