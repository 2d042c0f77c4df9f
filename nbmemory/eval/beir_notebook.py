"""The BEIR notebook's steps: find the person's BEIR folders (or fetch them, or say where to put
them), say what a run will cost before it starts, embed with a progress bar, and fall back to the
bundled sample corpus's judged queries when there is no BEIR data at all.

Progress and notes go to stdout: a notebook shows stderr like an error.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from nbmemory.eval.beir import BEIR_URL, BeirDataset, Document, download, load
from nbmemory.eval.cache import CachedEmbedder
from nbmemory.eval.harness import IndexOptions, items_for, make_embedder

#: The collections the notebook runs by default: small enough for a CPU.
DEFAULT_DATASETS = ("scifact", "nfcorpus")
#: Texts embedded per step of the progress bar.
STEP = 64
#: Texts timed before a run to estimate how long its embedding takes.
SAMPLE = 32


def say(message: str) -> None:
    """A progress line in the notebook's normal output (the harness's default is stderr)."""
    print(message, flush=True)


def device_note(device: str | None = None) -> tuple[str, str]:
    """``(device, sentence)``: where the model will embed, and why. CUDA when torch sees a GPU."""
    import torch

    if device:
        return device, f"embedding on {device} (as asked)"
    if torch.cuda.is_available():
        name = torch.cuda.get_device_name(0)
        return "cuda", f"embedding on the GPU: cuda ({name}), batches of 256"
    return "cpu", f"embedding on the CPU ({torch.get_num_threads()} threads): torch sees no CUDA GPU"


def online(url: str = BEIR_URL, timeout: float = 3.0) -> bool:
    """Whether the host the BEIR zips come from answers (a TCP connection, nothing downloaded)."""
    host = urlparse(url.format(name="scifact")).hostname or ""
    try:
        with socket.create_connection((host, 443), timeout=timeout):
            return True
    except OSError:
        return False


def find_datasets(folder: str | os.PathLike[str], names: Sequence[str], fetch: bool = False) -> list[Path]:
    """The BEIR folders ``folder/<name>`` that are there; with ``fetch``, missing ones are
    downloaded when the BEIR host can be reached. Says, for each missing one, where to put it."""
    root = Path(folder).expanduser()
    found: list[Path] = []
    missing: list[str] = []
    for name in names:
        path = root / name
        if (path / "corpus.jsonl").is_file():
            found.append(path)
        else:
            missing.append(name)
    if missing and fetch and online():
        for name in missing:
            say(f"downloading {BEIR_URL.format(name=name)} into {root}")
            found.append(download(name, root))
        missing = []
    for name in missing:
        say(
            f"{name}: not found at {root / name}. Download {BEIR_URL.format(name=name)} and unzip it "
            f"into {root} (giving {root / name}/corpus.jsonl, queries.jsonl, qrels/test.tsv)"
            + ("" if fetch else ", or set fetch = True to download it when online")
        )
    return found


def sample_dataset() -> BeirDataset:
    """The bundled sample corpus as a BEIR collection: each text file a document, its built-in
    queries (``DEMO_QUERIES.json``) judged by their target file."""
    from nbmemory.demo import SAMPLE_CORPUS, demo_queries

    corpus: dict[str, Document] = {}
    for file in sorted(SAMPLE_CORPUS.rglob("*")):
        if file.suffix in {".md", ".txt", ".py"} and file.is_file():
            doc_id = file.relative_to(SAMPLE_CORPUS).as_posix()
            corpus[doc_id] = Document(doc_id, file.stem.replace("-", " "), file.read_text(encoding="utf-8"))
    queries, qrels = {}, {}
    for number, q in enumerate(demo_queries(), start=1):
        if q["target"] in corpus:
            queries[f"q{number}"] = q["query"]
            qrels[f"q{number}"] = {q["target"]: 1}
    return BeirDataset("sample-corpus", SAMPLE_CORPUS, corpus, queries, qrels)


def subset(path: Path, queries: int, docs: int) -> BeirDataset:
    """A slice of a BEIR folder: the first ``queries`` judged queries, their judged documents, and
    other documents up to ``docs`` (:func:`nbmemory.eval.beir.load`)."""
    return load(path, "test", queries, docs)


def _texts(dataset: BeirDataset, embedder: Any) -> list[str]:
    """Every text storing ``dataset`` embeds: each item, and each passage window of a long one
    (embedded on its own unless the windows are pooled from the item's pass)."""
    from nbmemory.config import Settings
    from nbmemory.store import passages
    from nbmemory.store.chunks import embedding_text

    texts, _, headings, _ = items_for(dataset, IndexOptions())
    out = [embedding_text(h, t) for h, t in zip(headings, texts, strict=True)]
    if Settings().passages and passages.method(embedder) == passages.SEPARATE:
        out += [w for h, t in zip(headings, texts, strict=True) for w in passages.texts_of(h, t, "memory")]
    return out


def plan(datasets: Sequence[BeirDataset], embedder: Any, device_sentence: str) -> dict[str, Any]:
    """What embedding ``datasets`` will take: texts in all, how many are cached already, and an
    estimate of the time from a timed sample of the rest. Printed as one line per dataset."""
    todo: dict[str, list[str]] = {}
    caches: dict[str, CachedEmbedder] = {}
    total = cached = 0
    for ds in datasets:
        cache = caches[ds.name] = CachedEmbedder(embedder, ds.name, log=None)
        texts = _texts(ds, embedder)
        missing = [t for t in dict.fromkeys(texts) if _key(t) not in cache.cache]
        todo[ds.name] = missing
        total += len(texts)
        cached += len(texts) - len(missing)
    left = sum(len(v) for v in todo.values())
    rate = None
    if left:
        # Timed on texts the run needs anyway (they go to the cache), spread over the list (items
        # first, then their shorter passage windows); the first call loads the model.
        name = next(n for n, v in todo.items() if v)
        caches[name].prefill(todo[name][:2])
        rest = todo[name][2:]
        sample = rest[:: max(1, len(rest) // SAMPLE)][:SAMPLE]
        t0 = time.perf_counter()
        timed = caches[name].prefill(sample)
        if timed:
            rate = timed / max(time.perf_counter() - t0, 1e-6)
    for ds in datasets:
        say(f"  {ds.describe()}; {len(todo[ds.name]):,} texts to embed")
    if rate:
        say(
            f"{device_sentence}; about {rate:.0f} texts/s here, so about {_duration(left / rate)} of embedding for {left:,} texts ({cached:,} cached)"
        )
    else:
        say(f"{device_sentence}; every text is cached already: no embedding to do")
    return {"texts": total, "cached": cached, "to_embed": left, "rate": rate}


def _key(text: str) -> bytes:
    from nbmemory.eval.cache import text_key

    return text_key(text)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(seconds, 1):.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def embed(datasets: Sequence[BeirDataset], embedder: Any) -> float:
    """Embed every text of ``datasets`` not cached yet, with a progress bar; the evaluation then
    reads them from the cache. Returns the seconds it took."""
    from tqdm.auto import tqdm

    started = time.perf_counter()
    for ds in datasets:
        cache = CachedEmbedder(embedder, ds.name, log=None)
        texts = [t for t in dict.fromkeys(_texts(ds, embedder)) if _key(t) not in cache.cache]
        if not texts:
            continue
        with tqdm(total=len(texts), desc=f"embedding {ds.name}", unit="text") as bar:
            for start in range(0, len(texts), STEP):
                part = texts[start : start + STEP]
                cache.prefill(part)
                bar.update(len(part))
    return time.perf_counter() - started


def evaluate(
    datasets: Sequence[BeirDataset], configs: str, embedder: Any, keep_hits: bool = True, **kwargs: Any
) -> list[Any]:
    """:func:`nbmemory.eval.harness.evaluate_beir` on each dataset, progress on stdout."""
    from nbmemory.eval.harness import evaluate_beir

    return [
        evaluate_beir(ds, configs, embedder=embedder, keep_hits=keep_hits, log=say, **kwargs)
        for ds in datasets
    ]


__all__ = [
    "DEFAULT_DATASETS",
    "device_note",
    "embed",
    "evaluate",
    "find_datasets",
    "make_embedder",
    "online",
    "plan",
    "sample_dataset",
    "say",
    "subset",
]
