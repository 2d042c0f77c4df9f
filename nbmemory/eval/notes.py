"""Search quality on a folder of notes, judged per file.

How a notes folder is evaluated
-------------------------------
The folder is indexed with :meth:`nbmemory.Memory.index`, exactly as a user indexes their notes
(same walk, chunking, redaction), into a store kept in the evaluation store cache
(:func:`nbmemory.eval.cache.cached_store`, under the same rule as the BEIR stores; document
vectors in the vector cache), so a rerun on unchanged notes and code indexes nothing. Every query
then goes through ``Memory.search(query, k=fetch_k, config=...)`` for each named configuration
(the same names as the BEIR harness: ``bm25``, ``vector``, ``rrf``, ``default``, stage toggles),
timed end to end.

Search returns chunks; the user looks for a note. A chunk ranking becomes a file ranking by
keeping the first occurrence of each source file, in order, named by its path relative to the
corpus folder (``folder/note.md``), the form the queries' ``targets`` use.

Queries are JSON lines: ``{"qid", "query", "kind", "targets": [...], "split"}`` with kinds
``paraphrase``, ``keyword``, ``question`` (answerable: at least one target) and ``miss`` (no note
answers it: no targets), and split ``dev`` or ``test`` (``dev`` when absent).

Metrics (:func:`score_run`), from ``pytrec_eval`` on the file rankings cut to ``k``: Hit@1/5/10
(trec_eval ``success``) and MRR@10 (``recip_rank``), per kind and over every answerable query
(a query with nothing returned counts 0); for ``miss`` queries the share flagged
(``SearchResult.rejected``) and the share returned empty; for answerable queries the number
flagged (false flags) and returned empty; latency p50/p95.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytrec_eval

from nbmemory.config import set_torch_threads
from nbmemory.embed.base import Embedder
from nbmemory.errors import ConfigError
from nbmemory.eval.cache import CachedEmbedder, StoreInfo, cached_store
from nbmemory.eval.harness import make_embedder, resolve_configs
from nbmemory.ingest.indexer import walk
from nbmemory.memory import Memory
from nbmemory.search.config import PipelineConfig
from nbmemory.store import item_rows
from nbmemory.tune.metrics import rank_run

if TYPE_CHECKING:
    import polars as pl

LogFn = Callable[[str], None]

#: Query kinds with an answer in the notes.
ANSWERABLE_KINDS = ("paraphrase", "keyword", "question")
#: Every query kind; ``miss`` has no answer in the notes.
KINDS = (*ANSWERABLE_KINDS, "miss")
SPLITS = ("dev", "test", "all")
#: Our metric name -> the ``pytrec_eval`` result key.
METRICS: dict[str, str] = {
    "hit@1": "success_1",
    "hit@5": "success_5",
    "hit@10": "success_10",
    "mrr@10": "recip_rank",
}
_MEASURES = {"success.1,5,10", "recip_rank"}
_NAMESPACE = "eval"


@dataclass(frozen=True)
class NotesQuery:
    """One judged question about a notes folder."""

    qid: str
    query: str
    kind: str
    targets: tuple[str, ...] = ()
    split: str = "dev"

    @property
    def answerable(self) -> bool:
        return self.kind != "miss"


def load_queries(
    path: str | os.PathLike[str], split: str = "all", corpus: str | os.PathLike[str] | None = None
) -> list[NotesQuery]:
    """Read a queries JSONL file, keeping one split.

    Parameters
    ----------
    path:
        One JSON object per line: ``qid``, ``query``, ``kind``, ``targets``, ``split``.
    split:
        ``dev``, ``test`` or ``all``.
    corpus:
        When given, every target must be a file in this folder.

    Raises
    ------
    ConfigError
        On a malformed line, an unknown kind or split, a duplicate qid, targets that do not fit
        the kind, a target missing from ``corpus``, or no query in the split.
    """
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {', '.join(SPLITS)}, not {split!r}")
    source = Path(path).expanduser()
    if not source.is_file():
        raise ConfigError(f"queries file {source} not found: pass a JSONL file of notes queries")
    root = Path(corpus).expanduser() if corpus is not None else None
    out: list[NotesQuery] = []
    seen: set[str] = set()
    for number, line in enumerate(source.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        try:
            raw = json.loads(line)
            query = NotesQuery(
                qid=str(raw["qid"]),
                query=str(raw["query"]),
                kind=str(raw["kind"]),
                targets=tuple(str(t) for t in raw.get("targets") or ()),
                split=str(raw.get("split") or "dev"),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                f"{where}: not a notes query ({exc}): each line needs qid, query, kind and targets"
            ) from exc
        if query.kind not in KINDS:
            raise ConfigError(f"{where}: kind {query.kind!r} is not one of {', '.join(KINDS)}")
        if query.split not in ("dev", "test"):
            raise ConfigError(f"{where}: split {query.split!r} is not dev or test")
        if query.qid in seen:
            raise ConfigError(f"{where}: qid {query.qid!r} appears twice")
        seen.add(query.qid)
        if query.answerable and not query.targets:
            raise ConfigError(f"{where}: a {query.kind} query needs at least one target file")
        if not query.answerable and query.targets:
            raise ConfigError(f"{where}: a miss query has no targets, got {list(query.targets)}")
        if root is not None:
            for target in query.targets:
                if not (root / target).is_file():
                    raise ConfigError(
                        f"{where}: target {target!r} is not a file in {root}: "
                        "targets are paths relative to the corpus folder"
                    )
        if split in ("all", query.split):
            out.append(query)
    if not out:
        raise ConfigError(f"{source} holds no queries in split {split!r}")
    return out


@dataclass
class NotesRun:
    """One configuration (or peer system) scored on the notes queries.

    ``ranked`` holds each query's file ranking (relative paths, best first), ``chunks`` the
    source file of every chunk hit in the order search returned them (``None`` for peers),
    ``flagged`` whether the system said "no confident answer" and ``empty`` whether it
    returned nothing.
    """

    name: str
    ranked: dict[str, list[str]]
    flagged: dict[str, bool]
    empty: dict[str, bool]
    latency_ms: dict[str, float]
    per_query: dict[str, dict[str, float]]
    summary: dict[str, float | int]
    config: PipelineConfig | None = None
    chunks: dict[str, list[str]] | None = None

    def row(self) -> dict[str, Any]:
        """The summary as one table row, ``config`` first."""
        return {"config": self.name, **self.summary}


def _mean(values: Iterable[float]) -> float:
    seq = list(values)
    return float(sum(seq) / len(seq)) if seq else float("nan")


def score_run(
    name: str,
    queries: Sequence[NotesQuery],
    ranked: Mapping[str, Sequence[str]],
    flagged: Mapping[str, bool] | None = None,
    latency_ms: Mapping[str, float] | None = None,
    *,
    k: int = 10,
    config: PipelineConfig | None = None,
    chunks: Mapping[str, Sequence[str]] | None = None,
) -> NotesRun:
    """Score file rankings against notes queries: the same code for nbmemory and for peers.

    Parameters
    ----------
    name:
        Configuration or system name.
    queries:
        The judged queries.
    ranked:
        ``{qid: [relative file path, ...]}`` best first; a repeated file keeps its first rank.
        A query missing here counts as returned empty.
    flagged:
        ``{qid: True}`` where the system flagged "no confident answer" (default: nothing
        flagged). For systems without a flag, pass the queries left empty.
    latency_ms:
        Per-query search time.
    k:
        Files kept per query (the metrics read the top 10 at most).

    Returns
    -------
    NotesRun
        ``summary`` keys: ``hit@1``, ``hit@5``, ``hit@10``, ``mrr@10`` over answerable queries;
        ``<kind>_hit@1`` and ``<kind>_mrr@10`` per answerable kind present; ``miss_flag`` and
        ``miss_empty`` (shares of miss queries); ``false_flags`` and ``false_empty`` (counts
        of answerable queries); ``p50_ms``, ``p95_ms``; ``queries``, ``answerable``, ``misses``.
    """
    if k <= 0:
        raise ConfigError(f"k must be greater than 0, got {k}")
    flags = dict(flagged or {})
    files: dict[str, list[str]] = {}
    for q in queries:
        files[q.qid] = list(dict.fromkeys(ranked.get(q.qid, ())))[:k]
    answerable = [q for q in queries if q.answerable]
    misses = [q for q in queries if not q.answerable]
    qrels = {q.qid: {t: 1 for t in q.targets} for q in answerable}
    # Every metric looks at the top 10 at most (MRR@10 = recip_rank on the top 10).
    run = rank_run({q.qid: files[q.qid][:10] for q in answerable})
    # pytrec_eval skips queries without results; they score 0 here.
    scored = pytrec_eval.RelevanceEvaluator(qrels, _MEASURES).evaluate(
        {qid: docs for qid, docs in run.items() if docs}
    )
    per_query = {
        q.qid: {m: float(scored.get(q.qid, {}).get(key, 0.0)) for m, key in METRICS.items()}
        for q in answerable
    }
    empty = {q.qid: not files[q.qid] for q in queries}
    summary: dict[str, float | int] = {m: _mean(per_query[q.qid][m] for q in answerable) for m in METRICS}
    for kind in ANSWERABLE_KINDS:
        of_kind = [q for q in answerable if q.kind == kind]
        if of_kind:
            summary[f"{kind}_hit@1"] = _mean(per_query[q.qid]["hit@1"] for q in of_kind)
            summary[f"{kind}_mrr@10"] = _mean(per_query[q.qid]["mrr@10"] for q in of_kind)
    summary["miss_flag"] = _mean(float(flags.get(q.qid, False)) for q in misses)
    summary["miss_empty"] = _mean(float(empty[q.qid]) for q in misses)
    summary["false_flags"] = sum(bool(flags.get(q.qid, False)) for q in answerable)
    summary["false_empty"] = sum(empty[q.qid] for q in answerable)
    times = np.array([v for q in queries if (v := (latency_ms or {}).get(q.qid)) is not None])
    summary["p50_ms"] = float(np.percentile(times, 50)) if times.size else float("nan")
    summary["p95_ms"] = float(np.percentile(times, 95)) if times.size else float("nan")
    summary["queries"] = len(queries)
    summary["answerable"] = len(answerable)
    summary["misses"] = len(misses)
    return NotesRun(
        name=name,
        ranked=files,
        flagged={q.qid: bool(flags.get(q.qid, False)) for q in queries},
        empty=empty,
        latency_ms=dict(latency_ms or {}),
        per_query=per_query,
        summary=summary,
        config=config,
        chunks=None if chunks is None else {q: list(v) for q, v in chunks.items()},
    )


def notes_table(runs: Iterable[NotesRun]) -> pl.DataFrame:
    """One row per configuration or system: every summary figure, rounded for reading."""
    import polars as pl

    rows = []
    for run in runs:
        row: dict[str, Any] = {}
        for key, value in run.row().items():
            if isinstance(value, float):
                value = round(value, 1) if key.endswith("_ms") else round(value, 4)
            row[key] = value
        rows.append(row)
    return pl.DataFrame(rows)


#: The columns :func:`printable` shows, when present.
SHOWN = (
    "config",
    "system",
    "hit@1",
    "hit@5",
    "hit@10",
    "mrr@10",
    *(f"{kind}_hit@1" for kind in ANSWERABLE_KINDS),
    "miss_flag",
    "miss_empty",
    "false_flags",
    "p50_ms",
    "p95_ms",
)


def printable(table: pl.DataFrame) -> pl.DataFrame:
    """The main columns of a notes table, latency as text with one decimal (for ``to_markdown``)."""
    import polars as pl

    frame = table.select([c for c in SHOWN if c in table.columns])
    timings = [c for c in frame.columns if c.endswith("_ms")]
    return frame.with_columns(
        [pl.col(c).map_elements(lambda v: f"{v:.1f}", return_dtype=pl.Utf8) for c in timings]
    )


@dataclass
class NotesResult:
    """Everything one :func:`evaluate_notes` call measured."""

    corpus: str
    queries_path: str
    split: str
    model: str
    fingerprint: str
    device: str
    k: int
    store: StoreInfo
    queries: list[NotesQuery]
    runs: dict[str, NotesRun]
    wall_s: float
    limits: dict[str, int | None] = field(default_factory=dict)

    def table(self) -> pl.DataFrame:
        """One row per configuration: file-level metrics, miss flags, latency."""
        return notes_table(self.runs.values())

    def describe(self) -> str:
        """One line: corpus, queries by kind, store, model."""
        kinds = ", ".join(
            f"{sum(q.kind == kind for q in self.queries)} {kind}"
            for kind in KINDS
            if any(q.kind == kind for q in self.queries)
        )
        how = "reused" if self.store.reused else f"built in {self.store.build_s:.1f} s"
        return (
            f"{self.corpus}: {self.store.documents} files, {self.store.items} chunks (store {how}); "
            f"{len(self.queries)} {self.split} queries ({kinds}); model {self.model} on {self.device}; "
            f"k={self.k}; wall {self.wall_s:.1f} s"
        )

    def to_dict(self, per_query: bool = True) -> dict[str, Any]:
        """JSON-ready: settings, store, and per configuration its summary (and per-query rows)."""
        configs: dict[str, Any] = {}
        for name, run in self.runs.items():
            entry: dict[str, Any] = {"summary": run.summary}
            if run.config is not None:
                entry["pipeline"] = {
                    key: (list(value) if isinstance(value, tuple) else value)
                    for key, value in dataclasses.asdict(run.config).items()
                }
            if per_query:
                entry["per_query"] = per_query_rows(run, self.queries)
            configs[name] = entry
        store = dataclasses.asdict(self.store)
        store["path"] = str(store["path"])
        return {
            "corpus": self.corpus,
            "queries": self.queries_path,
            "split": self.split,
            "model": self.model,
            "fingerprint": self.fingerprint,
            "device": self.device,
            "k": self.k,
            "limits": self.limits,
            "store": store,
            "wall_s": round(self.wall_s, 2),
            "configs": configs,
        }


def per_query_rows(run: NotesRun, queries: Sequence[NotesQuery]) -> list[dict[str, Any]]:
    """One dict per query: kind, metrics (answerable), flag, empty, latency, top files."""
    rows = []
    for q in queries:
        rows.append(
            {
                "qid": q.qid,
                "kind": q.kind,
                **run.per_query.get(q.qid, {}),
                "flagged": run.flagged.get(q.qid, False),
                "empty": run.empty.get(q.qid, True),
                "latency_ms": run.latency_ms.get(q.qid),
                "files": run.ranked.get(q.qid, []),
            }
        )
    return rows


def corpus_files(corpus: Path) -> list[Path]:
    """The files ``Memory.index(corpus)`` would read, in its order."""
    return list(walk(corpus))


def _corpus_hash(corpus: Path, files: Sequence[Path]) -> str:
    digest = hashlib.sha256(str(corpus).encode())
    for file in files:
        digest.update(file.relative_to(corpus).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(file.read_bytes()).digest())
    return digest.hexdigest()[:16]


def _slice_files(corpus: Path, queries: Sequence[NotesQuery], limit: int) -> list[Path]:
    # The target files first (so every answer can be found), then the others in walk order.
    everything = corpus_files(corpus)
    targets = {t for q in queries for t in q.targets}
    first = [f for f in everything if f.relative_to(corpus).as_posix() in targets]
    rest = [f for f in everything if f.relative_to(corpus).as_posix() not in targets]
    return (first + rest)[: max(limit, len(first))]


def build_notes_store(
    corpus: Path,
    files: Sequence[Path] | None,
    embedder: Embedder,
    path: Path,
    log: LogFn | None = None,
) -> StoreInfo:
    """Index ``corpus`` (or only ``files`` in it) into a new store at ``path`` with ``Memory.index``."""
    started = time.perf_counter()
    embedded_before = getattr(embedder, "embedded", 0)
    if log:
        log(f"indexing {corpus} into {path.name}")
    with Memory(path, embedder=embedder, namespace=_NAMESPACE, refine="inline") as mem:
        targets = [str(f) for f in files] if files is not None else [str(corpus)]
        report = mem.index(*targets, namespace=_NAMESPACE)
        items = item_rows.live_count(mem.db)
    if log:
        log(report.summary().replace("\n", "; "))
    return StoreInfo(
        path=path,
        documents=report.files_changed,
        items=items,
        reused=False,
        build_s=time.perf_counter() - started,
        embedded=getattr(embedder, "embedded", 0) - embedded_before,
        skipped_empty=len(report.skipped),
    )


def prepare_notes_store(
    corpus: Path,
    embedder: Embedder,
    files: Sequence[Path] | None = None,
    cache: bool = True,
    workdir: Path | None = None,
    log: LogFn | None = None,
) -> StoreInfo:
    """A store holding the indexed notes: from the evaluation store cache when possible.

    A store is reused only when the corpus (its absolute path, every file's relative path and
    content), the model fingerprint, the slice, the schema version and the memory/store/ingest
    code are the same (:func:`nbmemory.eval.cache.store_key`). A new store replaces the cached one
    of the same folder, model and slice.
    """
    name = _dataset_name(corpus)
    if not cache:
        folder = workdir or Path(tempfile.mkdtemp(prefix="nbmemory-eval-"))
        return build_notes_store(corpus, files, embedder, folder / f"{name}.duckdb", log)
    chosen = list(files) if files is not None else corpus_files(corpus)
    # Notes change over time: a store of older notes (or older code) at the same place is replaced.
    settings = {"folder": str(corpus), "files": "all" if files is None else len(chosen)}
    return cached_store(
        name,
        _corpus_hash(corpus, chosen),
        embedder.fingerprint,
        settings,
        lambda path: build_notes_store(corpus, files, embedder, path, log),
        meta={"model": embedder.name},
        log=log,
    )


def _dataset_name(corpus: Path) -> str:
    # "notes-<parent>-<folder>": a corpus folder is often called just "corpus" or "notes".
    return re.sub(r"[^A-Za-z0-9._-]+", "_", "notes-" + "-".join(corpus.parts[-2:]))


def relative_source(source: str | None, corpus: Path) -> str:
    """A hit's source file as a path relative to the corpus folder (posix separators)."""
    if not source:
        return ""
    path = Path(source)
    try:
        return path.relative_to(corpus).as_posix()
    except ValueError:
        return path.as_posix()


