"""Run named search configurations over a BEIR collection, through the public Memory API.

How a BEIR collection becomes a memory
--------------------------------------
Every document is stored with :meth:`nbmemory.Memory.remember_many`, exactly as a user's
remembered text is: ``sources`` = the BEIR document id, ``headings`` = the document title,
text = the document body. So the title is BM25's heading field (counted at the heading weight,
0.3) and is prepended to the body for the embedder (``"title\\nbody"``). With
``title="body"`` the title is put at the start of the body instead (one BM25 field, as
Pyserini's flat index does); the embedder sees the same text either way.

Documents are not chunked by default (``chunking="none"``): the published baselines score whole
documents, BM25 sees all of a document's words and all-MiniLM-L6-v2 reads its first 256 word
pieces. With ``chunking="maxp"`` a document longer than the chunk cap is cut by the ingest
chunker (:func:`nbmemory.ingest.chunking.chunk_text`) and scored by its best chunk (max-P): the
search returns chunks, and a document takes the rank of its first chunk.

Retrieval runs ``Memory.search(query, k, config=PipelineConfig(...), log=False)`` per query and
times it end to end (query embedding included; the vector stage's own ``embed_ms`` is kept
apart), after one untimed pass over all queries that loads the store's pages. Metrics come from
:mod:`nbmemory.tune.metrics` (``pytrec_eval``).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from nbmemory.config import set_torch_threads
from nbmemory.embed.base import Embedder
from nbmemory.errors import ConfigError
from nbmemory.eval.beir import BeirDataset, load
from nbmemory.eval.cache import CachedEmbedder, StoreInfo, cached_store
from nbmemory.ingest.chunking import MAX_CHARS, chunk_text
from nbmemory.memory import Memory
from nbmemory.search.config import PipelineConfig
from nbmemory.store import item_rows
from nbmemory.tune.metrics import evaluate, rank_run

if TYPE_CHECKING:
    import polars as pl

LogFn = Callable[[str], None]

#: The configurations every evaluation knows by name.
BASE_CONFIG_NAMES = ("bm25", "vector", "rrf", "default")
#: PipelineConfig fields that are not stage toggles.
_CORE_FIELDS = {"retrievers", "depth", "rrf_k", "weights"}
_NAMESPACE = "eval"


#: Configurations run on a second store embedded with a tuned model (``tuned_model=``).
TUNED_CONFIG_NAMES = ("tuned", "tuned-vector")


def tuned_configs() -> dict[str, PipelineConfig]:
    """``tuned``: the default pipeline, ``tuned-vector``: vector alone; both with the tuned model."""
    return {"tuned": PipelineConfig(), "tuned-vector": PipelineConfig(retrievers=("vector",))}


def split_tuned(
    configs: str | Sequence[str] | Mapping[str, PipelineConfig] | None,
) -> tuple[str | Sequence[str] | Mapping[str, PipelineConfig] | None, list[str]]:
    """``configs`` without the tuned names, and the tuned names asked for (in order)."""
    if configs is None or isinstance(configs, Mapping):
        return configs, []
    names = [c.strip() for c in configs.split(",")] if isinstance(configs, str) else list(configs)
    tuned = [n for n in names if n in TUNED_CONFIG_NAMES]
    rest = [n for n in names if n and n not in TUNED_CONFIG_NAMES]
    return (rest if rest else ([] if tuned else None)), tuned


def base_configs() -> dict[str, PipelineConfig]:
    """``bm25`` and ``vector`` alone and ``rrf`` (both, equal weights, k=60), every optional
    stage off; ``default``: the pipeline as a user gets it."""
    return {
        "bm25": PipelineConfig.plain(retrievers=("bm25",)),
        "vector": PipelineConfig.plain(retrievers=("vector",)),
        "rrf": PipelineConfig.plain(rrf_k=60, weights={"bm25": 1.0, "vector": 1.0}),
        "default": PipelineConfig(),
    }


def stage_toggles() -> dict[str, PipelineConfig]:
    """One configuration per boolean stage switch of :class:`PipelineConfig`, flipped from default.

    Found by introspection, so stages added later are evaluated without changes here:
    ``default+mmr`` turns on a stage that is off by default, ``default-mmr`` turns off one
    that is on. Empty while the pipeline has no such switches.
    """
    default = PipelineConfig()
    out: dict[str, PipelineConfig] = {}
    for f in dataclasses.fields(PipelineConfig):
        if f.name in _CORE_FIELDS:
            continue
        value = getattr(default, f.name)
        if isinstance(value, bool):
            name = f"default{'-' if value else '+'}{f.name}"
            changes: dict[str, Any] = {f.name: not value}
            out[name] = dataclasses.replace(default, **changes)
    return out


def resolve_configs(
    configs: str | Sequence[str] | Mapping[str, PipelineConfig] | None = None,
) -> dict[str, PipelineConfig]:
    """Named configurations from names (``"bm25,vector"``, ``"all"``) or a ready mapping.

    ``all`` means the four base configurations plus every stage toggle.
    """
    if isinstance(configs, Mapping):
        if not configs:
            raise ConfigError("no configurations given")
        return dict(configs)
    if configs is None:
        names: list[str] = list(BASE_CONFIG_NAMES)
    elif isinstance(configs, str):
        names = [c.strip() for c in configs.split(",") if c.strip()]
    else:
        names = list(configs)
    known = {**base_configs(), **stage_toggles()}
    out: dict[str, PipelineConfig] = {}
    for name in names:
        if name == "all":
            out.update(known)
        elif name in known:
            out[name] = known[name]
        else:
            raise ConfigError(f"unknown configuration {name!r}: use one of {', '.join([*known, 'all'])}")
    if not out:
        raise ConfigError("no configurations given")
    return out


def make_embedder(model: str | None = None, device: str | None = None) -> Embedder:
    """The embedder for an evaluation: a sentence-transformers model, or ``"fake"`` for plumbing.

    ``device=None`` picks CUDA when torch sees a GPU (batch 256) and the CPU otherwise (batch 64).
    """
    if model == "fake":
        from nbmemory.embed.fake import FakeEmbedder

        return FakeEmbedder(dim=64, tag="eval")
    from nbmemory.config import DEFAULT_MODEL
    from nbmemory.embed.loader import load_model

    return load_model(model or DEFAULT_MODEL, device)


@dataclass(frozen=True)
class IndexOptions:
    """How BEIR documents become stored items.

    Parameters
    ----------
    title:
        ``"heading"``: the title is the heading field (BM25 weight 0.3, prepended for the
        embedder). ``"body"``: the title starts the body text (one BM25 field, like Pyserini).
    chunking:
        ``"none"``: one item per document. ``"maxp"``: documents over ``max_chars`` are cut by
        the ingest chunker and a document is scored by its best chunk.
    max_chars:
        Chunk cap for ``"maxp"``.
    """

    title: Literal["heading", "body"] = "heading"
    chunking: Literal["none", "maxp"] = "none"
    max_chars: int = MAX_CHARS

    def __post_init__(self) -> None:
        if self.title not in ("heading", "body"):
            raise ConfigError(f"title must be 'heading' or 'body', not {self.title!r}")
        if self.chunking not in ("none", "maxp"):
            raise ConfigError(f"chunking must be 'none' or 'maxp', not {self.chunking!r}")
        if self.max_chars < 100:
            raise ConfigError(f"max_chars must be at least 100, got {self.max_chars}")


@dataclass
class ConfigRun:
    """One configuration's results on one dataset."""

    name: str
    config: PipelineConfig
    overall: dict[str, float]
    per_query: dict[str, dict[str, float]]
    ranked: dict[str, list[str]]
    latency_ms: dict[str, float]
    embed_ms: dict[str, float]
    hits: list[dict[str, Any]] = field(default_factory=list)

    @property
    def run(self) -> dict[str, dict[str, float]]:
        """The ranking as a ``{qid: {docid: 1/rank}}`` run."""
        return rank_run(self.ranked)

    def latency(self) -> dict[str, float]:
        """p50 / p95 of end-to-end search time, and of the query embedding inside it.

        The pipeline may overlap the query embedding with BM25, so the two are reported side by
        side rather than subtracted.
        """
        total = np.array(list(self.latency_ms.values()) or [np.nan])
        embed = np.array([self.embed_ms.get(q, 0.0) for q in self.latency_ms] or [np.nan])
        return {
            "p50_ms": float(np.percentile(total, 50)),
            "p95_ms": float(np.percentile(total, 95)),
            "embed_p50_ms": float(np.percentile(embed, 50)),
            "embed_p95_ms": float(np.percentile(embed, 95)),
        }


