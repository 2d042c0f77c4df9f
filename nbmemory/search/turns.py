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

A question that names a date ("in June", "in July 2023", "on October 13, 2023") favours the turns
said then by :data:`DATE_GAIN`, read from their event time: the session a turn was said in is
where its "last week" happened.

Items without a conversation (notes, notebooks, documents) are untouched: a search of them ranks
as before, and no statement is run for them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from nbmemory.search import filter_mask, hot
from nbmemory.search.filters import Filters
from nbmemory.store import search_reads
from nbmemory.store.db import Database
from nbmemory.store.rows import HitRow, fetch_rows

#: The share of its best neighbour's keyword share a turn gains (chosen on three of the five
#: development conversations, reported on the other two: docs/evaluation/conversations.md).
CONTEXT_SHARE = 0.5
#: What a turn by the speaker a question names gains on the fused scale (chosen likewise).
SPEAKER_GAIN = 0.2
#: What a turn said on a date the question names gains (chosen like :data:`SPEAKER_GAIN`).
DATE_GAIN = 0.2
#: How many of a retriever's best scores :func:`separation` reads.
SEPARATION_DEPTH = 50
_WORD = re.compile(r"\w+")


@dataclass
class Turns:
    """The conversation context of a search's candidates.

    ``neighbours``: turn -> the turns right before and after it in its conversation;
    ``speaker``: turn -> who said it (turns with a speaker only); ``named``: the one speaker the
    query names, or None; ``said_at`` and ``dates``: when each turn was said, and the dates the
    query names (:func:`named_dates`).
    """

    neighbours: dict[int, tuple[int, ...]] = field(default_factory=dict)
    speaker: dict[int, str] = field(default_factory=dict)
    named: str | None = None
    #: Turn -> when it was said (turns with an event time only), and the dates the query names.
    said_at: dict[int, datetime] = field(default_factory=dict)
    dates: list[Period] = field(default_factory=list)
    #: Neighbours the search's filters exclude: they play no part.
    excluded: set[int] = field(default_factory=set)

    @property
    def members(self) -> set[int]:
        """Every turn this context knows: the candidates that are turns and their neighbours."""
        return (set(self.neighbours) | {j for around in self.neighbours.values() for j in around}) - self.excluded

    def added(self, candidates: Iterable[int]) -> list[int]:
        """The neighbours of ``candidates`` that are not candidates themselves, in order."""
        have = set(candidates)
        out: dict[int, None] = {}
        for i in list(have):
            for j in self.neighbours.get(i, ()):
                if j not in have and j not in self.excluded:
                    out[j] = None
        return sorted(out)

    def context(self, lexical: Mapping[int, float]) -> dict[int, float]:
        """What each turn's keyword share gains from its best neighbour's (non-zero gains only)."""
        gains: dict[int, float] = {}
        for i, around in self.neighbours.items():
            best = max((lexical.get(j, 0.0) for j in around if j not in self.excluded), default=0.0)
            if best > 0:
                gains[i] = CONTEXT_SHARE * best
        return gains

    def speaker_gain(self, items: Iterable[int]) -> dict[int, float]:
        """:data:`SPEAKER_GAIN` for each of ``items`` said by the speaker the query names."""
        if self.named is None:
            return {}
        return {i: SPEAKER_GAIN for i in items if self.speaker.get(i) == self.named}

    def date_gain(self, items: Iterable[int]) -> dict[int, float]:
        """:data:`DATE_GAIN` for each of ``items`` said on a date the query names."""
        if not self.dates:
            return {}
        return {
            i: DATE_GAIN
            for i in items
            if (when := self.said_at.get(i)) is not None and any(p.holds(when) for p in self.dates)
        }


@dataclass(frozen=True)
class Period:
    """A date a query names, as precise as it was said: a year, a month (of any year when no
    year is said), or a day."""

    year: int | None = None
    month: int | None = None
    day: int | None = None

    def holds(self, when: datetime) -> bool:
        return (
            (self.year is None or when.year == self.year)
            and (self.month is None or when.month == self.month)
            and (self.day is None or when.day == self.day)
        )


#: Month names as a query writes them (:mod:`nbmemory.search.when` reads them too).
MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)  # fmt: skip
_MONTH = "|".join(MONTHS)
# Capitalised month names only: "may" is a verb. "October 13, 2023", "13 October 2023",
# "July 2023", "June", "2023-10-13", "in 2023".
_DATES = re.compile(
    rf"""(?x)
    \b(?P<iso>(?P<iy>(?:19|20)\d\d)-(?P<im>\d\d)-(?P<id>\d\d))\b
    | \b(?P<d1>\d{{1,2}})(?:st|nd|rd|th)?\s+(?P<m1>{_MONTH})\b,?(?:\s+(?P<y1>(?:19|20)\d\d)\b)?
    | \b(?P<m2>{_MONTH})\b(?:\s+(?P<d2>\d{{1,2}})(?:st|nd|rd|th)?\b)?,?(?:\s+(?P<y2>(?:19|20)\d\d)\b)?
    | \b(?P<y3>(?:19|20)\d\d)\b
    """
)


