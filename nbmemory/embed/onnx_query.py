"""Query embedding through ONNX Runtime: the same weights, exported once, with less overhead.

A search embeds one short query; sentence-transformers spends most of that time in Python and
torch dispatch, which ONNX Runtime does not have. The graph is exported
from the loaded model itself (torch's TorchScript exporter, no network) the first time a query
is embedded, into ``$NBMEMORY_CACHE/onnx/<fingerprint>.onnx``, and used only when it gives the
model's own vectors on probe texts to within :data:`TOLERANCE` (max absolute difference).
Otherwise, for a model that is not a Transformer + mean pooling + Normalize stack, on
CUDA, or with ``NBMEMORY_ONNX=0``, queries go through sentence-transformers. Documents
always do (batches, where torch is as fast).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory import private
from nbmemory.config import cache_folder

#: Largest difference from sentence-transformers' vector, on any probe, for the export to be used.
TOLERANCE = 1e-5
#: Exports kept in the cache, the most recently used: each is the model's full weights (about
#: 90 MB for MiniLM), and every adopted tuning is a new model.
KEEP_EXPORTS = 4
PROBES = (
    "kafka consumer lag",
    "how do I tell git bisect to pass over a commit I can't test",
    "INC-2307: pg_terminate_backend(pid) on the staging replica",
    "Müller's Köln notes, 机器学习 and naïve café",
    " ".join(["a long paragraph that runs past the model's window"] * 60),
)


def _cache_dir() -> Path:
    return cache_folder("onnx")


def prune_exports(folder: Path, keep: Path, count: int = KEEP_EXPORTS) -> list[Path]:
    """Delete all but the ``count`` most recently used exports in ``folder`` (never ``keep``);
    returns what was deleted. A process still using a deleted one keeps its open session."""
    exports = sorted(folder.glob("*.onnx"), key=lambda p: p.stat().st_mtime, reverse=True)
    dropped = [p for p in exports if p != keep][max(0, count - 1) :]
    for old in dropped:
        old.unlink(missing_ok=True)
    return dropped


def _supported(model: Any) -> bool:
    """A Transformer, mean pooling of token embeddings, then Normalize: what the graph computes."""
    names = [type(m).__name__ for m in model]
    if names != ["Transformer", "Pooling", "Normalize"]:
        return False
    mode = getattr(model[1], "pooling_mode", None)  # sentence-transformers 6: one mode per Pooling
    return mode == "mean" or mode == ["mean"]


def _features(model: Any, text: str) -> dict[str, Any]:
    """The model's own tokenization of one text (``preprocess`` since sentence-transformers 6)."""
    prepare = getattr(model, "preprocess", None) or model.tokenize
    return dict(prepare([text]))


class OnnxQueryEncoder:
    """Embeds single queries with an ONNX export of a sentence-transformers model.

    Use :meth:`for_model`; it returns None when the export cannot be made or does not match.
    """

    def __init__(self, model: Any, session: Any, inputs: list[str]) -> None:
        self._model = model
        self._session = session
        self._inputs = inputs

    @classmethod
    def for_model(cls, model: Any, fingerprint: str, device: str) -> OnnxQueryEncoder | None:
        if (
            os.environ.get("NBMEMORY_ONNX", "1") == "0"
            or not device.startswith("cpu")
            or not _supported(model)
        ):
            return None
        try:
            import onnxruntime as ort
        except ImportError:
            return None
        path = _cache_dir() / f"{fingerprint}.onnx"
        try:
            if path.exists():
                with contextlib.suppress(OSError):  # used now: pruning keeps the most recently used
                    os.utime(path)
            else:
                cls._export(model, path)
                prune_exports(path.parent, keep=path)
            import torch

            options = ort.SessionOptions()
            options.intra_op_num_threads = max(1, torch.get_num_threads())
            options.log_severity_level = 3
            # One query per search: threads spinning after the run would only take the cores
            # from the retrieval that follows it.
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            inputs = [i.name for i in session.get_inputs()]
            encoder = cls(model, session, inputs)
            if not encoder.matches():
                return None
            return encoder
        except Exception:  # an export torch cannot make, a corrupt file: queries use torch
            path.unlink(missing_ok=True)
            return None

    @staticmethod
    def _export(model: Any, path: Path) -> None:
        import torch

        transformer = model[0].auto_model

        class Graph(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.transformer = transformer

            def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
                out = self.transformer(
                    input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
                ).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(out.dtype)
                pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(pooled, p=2, dim=1)

        features = _features(model, PROBES[0])
        args = tuple(
            features.get(name, torch.zeros_like(features["input_ids"]))
            for name in ("input_ids", "attention_mask", "token_type_ids")
        )
        private.make_dir(path.parent)
        # mkstemp makes the file 0600; the export writes into it.
        handle, tmp = tempfile.mkstemp(dir=path.parent, suffix=".onnx.tmp")
        os.close(handle)
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")
                torch.onnx.export(
                    Graph().eval(),
                    args,
                    tmp,
                    input_names=["input_ids", "attention_mask", "token_type_ids"],
                    output_names=["embedding"],
                    dynamic_axes={
                        n: {0: "batch", 1: "tokens"}
                        for n in ("input_ids", "attention_mask", "token_type_ids")
                    },
                    opset_version=17,
                    dynamo=False,
                )
            os.replace(tmp, path)
        finally:
            Path(tmp).unlink(missing_ok=True)

    def encode(self, text: str) -> np.ndarray:
        """The unit-length embedding of ``text`` (already prefixed), as sentence-transformers makes it."""
        features = _features(self._model, text)
        feed = {}
        for name in self._inputs:
            value = features.get(name)
            feed[name] = (
                np.zeros_like(features["input_ids"].numpy()) if value is None else value.numpy()
            ).astype(np.int64)
        return np.asarray(self._session.run(None, feed)[0][0], dtype=np.float32)

    def matches(self) -> bool:
        """Whether this graph gives the model's own vectors on every probe."""
        reference = self._model.encode(
            list(PROBES), convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False
        )
        return all(
            float(np.abs(self.encode(text) - ref).max()) <= TOLERANCE
            for text, ref in zip(PROBES, reference, strict=True)
        )
