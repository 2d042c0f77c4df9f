"""Conversation turns in fusion: a turn is read with the turns around it, and a question that
names a speaker is about what that speaker said.

A turn stored on its own ("Caroline: Yes, last Friday!") often holds the answer while the turn
before it holds the question's words ("Melanie: When did you go to the support group?"). So
when candidates are turns (items with a ``conversation``), each one's keyword share gains a part
of its best neighbour's (:data:`CONTEXT_SHARE`): the turn right before and right after it in its
conversation, ordered by event time, then by when they were stored. The neighbours come in as
candidates too, so a turn that holds none of the question's words can still be found by them.

Agents record who said a turn (``speaker``). A question that names exactly one of the speakers
of the candidates ("When did Caroline go to the support group?") gains that speaker's turns
:data:`SPEAKER_GAIN` on the fused scale: the name in the text of every turn that addresses her
says little, the speaker field says who said it.

How much say the vector side has over turns is read from the query's own candidates, not fixed:
each retriever is weighted by how clearly it separates its best turn from the rest
(:func:`separation`, the best score's distance from the mean of the next ones in their standard
deviations), so ``vector_weight = z_vector / (z_vector + z_bm25)``. The cosines of a question to
the short turns of one conversation are high and flat, while BM25 picks out the turn holding its
words. Over notes the fixed weight chosen on notes ranks better (docs/evaluation/conversations.md
says by how much), so documents keep it.

Items without a conversation (notes, notebooks, documents) are untouched: a search of them ranks
as before, and no statement is run for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from nbmemory.store.db import Database
from nbmemory.store.rows import HitRow, fetch_rows

#: The share of its best neighbour's keyword share a turn gains (chosen on three of the five
#: development conversations, reported on the other two: docs/evaluation/conversations.md).
CONTEXT_SHARE = 0.5
#: What a turn by the speaker a question names gains on the fused scale (chosen likewise).
SPEAKER_GAIN = 0.2
#: How many of a retriever's best scores :func:`separation` reads.
SEPARATION_DEPTH = 50
_WORD = re.compile(r"\w+")


@dataclass
class Turns:
    """The conversation context of a search's candidates.

    ``neighbours``: turn -> the turns right before and after it in its conversation;
    ``speaker``: turn -> who said it (turns with a speaker only); ``named``: the one speaker the
    query names, or None.
    """

    neighbours: dict[int, tuple[int, ...]] = field(default_factory=dict)
    speaker: dict[int, str] = field(default_factory=dict)
    named: str | None = None

    @property
    def members(self) -> set[int]:
        """Every turn this context knows: the candidates that are turns and their neighbours."""
        return set(self.neighbours) | {j for around in self.neighbours.values() for j in around}

    def added(self, candidates: Iterable[int]) -> list[int]:
        """The neighbours of ``candidates`` that are not candidates themselves, in order."""
        have = set(candidates)
        out: dict[int, None] = {}
        for i in list(have):
            for j in self.neighbours.get(i, ()):
                if j not in have:
                    out[j] = None
        return sorted(out)

    def context(self, lexical: Mapping[int, float]) -> dict[int, float]:
        """What each turn's keyword share gains from its best neighbour's (non-zero gains only)."""
        gains: dict[int, float] = {}
        for i, around in self.neighbours.items():
            best = max((lexical.get(j, 0.0) for j in around), default=0.0)
            if best > 0:
                gains[i] = CONTEXT_SHARE * best
        return gains

    def speaker_gain(self, items: Iterable[int]) -> dict[int, float]:
        """:data:`SPEAKER_GAIN` for each of ``items`` said by the speaker the query names."""
        if self.named is None:
            return {}
        return {i: SPEAKER_GAIN for i in items if self.speaker.get(i) == self.named}


def separation(scores: Iterable[float]) -> float:
    """How far the best of ``scores`` stands out: its distance from the mean of the next
    :data:`SEPARATION_DEPTH` - 1 best, in their standard deviations (0 for fewer than three)."""
    best = np.sort(np.fromiter(scores, dtype=np.float64))[::-1][:SEPARATION_DEPTH]
    if len(best) < 3:
        return 0.0
    rest = best[1:]
    spread = float(rest.std())
    if spread <= 1e-9 * max(1.0, abs(float(best[0]))):
        return 0.0  # equal scores (rounding aside): nothing stands out
    return max(0.0, float(best[0] - rest.mean()) / spread)


def vector_weight(cosine: Mapping[int, float], lexical: Mapping[int, float], turns: Iterable[int], default: float) -> float:
    """The vector side's weight over ``turns``: ``z_vector / (z_vector + z_bm25)`` of their
    scores (:func:`separation`), or ``default`` when neither separates any."""
    ids = list(turns)
    z_vector = separation(cosine[i] for i in ids if i in cosine)
    # A turn holding no query word scores 0 on the keyword side: one turn alone holding them is
    # the clearest separation there is, not none.
    z_bm25 = separation(lexical.get(i, 0.0) for i in ids)
    if z_vector + z_bm25 <= 0:
        return default
    return z_vector / (z_vector + z_bm25)


def named_speaker(query: str, speakers: Iterable[str]) -> str | None:
    """The one of ``speakers`` the query names (the whole name or its first word, as a word,
    case aside), or None when it names none or several."""
    words = {w.lower() for w in _WORD.findall(query)}
    text = " ".join(_WORD.findall(query.lower()))
    found = []
    for name in sorted(set(speakers)):
        parts = _WORD.findall(name.lower())
        if not parts:
            continue
        whole = " ".join(parts)
        if parts[0] in words or re.search(rf"\b{re.escape(whole)}\b", text):
            found.append(name)
    return found[0] if len(found) == 1 else None


def turns_of(db: Database, query: str, candidates: list[int]) -> Turns | None:
    """The context of those ``candidates`` that are conversation turns, or None when none is."""
    rows = fetch_rows(db, candidates, HitRow)
    conversations = {(r.namespace, r.conversation) for r in rows.values() if r.conversation is not None and r.conversation}
    if not conversations:
        return None
    wanted = sorted(i for i, r in rows.items() if r.conversation)
    turns = Turns(neighbours=_neighbours(db, conversations, wanted))
    around = {j for js in turns.neighbours.values() for j in js}
    more = fetch_rows(db, sorted(around - set(rows)), HitRow)
    turns.speaker = {i: r.speaker for i, r in {**rows, **more}.items() if r.speaker}
    turns.named = named_speaker(query, turns.speaker.values())
    return turns


def _neighbours(db: Database, conversations: set[tuple[str, str]], ids: list[int]) -> dict[int, tuple[int, ...]]:
    """Turn -> the live turns right before and after it in its conversation (by event time, then
    by when they were stored), for each of ``ids``."""
    namespaces = sorted({ns for ns, _ in conversations})
    names = sorted({c for _, c in conversations})
    found = db.fetchall(
        """
        SELECT id, prev, next FROM (
            SELECT id, lag(id) OVER w AS prev, lead(id) OVER w AS next FROM chunks
            WHERE deleted_at IS NULL AND namespace IN (SELECT unnest(?::VARCHAR[]))
              AND conversation IN (SELECT unnest(?::VARCHAR[]))
            WINDOW w AS (PARTITION BY namespace, conversation ORDER BY coalesce(event_at, created_at), seq)
        ) WHERE id IN (SELECT unnest(?::BIGINT[]))
        """,
        [namespaces, names, ids],
    )
    return {int(i): tuple(int(j) for j in (prev, nxt) if j is not None) for i, prev, nxt in found}