def named_dates(query: str) -> list[Period]:
    """The dates ``query`` names (see :class:`Period`)."""
    out = []
    for m in _DATES.finditer(query):
        if m.group("iso"):
            iso_month, iso_day = int(m.group("im")), int(m.group("id"))
            if 1 <= iso_month <= 12 and 1 <= iso_day <= 31:
                out.append(Period(int(m.group("iy")), iso_month, iso_day))
            continue
        name = m.group("m1") or m.group("m2")
        year = m.group("y1") or m.group("y2") or m.group("y3")
        day = m.group("d1") or m.group("d2")
        before = query[: m.start()].split()[-1:]
        if name == "May" and not (year or day) and [w.lower() for w in before] not in _MAY_AFTER:
            continue  # "May I ask": the verb
        month = MONTHS.index(name) + 1 if name else None
        out.append(
            Period(int(year) if year else None, month, int(day) if day and month and 1 <= int(day) <= 31 else None)
        )
    return out


_MAY_AFTER = [[w] for w in ("in", "of", "since", "until", "during", "last", "early", "late", "mid", "by")]


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


def turns_of(db: Database, query: str, candidates: list[int], filters: Filters | None = None) -> Turns | None:
    """The context of those ``candidates`` that are conversation turns, or None when none is.
    Neighbours that ``filters`` exclude play no part (the search is of what they let through)."""
    rows = fetch_rows(db, candidates, HitRow)
    wanted = sorted(i for i, r in rows.items() if r.conversation)
    if not wanted:
        return None
    turns = Turns(neighbours=_neighbours(db, wanted))
    around = {j for js in turns.neighbours.values() for j in js}
    more = fetch_rows(db, sorted(around - set(rows)), HitRow)
    every = {**rows, **more}
    turns.speaker = {i: r.speaker for i, r in every.items() if r.speaker}
    turns.named = named_speaker(query, turns.speaker.values())
    turns.dates = named_dates(query)
    if turns.dates:
        turns.said_at = {i: r.event_at for i, r in every.items() if r.event_at is not None}
    if filters is not None and not filters.empty:
        turns.excluded = around - set(candidates) - set(_allowed(db, filters, sorted(around)))
    return turns


def _neighbours(db: Database, ids: list[int]) -> dict[int, tuple[int, ...]]:
    """Turn -> the live turns right before and after it in its conversation (by event time,
    turns without one after those with one, then in the order they were stored), for each of
    ``ids``: from the memory-resident index's columns when it serves, else through SQL."""
    with db.lock:
        index = hot.serving(db)
        if index is not None and {"namespace", "conversation", "event_at"} <= index.columns.present:
            return _neighbours_held(index, ids)
    return _neighbours_sql(db, ids)


def _neighbours_held(index: hot.HotIndex, ids: list[int]) -> dict[int, tuple[int, ...]]:
    cols = index.columns
    namespace, conversation = cols.coded["namespace"].codes, cols.coded["conversation"].codes
    none = cols.coded["conversation"].code(None)
    at, found = index.rows_of(np.asarray(ids, dtype=np.int64))
    out: dict[int, tuple[int, ...]] = {}
    for chunk_id, row in zip(np.asarray(ids)[found].tolist(), at[found].tolist(), strict=True):
        key = ("turn order", int(namespace[row]), int(conversation[row]))
        if key[2] == none:
            continue
        order = cols.derived.get(key)
        if order is None:
            # A conversation's live turns in order, kept until a write changes the rows.
            members = np.flatnonzero(index.live & (namespace == key[1]) & (conversation == key[2]))
            said = cols.times["event_at"][members]
            said = np.where(said == filter_mask.NULL_TIME, np.iinfo(np.int64).max, said)
            ordered = index.ids[members[np.lexsort((index.ids[members], said))]]
            order = cols.derived[key] = (ordered, {int(c): p for p, c in enumerate(ordered.tolist())})
        ordered, position = order
        p = position.get(chunk_id)
        if p is None:
            continue
        out[chunk_id] = tuple(int(ordered[q]) for q in (p - 1, p + 1) if 0 <= q < len(ordered))
    return out


def _neighbours_sql(db: Database, ids: list[int]) -> dict[int, tuple[int, ...]]:
    found = search_reads.turn_neighbours(db, ids)
    return {int(i): tuple(int(j) for j in (prev, nxt) if j is not None) for i, prev, nxt in found}


def _allowed(db: Database, filters: Filters, ids: list[int]) -> list[int]:
    """Those of ``ids`` that ``filters`` let through."""
    with db.lock:
        index = hot.serving(db)
        if index is not None:
            mask = index.allowed(db, filters)
            return ids if mask is None else index.kept(mask, ids)
    return search_reads.allowed_ids(db, ids, *filters.sql())
