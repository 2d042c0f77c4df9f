"""What a search returns: :class:`SearchResult` (hits, best first, and the trace), and the hits
made from stored rows (:func:`hydrate`), each with a snippet cut around the query."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any

from nbmemory.items import Hit
from nbmemory.own_output import mimebundle
from nbmemory.search.trace import Stage, Trace
from nbmemory.store.db import Database
from nbmemory.store.rows import HitRow, fetch_rows

if TYPE_CHECKING:
    import polars as pl

SNIPPET_CHARS = 240


@dataclass
class SearchResult:
    """Hits, best first, plus the trace of how they were ranked."""

    query: str
    hits: list[Hit]
    trace: Trace
    rejected: bool = False
    reason: str = ""

    @property
    def fusion(self) -> Stage | None:
        """The fusion stage of the trace (``convex`` or ``rrf``), None for one retriever."""
        return self.trace.stage("convex") or self.trace.stage("rrf")

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter(self.hits)

    def __len__(self) -> int:
        return len(self.hits)

    def __getitem__(self, i: int) -> Hit:
        return self.hits[i]

    @property
    def ids(self) -> list[int]:
        return [h.id for h in self.hits]

    def parts(self) -> dict[int, dict[str, float]]:
        """Each hit's score as the named parts the pipeline added (:meth:`Trace.parts`), which sum
        to ``hit.score``: ``bm25`` (keyword share), ``cosine``, ``passage`` (what the best passage
        raised the cosine by), ``identifier`` (the identifier lean's extra keyword weight), and
        the later stages' own (``recency``, ``importance``, ...) when they ran."""
        return {h.id: self.trace.parts(h.id) for h in self.hits}

    def explain(self, top: int = 10) -> str:
        return self.trace.explain(top)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> tuple[dict[str, str], dict[str, Any]]:
        # Shown in a notebook, it is nbmemory's own output: indexing the notebook leaves it out.
        return mimebundle(self, "SearchResult")

    def to_polars(self) -> pl.DataFrame:
        import polars as pl

        rows = []
        for rank, h in enumerate(self.hits, start=1):
            rows.append(
                {
                    "rank": rank,
                    "id": h.id,
                    "score": h.score,
                    "bm25_rank": h.ranks.get("bm25"),
                    "vector_rank": h.ranks.get("vector"),
                    "source": h.source,
                    "location": h.location,
                    "heading": h.heading,
                    "kind": h.kind,
                    "namespace": h.namespace,
                    "tags": h.tags,
                    "event_at": h.event_at,
                    "speaker": h.speaker,
                    "conversation": h.conversation,
                    "snippet": h.snippet,
                    "text": h.text,
                }
            )
        schema: dict[str, Any] = {
            "rank": pl.Int64,
            "id": pl.Int64,
            "score": pl.Float64,
            "bm25_rank": pl.Int64,
            "vector_rank": pl.Int64,
            "source": pl.Utf8,
            "location": pl.Utf8,
            "heading": pl.Utf8,
            "kind": pl.Utf8,
            "namespace": pl.Utf8,
            "tags": pl.List(pl.Utf8),
            "event_at": pl.Datetime("us"),
            "speaker": pl.Utf8,
            "conversation": pl.Utf8,
            "snippet": pl.Utf8,
            "text": pl.Utf8,
        }
        return pl.DataFrame(rows, schema=schema)


@functools.lru_cache(maxsize=4096)
def _short_path(source: str) -> tuple[str, str]:
    """(file name, its last two parts): cached, an explanation names the same files search after search."""
    path = PurePath(source)
    return path.name, "/".join(path.parts[-2:])


def place(row: HitRow) -> str:
    """Where a chunk is, short, for an explanation: ``git/undo.md:3-20``, ``ops/deploy.ipynb, cell 4``
    (cells count from 1), ``papers/x.pdf, page 3``, ``kernel-2.ipynb, In [5]``, a chat's message
    ``team.chat, message 4 (Jupyternaut)`` (from 1, deleted ones not counted) or ``(remembered)``."""
    if row.source is None:
        return "(remembered)"
    name, where = _short_path(row.source)
    if row.cell_index is not None and row.kind == "chat":
        return f"{name}, message {row.cell_index + 1}" + (f" ({row.speaker})" if row.speaker else "")
    if row.cell_index is not None and row.cell_id == f"in-{row.cell_index}":
        return f"{name}, In [{row.cell_index}]"
    if row.cell_index is not None:
        return f"{where}, cell {row.cell_index + 1}"
    if row.page is not None:
        return f"{where}, page {row.page}"
    if row.line_start is not None:
        end = f"-{row.line_end}" if row.line_end and row.line_end != row.line_start else ""
        return f"{where}:{row.line_start}{end}"
    return where


def snippet(text: str, query: str | list[str], width: int = SNIPPET_CHARS) -> str:
    """A window of ``text`` around the first query word it contains (``query``: the text, or
    its words as :func:`snippet_words` gives them)."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    words = snippet_words(query) if isinstance(query, str) else query
    lower = flat.lower()
    positions = [p for p in (lower.find(w) for w in words) if p >= 0]
    start = max(0, min(positions) - width // 4) if positions else 0
    piece = flat[start : start + width]
    return ("…" if start > 0 else "") + piece + ("…" if start + width < len(flat) else "")


def snippet_words(query: str) -> list[str]:
    """The words of ``query`` a snippet is cut around: three characters or more, lower-cased."""
    return re.findall(r"\w{3,}", query.lower())


def hydrate(
    db: Database,
    ranked: Sequence[tuple[int, float]],
    query: str,
    ranks: Mapping[str, Mapping[int, int]],
    scores: Mapping[str, Mapping[int, float]],
    rows: Mapping[int, HitRow] | None = None,
) -> list[Hit]:
    """Hits for ``ranked`` in its order, from the items' live rows (deleted items are left out).

    Parameters
    ----------
    ranked:
        (item id, score) best first.
    query:
        The text the snippets are cut around.
    ranks, scores:
        Retriever -> item -> its rank there, and its score there (``Hit.ranks``,
        ``Hit.retriever_scores``).
    rows:
        Rows already read (a pipeline's candidates); the others are fetched.
    """
    if not ranked:
        return []
    by_id: dict[int, HitRow] = dict(rows) if rows is not None else {}
    missing = [i for i, _ in ranked if i not in by_id]
    if missing:
        by_id.update(fetch_rows(db, missing, HitRow))
    hits = []
    words = snippet_words(query)
    for doc, score in ranked:
        row = by_id.get(doc)
        if row is None:
            continue
        hits.append(
            Hit(
                id=doc,
                score=score,
                text=row.text,
                snippet=snippet(row.text, words),
                source=row.source,
                kind=row.kind,
                namespace=row.namespace,
                heading=row.heading or "",
                cell_id=row.cell_id,
                cell_index=row.cell_index,
                line_start=row.line_start,
                line_end=row.line_end,
                page=row.page,
                tags=list(row.tags or []),
                importance=float(row.importance),
                updated_at=row.updated_at,
                event_at=row.event_at,
                speaker=row.speaker,
                conversation=row.conversation,
                ranks={n: r[doc] for n, r in ranks.items() if doc in r},
                retriever_scores={n: s[doc] for n, s in scores.items() if doc in s},
            )
        )
    return hits