def run_notes_config(
    mem: Memory,
    name: str,
    config: PipelineConfig,
    queries: Sequence[NotesQuery],
    corpus: Path,
    k: int = 10,
    fetch_k: int | None = None,
) -> NotesRun:
    """Search every query with one configuration, turn chunk hits into files, and score.

    Parameters
    ----------
    k:
        Files per query that are scored.
    fetch_k:
        Chunks asked of ``Memory.search`` (default ``3 * k``, so ``k`` distinct files are
        usually there when notes are cut into several chunks).
    """
    fetch = fetch_k or 3 * k
    ranked: dict[str, list[str]] = {}
    chunks: dict[str, list[str]] = {}
    flagged: dict[str, bool] = {}
    latency: dict[str, float] = {}
    if queries:
        # One untimed search first: model and code paths warm up outside the figures.
        mem.search(queries[0].query, k=fetch, config=config, log=False)
    for q in queries:
        started = time.perf_counter()
        result = mem.search(q.query, k=fetch, config=config, log=False)
        latency[q.qid] = (time.perf_counter() - started) * 1000
        sources = [relative_source(hit.source, corpus) for hit in result.hits]
        chunks[q.qid] = sources
        ranked[q.qid] = list(dict.fromkeys(sources))[:k]
        flagged[q.qid] = bool(result.rejected)
    return score_run(name, queries, ranked, flagged, latency, k=k, config=config, chunks=chunks)


