"""Results per note: the best chunk of each source leads, the others ride along.

A user looks for a note, a notebook or a file, not for a chunk of one; five chunks of
``deploy-staging.md`` in a top 5 hide every other answer. Grouping keeps the ranked order of the
best chunk of each source and records the source's other chunks under it ("+N more in this
file"). Remembered items (no source) are groups of one.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

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