@dataclass
class BeirResult:
    """Everything one :func:`evaluate_beir` call measured."""

    dataset: str
    model: str
    fingerprint: str
    device: str
    k: int
    options: IndexOptions
    store: StoreInfo
    queries: int
    runs: dict[str, ConfigRun]
    wall_s: float
    limits: dict[str, int | None] = field(default_factory=dict)
    qrels: dict[str, dict[str, int]] = field(default_factory=dict, repr=False)
    tuned_model: str | None = None
    tuned_fingerprint: str | None = None

    def table(self) -> pl.DataFrame:
        """One row per configuration: metrics and latency."""
        from nbmemory.eval.report import results_table

        return results_table([self])

    def per_query(self) -> pl.DataFrame:
        """One row per (configuration, query) with every metric."""
        from nbmemory.eval.report import per_query_table

        return per_query_table([self])

    def hits(self) -> pl.DataFrame:
        """One row per returned document (top ``k``) with retriever ranks, scores and relevance."""
        from nbmemory.eval.report import hits_table

        return hits_table([self])

    def to_dict(self, per_query: bool = True) -> dict[str, Any]:
        """JSON-ready summary (per-query metrics included unless ``per_query=False``)."""
        from nbmemory.eval.report import result_to_dict

        return result_to_dict(self, per_query=per_query)


