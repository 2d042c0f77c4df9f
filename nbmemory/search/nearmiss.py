"""How close a memory's own notes come to each other: the cosine a question without an answer
in this memory can be expected to reach.

A fixed cosine cannot say "nothing here answers this": the best cosine a question finds grows
with the memory's size and with how closely its notes cluster (a question on a topic the memory
covers around, but not on, finds a neighbour at 0.45 in one memory and at 0.30 in another). So
the memory measures itself. For a sample of its sources (fixed by a hash of their titles and file
names), the source's title (its first heading; sources without one are left out) is asked of
the memory as a query, and the best cosine among the *other* sources' chunks and passages is
kept, leaving out sources closer to the note's own text than its title is (copies of it): what a
short question on that topic finds when the note that answers it is absent. :data:`QUANTILE` of those
is the memory's near-miss cosine; a query whose best cosine falls below it is further from
everything stored than nearly every note of this memory is from its nearest neighbour.

The value is kept in the file's ``meta`` table per model. ``Memory.index`` measures it when it
changed something, and a search measures it again once the number of live chunks has moved by
more than :data:`STALE_SHARE`: :data:`SAMPLE` query embeddings and vector searches, seconds on a
CPU, which is why it is kept rather than measured per search.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass

import numpy as np

from nbmemory.embed.base import Embedder, normalise
from nbmemory.search import hot
from nbmemory.search.vector import nearest, stored
from nbmemory.store import item_rows, passages, search_reads
from nbmemory.store.db import Database
from nbmemory.store.rows import CandidateRow, fetch_rows

#: Titled sources asked of the memory (a fixed sample, by a hash of title and file name).
SAMPLE = 400
#: Below this many sources the sample says too little about the memory: no value.
MIN_SOURCES = 50
#: The share of the sample's best cosines the near-miss cosine is at: 5 %, so a query below it is
#: further from everything stored than 95 % of the memory's own titles are from another note.
QUANTILE = 0.05
#: Chunks of the sample's nearest neighbours read per title (its own source's are left out).
DEPTH = 20
#: A kept value is recomputed once the number of live chunks moved by more than this share.
STALE_SHARE = 0.1
_TITLE_CHARS = 120
#: A title at most this many sources share still names them (a note and its copy, two notes
#: called "README"); one shared more widely is a group's label.
MAX_SHARED_TITLE = 3
#: How the value is measured; a value kept by another method is measured again.
METHOD = 5


@dataclass(frozen=True)
class NearMiss:
    """A memory's near-miss cosine: ``cosine``, the ``quantile`` of the best cosines ``sampled``
    titles found, over ``chunks`` live chunks."""

    cosine: float
    sampled: int
    chunks: int
    quantile: float = QUANTILE
    method: int = METHOD


@dataclass(frozen=True)
class _Unmeasurable:
    """What this process found at ``chunks`` live chunks: too few titled sources (not stored)."""

    chunks: int


def _key(fingerprint: str) -> str:
    return f"near_miss:{fingerprint}"


def forget(db: Database, fingerprint: str) -> None:
    """Drop this model's measured near-miss cosine: the next :func:`near_miss` measures it again
    (after its passages were made another way, say)."""
    key = _key(fingerprint)
    db.cache.pop(key, None)
    db.delete_meta(key)


def near_miss(db: Database, embedder: Embedder) -> NearMiss | None:
    """The memory's near-miss cosine for ``embedder``'s vectors; None for a memory of fewer than
    :data:`MIN_SOURCES` sources."""
    chunks = _live_chunks(db)
    key = _key(embedder.fingerprint)
    cached = db.cache.get(key)
    if isinstance(cached, _Unmeasurable) and _fresh(cached.chunks, chunks):
        return None  # a search without a clear answer must not count the titles each time
    kept = cached if isinstance(cached, NearMiss) else _stored(db, key)
    if (
        kept is not None
        and _fresh(kept.chunks, chunks)
        and (kept.quantile, kept.method) == (QUANTILE, METHOD)
    ):
        db.cache[key] = kept
        return kept
    value = _measure(db, embedder, chunks)
    db.cache[key] = value if value is not None else _Unmeasurable(chunks)
    if value is not None and not db.read_only:
        with db.lock:
            db.set_meta(key, json.dumps(value.__dict__))
    return value


def _fresh(measured_at: int, chunks: int) -> bool:
    return abs(measured_at - chunks) <= STALE_SHARE * max(measured_at, 1)


def _live_chunks(db: Database) -> int:
    # From the memory-resident index when it serves (no statement), else SQL.
    with db.lock:
        index = hot.serving(db)
        if index is not None:
            return int(index.live.sum())
    return item_rows.live_count(db)


def _stored(db: Database, key: str) -> NearMiss | None:
    raw = db.get_meta(key)
    if raw is None:
        return None
    try:
        data = json.loads(raw)
        kept = NearMiss(**data)
    except (TypeError, ValueError):
        return None  # written by another version: measured again
    return kept if {"quantile", "method"} <= set(data) else None


def _titles(db: Database) -> dict[str, tuple[str, int]]:
    """Source -> (its title, its first chunk), for every source of live chunks whose first chunk
    has a heading (a markdown note's H1 or file name, a notebook's or document's first heading).
    Items remembered without one are left out: their first line is most of their text, and the
    same fact remembered several ways would read as a neighbour of every title. So are headings
    more than :data:`MAX_SHARED_TITLE` sources share."""
    rows = search_reads.first_headings(db)
    titles = {}
    for source, heading, first in rows:
        title = (heading or "").split(" > ")[0].strip()
        if title:
            titles[source] = (title[:_TITLE_CHARS], int(first))
    # A heading that many sources share names a group, not a source (a conversation's session
    # and date over each of its turns): asked as a question it finds the group's other members
    # by the heading alone, which says nothing of how close an unanswered question comes.
    holders = Counter(title for title, _ in titles.values())
    return {source: held for source, held in titles.items() if holders[held[0]] <= MAX_SHARED_TITLE}


def _measure(db: Database, embedder: Embedder, chunks: int) -> NearMiss | None:
    titles = _titles(db)
    if len(titles) < MIN_SOURCES:
        return None

    # By a hash of what the sources hold, not where they lie: the same notes in another folder
    # give the same sample.
    def order(source: str) -> bytes:
        key = f"{titles[source][0]}\0{source.rsplit('/', 1)[-1]}"
        return hashlib.blake2b(key.encode(), digest_size=8).digest()

    sample = sorted(titles, key=order)[:SAMPLE]
    with_passages = not passages.none_stored(db, embedder.fingerprint)
    best = []
    for source in sample:
        title, first = titles[source]
        qvec = normalise(embedder.embed_query(title))
        found, _ = nearest(db, qvec, DEPTH, embedder.dim)
        ids = [i for i, _ in found]
        # The rows and vectors come from the copies in memory when they serve, like a search's.
        rows = fetch_rows(db, ids, CandidateRow)
        vecs = stored(db, [*ids, first])
        if first not in vecs:
            continue
        own = normalise(vecs[first])
        # A note closer to this one's text than its own title is holds the same thing (a copy,
        # the same fact written again): its answer is not absent, so it does not count.
        copies = {
            r.source
            for i, r in rows.items()
            if i in vecs and float(normalise(vecs[i]) @ own) >= float(qvec @ own)
        }
        other = {i: r.content_hash for i, r in rows.items() if r.source != source and r.source not in copies}
        cos = {i: 1.0 - d for i, d in found if i in other}
        if with_passages and other:
            for i, c in passages.best(db, embedder.fingerprint, qvec, other).items():
                cos[i] = max(cos[i], c)
        if cos:
            best.append(max(cos.values()))
    if len(best) < MIN_SOURCES:
        return None
    return NearMiss(float(np.quantile(best, QUANTILE)), len(best), chunks, QUANTILE, METHOD)
