"""The memory diagnostics notebook's work on a person's own memory: which queries to look at,
what the memory returns for them, and, where judgments exist, what of it is relevant.

* :func:`open_memory`: the default memory (or a given file) through :func:`nbmemory.remote.connect`,
  or the bundled sample memory when that memory is missing or empty.
* :func:`queries_to_check`: the memory's own search log when this process can read it, else probe
  queries made from the memory's items and a few off-topic ones.
* :func:`run_queries`: one row per hit (fused rank, each retriever's rank and raw score, cosine,
  tier) and per query (would the no-answer flag mark it), searched with ``log=False``: the
  diagnostics leave no trace in the search log or the retrieval counters.
* :func:`judged_queries`: the sample corpus's built-in queries and a person's own JSONL of judged
  queries, scored into the frame shape :mod:`nbmemory.eval.diagnostics` draws curves from.

Nothing here changes what live search uses.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl

from nbmemory.errors import BadFileError, NotFoundError
from nbmemory.store import search_log

#: Queries no memory of work notes should answer: what the no-answer flag is for.
OFF_TOPIC = (
    "sourdough starter hydration for a rye loaf",
    "who won the 1962 world cup final",
    "best time of year to plant tulip bulbs",
    "how many moons does neptune have",
    "knitting pattern for a cable scarf",
)
SAMPLE_NAMESPACE = "demo"


@dataclass
class Opened:
    """The memory the notebook looks at: ``memory`` (a :class:`~nbmemory.remote.shared.SharedMemory`),
    its file, whether it is the bundled sample memory, the namespace searched (None: all) and a
    sentence saying which it is and why."""

    memory: Any
    path: Path
    sample: bool
    namespace: str | None
    about: str


def _items(memory: Any) -> int:
    return int(memory.stats().get("items", 0))


def open_memory(path: str | os.PathLike[str] | None = None, sample_home: str | None = None) -> Opened:
    """The memory at ``path`` (default: the person's default memory), or the sample memory.

    The default memory is never created here: when its file is missing, or holds no item, the
    bundled sample memory (``<home>/demo.duckdb``, what ``nbmemory demo`` builds) is used instead,
    and built from the sample corpus when it is not there yet. A ``path`` that was given but does
    not exist is an error (a typo should not silently show the sample).
    """
    from nbmemory.config import Settings
    from nbmemory.remote import connect

    settings = Settings(home=Path(sample_home)) if sample_home else Settings()
    if path is not None:
        target = Path(path).expanduser()
        if not target.is_file():
            raise NotFoundError(f"memory file {target} not found: set memory_path to a .duckdb file, or None")
        memory = connect(target)
        count = _items(memory)
        return Opened(memory, target, False, None, f"your memory {target}: {count:,} items")
    target = settings.db_path
    why = f"your default memory {target} does not exist yet"
    if target.is_file():
        memory = connect(target)
        count = _items(memory)
        if count:
            return Opened(memory, target, False, None, f"your default memory {target}: {count:,} items")
        memory.close()
        why = f"your default memory {target} holds no item yet"
    return _sample_memory(settings, why)


def _sample_memory(settings: Any, why: str) -> Opened:
    from nbmemory.demo import SAMPLE_CORPUS
    from nbmemory.remote import connect

    target = settings.home / "demo.duckdb"
    memory = connect(target)
    built = ""
    if not memory.stats().get("items"):
        print(
            f"indexing the bundled sample corpus into {target} (once; the first time embeds it)", flush=True
        )
        report = memory.index(SAMPLE_CORPUS, namespace=SAMPLE_NAMESPACE)
        built = f", built now ({report.summary().splitlines()[0]})"
    count = _items(memory)
    about = f"{why}: showing the bundled sample memory {target} ({count:,} items{built})"
    return Opened(memory, target, True, SAMPLE_NAMESPACE, about)


# -- which queries ------------------------------------------------------------------------------


def logged_queries(memory: Any, limit: int = 200) -> list[str] | None:
    """The most recent distinct queries of the memory's search log, newest first.

    None when this process is a client of another owner (the Jupyter server, ``nbmemory serve``):
    the log lives in the owner's process and no memory operation reads it.
    """
    local = getattr(memory, "memory", None)
    if local is None:
        return None
    local.flush()
    return [str(q) for q in search_log.recent_queries(local.db, limit)]


def _probe_text(heading: str, text: str, words: int = 8) -> str:
    if heading and len(heading.split()) >= 2:
        return heading.strip()[:200]
    found = re.findall(r"[A-Za-z][A-Za-z0-9_'-]+", text)
    return " ".join(found[:words])


def probe_queries(memory: Any, count: int = 40, namespace: str | None = None) -> list[str]:
    """Queries made from the memory's own items: one per source (a heading, else the first words)."""
    with tempfile.TemporaryDirectory(prefix="nbmemory-diagnostics-") as tmp:
        out = Path(tmp) / "items.parquet"
        memory.export(out)
        items = pl.read_parquet(out)
    if namespace is not None:
        items = items.filter(pl.col("namespace") == namespace)
    if items.height == 0:
        return []
    first = items.sort("id").unique(subset=["source"], keep="first", maintain_order=True)
    step = max(1, first.height // count)
    picked: list[str] = []
    for row in first.gather_every(step).head(count).iter_rows(named=True):
        text = _probe_text(str(row.get("heading") or ""), str(row.get("text") or ""))
        if len(text.split()) >= 2 and text not in picked:
            picked.append(text)
    return picked


def queries_to_check(opened: Opened, count: int = 40) -> pl.DataFrame:
    """``query, origin``: the search log's recent queries (origin ``search log``) when there are
    any and this process can read them, else probes (``probe from an item``), and always the
    off-topic probes (``off-topic probe``). A sentence on which was used is printed."""
    logged = logged_queries(opened.memory)
    rows: list[dict[str, str]] = []
    if logged:
        rows += [{"query": q, "origin": "search log"} for q in logged[:count]]
        print(
            f"{len(rows)} queries from the memory's search log (its most recent distinct ones, at most {count})"
        )
    else:
        why = (
            "this kernel is a client of the process that owns the memory, which keeps the search log"
            if logged is None
            else "the memory's search log is empty"
        )
        probes = probe_queries(opened.memory, count, opened.namespace)
        rows += [{"query": q, "origin": "probe from an item"} for q in probes]
        print(f"no search log to read ({why}): {len(probes)} probe queries made from the memory's items")
    rows += [{"query": q, "origin": "off-topic probe"} for q in OFF_TOPIC]
    return pl.DataFrame(rows)


# -- what the memory returns ---------------------------------------------------------------------


def run_queries(
    opened: Opened, queries: pl.DataFrame, k: int = 20, judge: Any = None
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Search every query (``log=False``) and return ``(hits, verdicts)``.

    ``hits``: ``query, origin, rank, bm25_rank, vector_rank, cosine, bm25, tier, source, relevant``
    (``relevant`` from ``judge(row, hit)`` when given, else null). ``verdicts``: per query, whether
    the no-answer flag marks it (``rejected``), its reason, and the best hit's cosine.
    """
    hits: list[dict[str, Any]] = []
    verdicts: list[dict[str, Any]] = []
    for row in queries.iter_rows(named=True):
        result = opened.memory.search(row["query"], k=k, namespace=opened.namespace, log=False)
        for rank, hit in enumerate(result.hits, start=1):
            hits.append(
                {
                    "query": row["query"],
                    "origin": row["origin"],
                    "rank": rank,
                    "bm25_rank": hit.ranks.get("bm25"),
                    "vector_rank": hit.ranks.get("vector"),
                    "cosine": hit.similarity,
                    "bm25": hit.retriever_scores.get("bm25"),
                    "tier": hit.tier,
                    "source": hit.source,
                    "relevant": None if judge is None else int(bool(judge(row, hit))),
                }
            )
        best = max((h.similarity for h in result.hits if h.similarity is not None), default=None)
        verdicts.append(
            {
                "query": row["query"],
                "origin": row["origin"],
                "hits": len(result.hits),
                "rejected": bool(result.rejected),
                "reason": result.reason,
                "best_cosine": best,
            }
        )
    schema = {
        "query": pl.String, "origin": pl.String, "rank": pl.Int64, "bm25_rank": pl.Int64,
        "vector_rank": pl.Int64, "cosine": pl.Float64, "bm25": pl.Float64, "tier": pl.String,
        "source": pl.String, "relevant": pl.Int64,
    }  # fmt: skip
    return pl.DataFrame(hits, schema=schema), pl.DataFrame(verdicts)


# -- judged queries ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Judged:
    """One judged query: its text, where it came from, and what counts as relevant (source paths
    matched by their ending, or item ids)."""

    query: str
    origin: str
    sources: tuple[str, ...] = ()
    ids: tuple[int, ...] = ()

    def relevant(self, hit: Any) -> bool:
        if hit.id in self.ids:
            return True
        source = (hit.source or "").replace("\\", "/")
        return any(source == s or source.endswith("/" + s.lstrip("/")) for s in self.sources)


def sample_judgments() -> list[Judged]:
    """The sample corpus's built-in queries (``DEMO_QUERIES.json``), each with its target file."""
    from nbmemory.demo import SAMPLE_CORPUS, demo_queries

    root = SAMPLE_CORPUS.resolve().as_posix()
    return [Judged(q["query"], "sample corpus", (f"{root}/{q['target']}",)) for q in demo_queries()]


def read_judgments(path: str | os.PathLike[str]) -> list[Judged]:
    """A JSONL of judged queries: one ``{"query": ..., "relevant": [...]}`` per line, each relevant
    entry a file path (or its ending, e.g. ``notes/vpn.md``) or an item id."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise NotFoundError(
            f"judged queries file {file} not found (set judged_queries to a .jsonl file, or None)"
        )
    out = []
    for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as exc:
            raise BadFileError(str(file), f"line {number} is not JSON ({exc})") from exc
        relevant = entry.get("relevant") if isinstance(entry, dict) else None
        if (
            not isinstance(entry, dict)
            or not isinstance(entry.get("query"), str)
            or not isinstance(relevant, list)
        ):
            raise BadFileError(
                str(file), f'line {number}: expected {{"query": "...", "relevant": ["path or id", ...]}}'
            )
        ids = tuple(int(r) for r in relevant if isinstance(r, int) and not isinstance(r, bool))
        sources = tuple(str(r) for r in relevant if isinstance(r, str))
        out.append(Judged(entry["query"], "your judged queries", sources, ids))
    return out


def holds_sample_corpus(opened: Opened) -> bool:
    """Whether the memory holds the sample corpus's files, so its built-in queries can be judged."""
    from nbmemory.demo import SAMPLE_CORPUS

    if opened.sample:
        return True
    probe = opened.memory.search("INC-2307 s3 export 403", k=5, log=False)
    root = SAMPLE_CORPUS.resolve().as_posix()
    return any((h.source or "").startswith(root) for h in probe.hits)


def judged_hits(opened: Opened, judged: Iterable[Judged], k: int = 20) -> pl.DataFrame:
    """Hits of judged queries in the shape :func:`nbmemory.eval.diagnostics.relevance_by_distance`
    and :func:`~nbmemory.eval.diagnostics.relevance_by_rank` read: ``dataset`` (where the
    judgments came from), ``config`` (``fused``, ``bm25``, ``vector``: whose rank ``rank`` is),
    ``rank``, ``vector_sim``, ``relevance``."""
    rows: list[dict[str, Any]] = []
    for j in judged:
        result = opened.memory.search(j.query, k=k, namespace=opened.namespace, log=False)
        for rank, hit in enumerate(result.hits, start=1):
            rel = int(j.relevant(hit))
            base = {"dataset": j.origin, "query_id": j.query, "vector_sim": hit.similarity, "relevance": rel}
            rows.append({**base, "config": "fused", "rank": rank})
            for retriever in ("bm25", "vector"):
                if retriever in hit.ranks:
                    rows.append({**base, "config": retriever, "rank": hit.ranks[retriever]})
    schema = {
        "dataset": pl.String, "query_id": pl.String, "vector_sim": pl.Float64, "relevance": pl.Int64,
        "config": pl.String, "rank": pl.Int64,
    }  # fmt: skip
    return pl.DataFrame(rows, schema=schema)


def found_at(hits: pl.DataFrame, k: Sequence[int] = (1, 3, 10)) -> pl.DataFrame:
    """Per source of judgments: queries, and the share with a relevant hit in the fused top ``k``."""
    fused = hits.filter(pl.col("config") == "fused")
    out = fused.group_by("dataset", "query_id").agg(
        *[(pl.col("relevance").filter(pl.col("rank") <= n).sum() > 0).alias(f"found@{n}") for n in k]
    )
    return out.group_by("dataset").agg(pl.len().alias("queries"), *[pl.col(f"found@{n}").mean() for n in k])