def _stderr(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def items_for(dataset: BeirDataset, options: IndexOptions) -> tuple[list[str], list[str], list[str], int]:
    """Texts, sources (doc ids) and headings to store for a dataset, and how many docs were empty."""
    texts: list[str] = []
    sources: list[str] = []
    headings: list[str] = []
    skipped = 0
    for doc in dataset.corpus.values():
        title, body = doc.title.strip(), doc.text.strip()
        if options.title == "body" or not body:
            # "title\nbody" is also what the embedder sees in heading mode: same vectors.
            body, title = "\n".join(p for p in (title, body) if p), ""
        if not body:
            skipped += 1
            continue
        if options.chunking == "maxp" and len(body) > options.max_chars:
            pieces = [c.text for c in chunk_text(doc.id, body, "text", options.max_chars)]
        else:
            pieces = [body]
        for piece in pieces:
            texts.append(piece)
            sources.append(doc.id)
            headings.append(title)
    return texts, sources, headings, skipped


def build_store(
    dataset: BeirDataset,
    embedder: Embedder,
    path: Path,
    options: IndexOptions = IndexOptions(),
    log: LogFn | None = None,
) -> StoreInfo:
    """Index a dataset into a new store at ``path`` with ``Memory.remember_many``."""
    texts, sources, headings, skipped = items_for(dataset, options)
    from nbmemory.store.chunks import embedding_text

    started = time.perf_counter()
    embed_s = 0.0
    embedded = 0
    if isinstance(embedder, CachedEmbedder):
        # Embedding first (sorted by length, cached block by block), so storing reads the cache.
        t0 = time.perf_counter()
        embedded = embedder.prefill([embedding_text(h, t) for h, t in zip(headings, texts, strict=True)])
        embed_s = time.perf_counter() - t0
    if log:
        log(f"storing {len(texts)} items from {len(dataset.corpus)} documents into {path.name}")
    with Memory(path, embedder=embedder, namespace=_NAMESPACE, refine="inline") as mem:
        mem.remember_many(texts, sources=sources, headings=headings, namespace=_NAMESPACE, batch_size=1024)
        items = item_rows.live_count(mem.db)
    return StoreInfo(
        path=path,
        documents=len(dataset.corpus) - skipped,
        items=items,
        reused=False,
        build_s=time.perf_counter() - started,
        embed_s=embed_s,
        embedded=embedded,
        skipped_empty=skipped,
    )


def prepare_store(
    dataset: BeirDataset,
    embedder: Embedder,
    options: IndexOptions = IndexOptions(),
    cache: bool = True,
    workdir: Path | None = None,
    log: LogFn | None = None,
) -> StoreInfo:
    """A store holding the dataset: reused from the store cache when possible, else built.

    With ``cache=False`` the store is built in ``workdir`` (a fresh temporary folder by default)
    and nothing is reused.
    """
    if not cache:
        folder = workdir or Path(tempfile.mkdtemp(prefix="nbmemory-eval-"))
        return build_store(dataset, embedder, folder / f"{dataset.name}.duckdb", options, log)
    return cached_store(
        dataset.name,
        dataset.corpus_hash(),
        embedder.fingerprint,
        dataclasses.asdict(options),
        lambda path: build_store(dataset, embedder, path, options, log),
        meta={"model": embedder.name, "options": dataclasses.asdict(options)},
        log=log,
    )


def run_config(
    mem: Memory,
    name: str,
    config: PipelineConfig,
    queries: Mapping[str, str],
    qrels: Mapping[str, Mapping[str, int]],
    k: int = 100,
    chunked: bool = False,
    keep_hits: bool = True,
) -> ConfigRun:
    """Search every query with one configuration and score the ranking.

    Parameters
    ----------
    mem:
        The evaluation store.
    k:
        Documents per query that are scored (100 for Recall@100).
    chunked:
        Items are chunks: fetch ``3 * k`` and keep each document's best-ranked chunk (max-P).
    keep_hits:
        Keep one record per returned document (ranks, scores, relevance) for diagnostics.
    """
    fetch = 3 * k if chunked else k
    ranked: dict[str, list[str]] = {}
    latency: dict[str, float] = {}
    embed: dict[str, float] = {}
    records: list[dict[str, Any]] = []
    if queries:
        # One untimed search first: model and code paths warm up outside the figures.
        mem.search(next(iter(queries.values())), k=fetch, config=config, log=False)
    for qid, text in queries.items():
        started = time.perf_counter()
        result = mem.search(text, k=fetch, config=config, log=False)
        latency[qid] = (time.perf_counter() - started) * 1000
        stage = result.trace.stage("vector")
        embed[qid] = float(stage.notes.get("embed_ms", 0.0)) if stage is not None else 0.0
        docs: list[str] = []
        seen: set[str] = set()
        judged = qrels.get(qid, {})
        for hit in result.hits:
            doc = hit.source or ""
            if doc in seen:
                continue
            seen.add(doc)
            docs.append(doc)
            if keep_hits:
                records.append(
                    {
                        "query_id": qid,
                        "doc_id": doc,
                        "rank": len(docs),
                        "score": float(hit.score),
                        "bm25_rank": hit.ranks.get("bm25"),
                        "vector_rank": hit.ranks.get("vector"),
                        "bm25_score": hit.retriever_scores.get("bm25"),
                        "vector_sim": hit.retriever_scores.get("vector"),
                        "relevance": int(judged.get(doc, 0)),
                    }
                )
            if len(docs) == k:
                break
        ranked[qid] = docs
    overall, per_query = evaluate(qrels, rank_run(ranked))
    return ConfigRun(name, config, overall, per_query, ranked, latency, embed, records)


def evaluate_beir(
    data: str | os.PathLike[str] | BeirDataset,
    configs: str | Sequence[str] | Mapping[str, PipelineConfig] | None = None,
    *,
    model: str | None = None,
    device: str | None = None,
    embedder: Embedder | None = None,
    k: int = 100,
    limit_queries: int | None = None,
    limit_docs: int | None = None,
    options: IndexOptions = IndexOptions(),
    cache: bool = True,
    keep_hits: bool = True,
    torch_threads: int | None = None,
    log: LogFn | None = _stderr,
    tuned_model: str | None = None,
    tuned_embedder: Embedder | None = None,
) -> BeirResult:
    """Evaluate search configurations on a BEIR collection.

    Parameters
    ----------
    data:
        A BEIR folder or an already loaded :class:`BeirDataset`.
    configs:
        Names (``"bm25,vector,rrf,default"``, ``"all"``) or ``{name: PipelineConfig}``.
    model, device:
        The embedding model (default: the bundled all-MiniLM-L6-v2; ``"fake"`` for plumbing
        checks) and device (default: CUDA when present, else CPU).
    embedder:
        Use this embedder instead of loading ``model``.
    k:
        Ranking depth scored per query.
    limit_queries, limit_docs:
        Evaluate a slice (see :func:`nbmemory.eval.beir.load`).
    options:
        How documents are stored (title handling, chunking).
    cache:
        Reuse cached document vectors and indexed stores (``$NBMEMORY_CACHE/eval`` or
        ``~/.cache/nbmemory/eval``). With ``False`` nothing is read from or written to the cache.
    keep_hits:
        Keep per-document records for :mod:`nbmemory.eval.diagnostics`.
    torch_threads:
        Set torch's intra-op threads for the run (``torch.set_num_threads``). On a machine where
        other processes compete for the cores, torch's default (one thread per core) makes a
        single query embedding many times slower; 1 keeps latency figures meaningful.
    log:
        Progress lines (default: stderr); ``None`` for silence.
    tuned_model, tuned_embedder:
        The model the ``tuned`` and ``tuned-vector`` configurations use (a folder written by
        ``nbmemory tune`` or :func:`nbmemory.tune.train.train_model`): they run on a second
        store embedded with it, so they compare with ``default`` and ``vector`` one to one.

    Returns
    -------
    BeirResult
    """
    started = time.perf_counter()
    if k <= 0:
        raise ConfigError(f"k must be greater than 0, got {k}")
    base_names, tuned_names = split_tuned(configs)
    named = resolve_configs(base_names) if base_names != [] else {}
    if tuned_names and tuned_model is None and tuned_embedder is None:
        raise ConfigError(
            f"configuration {tuned_names[0]!r} needs a tuned model: pass --tuned-model PATH "
            "(a model folder written by `nbmemory tune`)"
        )
    set_torch_threads(torch_threads)
    dataset = data if isinstance(data, BeirDataset) else load(data, "test", limit_queries, limit_docs)
    if log:
        log(dataset.describe())
    inner = embedder or make_embedder(model, device)
    wrapped: Embedder = CachedEmbedder(inner, dataset.name, log=log) if cache else inner
    workdir = None if cache else Path(tempfile.mkdtemp(prefix="nbmemory-eval-"))
    tuned_inner: Embedder | None = None
    try:
        runs: dict[str, ConfigRun] = {}
        info: StoreInfo | None = None
        if named:
            info = prepare_store(dataset, wrapped, options, cache=cache, workdir=workdir, log=log)
            runs.update(_run_named(info.path, wrapped, dataset, named, k, options, keep_hits, log))
        if tuned_names:
            tuned_inner = tuned_embedder or make_embedder(tuned_model, device)
            tuned_wrapped = CachedEmbedder(tuned_inner, dataset.name, log=log) if cache else tuned_inner
            tuned_dir = None if workdir is None else workdir / "tuned"
            tuned_info = prepare_store(
                dataset, tuned_wrapped, options, cache=cache, workdir=tuned_dir, log=log
            )
            wanted = {n: tuned_configs()[n] for n in tuned_names}
            runs.update(
                _run_named(tuned_info.path, tuned_wrapped, dataset, wanted, k, options, keep_hits, log)
            )
            info = info or tuned_info
        assert info is not None  # named or tuned_names is non-empty
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    return BeirResult(
        dataset=dataset.name,
        model=inner.name,
        fingerprint=inner.fingerprint,
        device=str(getattr(inner, "device", "cpu")),
        k=k,
        options=options,
        store=info,
        queries=len(dataset.queries),
        runs=runs,
        wall_s=time.perf_counter() - started,
        limits=dict(dataset.limits),
        qrels=dataset.qrels,
        tuned_model=None if tuned_inner is None else tuned_inner.name,
        tuned_fingerprint=None if tuned_inner is None else tuned_inner.fingerprint,
    )


def _run_named(
    path: Path,
    embedder: Embedder,
    dataset: BeirDataset,
    named: Mapping[str, PipelineConfig],
    k: int,
    options: IndexOptions,
    keep_hits: bool,
    log: LogFn | None,
) -> dict[str, ConfigRun]:
    runs: dict[str, ConfigRun] = {}
    with Memory(path, embedder=embedder, namespace=_NAMESPACE) as mem:
        # An untimed pass over every query with both retrievers loads the index pages they
        # touch, so the first configuration timed is not charged for a cold store.
        warm = PipelineConfig(retrievers=("bm25", "vector"))
        for text in dataset.queries.values():
            mem.search(text, k=k, config=warm, log=False)
        for name, config in named.items():
            t0 = time.perf_counter()
            runs[name] = run_config(
                mem,
                name,
                config,
                dataset.queries,
                dataset.qrels,
                k=k,
                chunked=options.chunking == "maxp",
                keep_hits=keep_hits,
            )
            if log:
                lat = runs[name].latency()
                log(
                    f"{dataset.name} {name}: ndcg@10 {runs[name].overall['ndcg@10']:.4f} "
                    f"p50 {lat['p50_ms']:.1f} ms ({time.perf_counter() - t0:.1f} s)"
                )
    return runs


def evaluate_many(
    paths: Iterable[str | os.PathLike[str]], configs: str | Sequence[str] | None = None, **kwargs: Any
) -> list[BeirResult]:
    """:func:`evaluate_beir` on several datasets with the same settings."""
    return [evaluate_beir(p, configs, **kwargs) for p in paths]