def _stderr(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def evaluate_notes(
    corpus: str | os.PathLike[str],
    queries: str | os.PathLike[str] | Sequence[NotesQuery],
    configs: str | Sequence[str] | Mapping[str, PipelineConfig] | None = None,
    *,
    split: str = "dev",
    model: str | None = None,
    device: str | None = None,
    embedder: Embedder | None = None,
    k: int = 10,
    fetch_k: int | None = None,
    limit_queries: int | None = None,
    limit_files: int | None = None,
    cache: bool = True,
    torch_threads: int | None = None,
    log: LogFn | None = _stderr,
) -> NotesResult:
    """Evaluate search configurations on a notes folder with judged queries, file by file.

    Parameters
    ----------
    corpus:
        The notes folder, indexed with ``Memory.index``.
    queries:
        A queries JSONL file (see the module docstring) or loaded :class:`NotesQuery` objects.
    configs:
        Names (``"bm25,vector,rrf,default"``, ``"all"``) or ``{name: PipelineConfig}``, as
        for :func:`nbmemory.eval.harness.evaluate_beir`.
    split:
        ``dev`` (default), ``test`` or ``all``: which queries of the file are run.
    model, device, embedder:
        The embedding model (default the bundled all-MiniLM-L6-v2; ``"fake"`` for plumbing),
        its device, or a ready embedder.
    k, fetch_k:
        Files scored per query, chunks fetched per query (default ``3 * k``).
    limit_queries, limit_files:
        A quick slice: the first N queries of the split, and at most N files of the corpus
        (their target files first). Figures from a slice are not comparable with full runs.
    cache:
        Reuse cached vectors and indexed stores (see :mod:`nbmemory.eval.cache`).
    torch_threads:
        torch intra-op threads (1 keeps latency meaningful on a shared machine).
    log:
        Progress lines (default stderr); ``None`` for silence.

    Returns
    -------
    NotesResult
    """
    started = time.perf_counter()
    if k <= 0:
        raise ConfigError(f"k must be greater than 0, got {k}")
    for what, value in (("limit_queries", limit_queries), ("limit_files", limit_files)):
        if value is not None and value <= 0:
            raise ConfigError(f"{what} must be greater than 0, got {value}")
    # abspath, not resolve(): ".." is folded (one cache key per folder) and symlinks stay as the user named them.
    root = Path(os.path.abspath(Path(corpus).expanduser()))
    if not root.is_dir():
        raise ConfigError(f"notes folder {root} not found: pass the folder the query targets are relative to")
    named = resolve_configs(configs)
    if isinstance(queries, (str, os.PathLike)):
        queries_path = str(queries)
        loaded = load_queries(queries, split, corpus=root)
    else:
        queries_path = "<given>"
        loaded = [q for q in queries if split in ("all", q.split)]
        if not loaded:
            raise ConfigError(f"no queries in split {split!r}")
    if limit_queries is not None:
        loaded = loaded[:limit_queries]
    files = _slice_files(root, loaded, limit_files) if limit_files is not None else None
    set_torch_threads(torch_threads)
    inner = embedder or make_embedder(model, device)
    wrapped: Embedder = CachedEmbedder(inner, _dataset_name(root), log=log) if cache else inner
    workdir = None if cache else Path(tempfile.mkdtemp(prefix="nbmemory-eval-"))
    runs: dict[str, NotesRun] = {}
    try:
        info = prepare_notes_store(root, wrapped, files, cache=cache, workdir=workdir, log=log)
        with Memory(info.path, embedder=wrapped, namespace=_NAMESPACE) as mem:
            # An untimed pass with both retrievers loads the index pages every configuration touches.
            warm = PipelineConfig(retrievers=("bm25", "vector"))
            for q in loaded:
                mem.search(q.query, k=fetch_k or 3 * k, config=warm, log=False)
            for name, config in named.items():
                runs[name] = run_notes_config(mem, name, config, loaded, root, k=k, fetch_k=fetch_k)
                if log:
                    s = runs[name].summary
                    log(f"{name}: hit@1 {s['hit@1']:.3f} mrr@10 {s['mrr@10']:.3f} p50 {s['p50_ms']:.1f} ms")
    finally:
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
    return NotesResult(
        corpus=str(root),
        queries_path=queries_path,
        split=split,
        model=inner.name,
        fingerprint=inner.fingerprint,
        device=str(getattr(inner, "device", "cpu")),
        k=k,
        store=info,
        queries=loaded,
        runs=runs,
        wall_s=time.perf_counter() - started,
        limits={"queries": limit_queries, "files": limit_files},
    )
