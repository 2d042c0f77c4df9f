"""Results per note: the best chunk of each source leads, the others ride along.

A user looks for a note, a notebook or a file, not for a chunk of one; five chunks of
``deploy-staging.md`` in a top 5 hide every other answer. Grouping keeps the ranked order of the
best chunk of each source and records the source's other chunks under it ("+N more in this
file"). Remembered items (no source) are groups of one.

:func:`group_by_source` is the rule; :func:`walk` the pipeline's ``dedup`` and ``group`` stages,
one walk down the fused order that stops at the ``k``-th group; :func:`few_sources` tells the
pipeline when to take deeper candidates before fusing.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from typing import TYPE_CHECKING, TypeVar

from nbmemory.search.dedup import Deduper
from nbmemory.search.trace import Stage
from nbmemory.store.rows import HitRow, fetch_rows

if TYPE_CHECKING:
    from nbmemory.search.base import Ranked, Retrieved
    from nbmemory.search.pool import Pool
    from nbmemory.search.trace import Trace
    from nbmemory.store.db import Database

K = TypeVar("K", bound=Hashable)


def group_by_source(
    order: Sequence[tuple[K, float]], source_of: Mapping[K, str | None], k: int
) -> tuple[list[tuple[K, float]], dict[K, list[K]]]:
    """The first ``k`` groups of ``order`` (best first) and, per leader, its source's other ids.

    Parameters
    ----------
    order:
        ``(id, score)`` best first.
    source_of:
        id -> its source path; ``None`` (a remembered item) makes a group of its own.
    k:
        Groups to return; the others' chunks still count as "more" of the groups kept.

    Returns
    -------
    The leaders ``(id, score)`` in order, and ``{leader: [other ids of its source, best first]}``.
    """
    if k <= 0:
        raise ValueError(f"k must be greater than 0, got {k}")
    leaders: list[tuple[K, float]] = []
    leader_of: dict[str, K] = {}
    more: dict[K, list[K]] = {}
    for item, score in order:
        source = source_of.get(item)
        if source is not None and source in leader_of:
            more[leader_of[source]].append(item)
            continue
        if len(leaders) == k:
            continue
        leaders.append((item, score))
        more[item] = []
        if source is not None:
            leader_of[source] = item
    return leaders, more


def walk(
    order: Ranked, pool: Pool, k: int, trace: Trace, *, dedup: bool, group: bool, threshold: float
) -> tuple[Ranked, dict[int, list[int]]]:
    """The ``dedup`` and ``group`` stages in one walk down the fused order, best first, which
    stops at the ``k``-th group (or, without grouping, the ``k``-th item kept): what ranks below
    it is never read. Each stage's trace notes how many candidates it read (``read``).

    With grouping, a candidate whose source already has a leader joins that leader's group;
    dedup (at cosine ``threshold``) only adds it to its order (:meth:`Deduper.add`) and asks
    whether it duplicates an earlier one only if a later candidate matches it. Only the
    candidates that could lead a group (one per source read, plus the duplicates found among
    them) are checked: a notebook's search reads dozens of cells of the few notebooks it shows,
    and checks about ``k``. The leaders are those an offer of every candidate would give.

    Cost: linear in the candidates read (each one's source looked up once, its words and
    vector added to the :class:`Deduper`), plus one product of a possible leader's vector
    with those read before it (about ``k`` of them: linear for a given ``k``); rows, texts
    and vectors are read for the candidates read only, in batches that double (a few
    statements per search when they come from the table). ``Hit.more`` lists a leader's
    other chunks among those read, i.e. those ranked above the ``k``-th leader (those that
    duplicate an earlier chunk included).

    Returns
    -------
    The leaders ``(id, score)`` in order, and ``{leader: [other ids of its source read, best
    first]}`` (empty without grouping).
    """
    deduper = Deduper(threshold) if dedup else None
    dropped: dict[int, tuple[int, float]] = {}
    leaders: Ranked = []
    leader_of: dict[str, int] = {}
    more: dict[int, list[int]] = {}
    dedup_s = group_s = 0.0
    read = 0
    batch = max(2 * k, 32)
    done = False
    while read < len(order) and not done:
        head = order[read : read + batch]
        ids = [i for i, _ in head]
        started = time.perf_counter()
        rows = pool.rows(ids) if group else {}
        sources = {i: row.source for i, row in rows.items()}
        group_s += time.perf_counter() - started
        started = time.perf_counter()
        texts = pool.texts(ids) if deduper is not None else {}
        vecs = pool.vectors(ids) if deduper is not None else {}
        dedup_s += time.perf_counter() - started
        for item, score in head:
            read += 1
            source = sources.get(item)
            if source is not None and source in leader_of:
                # It joins its leader's group whatever it holds: not asked now whether it
                # duplicates an earlier candidate, only if a later one matches it.
                if deduper is not None:
                    started = time.perf_counter()
                    deduper.add(item, texts.get(item, ""), vecs.get(item))
                    dedup_s += time.perf_counter() - started
                more[leader_of[source]].append(item)
                continue
            if deduper is not None:
                started = time.perf_counter()
                match = deduper.offer(item, texts.get(item, ""), vecs.get(item))
                dedup_s += time.perf_counter() - started
                if match is not None:
                    dropped[item] = match
                    continue
            leaders.append((item, score))
            more[item] = []
            if source is not None:
                leader_of[source] = item
            if len(leaders) == k:
                done = True
                break
        batch *= 2
    if deduper is not None:
        stage = trace.add(Stage("dedup", compare_to=trace.stages[-1].name if trace.stages else None))
        stage.ms = dedup_s * 1000
        stage.dropped = {d: f"duplicate of #{keep} (cosine {sim:.3f})" for d, (keep, sim) in dropped.items()}
        stage.output = [i for i, _ in order[:read] if i not in dropped]
        stage.scores = {i: s for i, s in order[:read] if i not in dropped}
        stage.notes = {
            "read": read,
            "checked": deduper.checked,
            "collapsed": len(dropped),
            "threshold": threshold,
        }
    if not group:
        return leaders, {}
    stage = trace.add(Stage("group", compare_to=trace.stages[-1].name if trace.stages else None))
    stage.ms = group_s * 1000
    stage.output = [i for i, _ in leaders]
    stage.scores = dict(leaders)
    stage.notes = {"groups": len(leaders), "read": read - len(dropped), "of": len(order)}
    for leader, others in more.items():
        if others:
            stage.detail[leader] = f"+{len(others)} more in this source"
            for other in others:
                stage.dropped[other] = f"in the same source as #{leader}"
    return leaders, more


def few_sources(db: Database, found: dict[str, Retrieved], k: int, pool_size: int) -> bool:
    """Whether the retrievers' heads (their first ``pool_size // 2`` each, which make most of
    the fused pool) hold fewer than ``k`` sources: then the pool would too, and a pass over
    it would end in a deeper one (cells of a few notebooks fill a notebook memory's heads).
    Taking deeper at once skips that pass; it can only let in candidates ranked deeper.
    Cost: one row lookup per head candidate read, in batches (``2k``, doubling) that stop
    at the ``k``-th source (the head of a memory of short notes holds it within the first batch)."""
    head = list(dict.fromkeys(i for got in found.values() for i in got.ids[: pool_size // 2]))
    if len(head) < k:
        return False  # too few candidates at all: deeper would find no more
    sources: set[object] = set()
    read, batch = 0, 2 * k
    while read < len(head):
        ids = head[read : read + batch]
        rows = fetch_rows(db, ids, HitRow)
        sources.update(rows[i].source if i in rows and rows[i].source else -i for i in ids)
        if len(sources) >= k:
            return False
        read, batch = read + batch, 2 * batch
    return True
