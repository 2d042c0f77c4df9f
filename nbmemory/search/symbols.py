"""Symbols: query tokens made of punctuation more than of letters, which BM25 cannot see.

The full-text index keeps runs of letters and digits and drops the rest (:mod:`nbmemory.store.fts`),
so a pasted ``g??`` (Vim's ROT13) is searched as ``g``, ``$0`` (the inspected node in a browser
console) as ``0``, and ``git show :/`` as ``git show``: the punctuation, which is what the person
typed to find, is gone, and the embedding does not represent it either. Here such a token counts
as one more query term: its document frequency is the number of live chunks where it is written
as such (case aside), and a chunk holding it gains its IDF on the keyword side, as a word held
once at average length would. The search lists the chunks holding it, so a note that neither
retriever reached by its words is found by the symbol.

*Written as such* means the symbol starts a token of the text (after whitespace, the text's start
or an opening quote, backtick or bracket) and is not continued by more punctuation: ``:/`` is
written in ``git show :/typo`` but not in ``https://``; ``$0`` in ``$0.lang`` and ``$($0)``.

Finding the chunks that hold a symbol: while the memory-resident index holds every live row
(:func:`nbmemory.store.rows.preloaded`), from a sorted list of the places a symbol can start
(every token head with punctuation in its first two characters, up to :data:`MAX_LENGTH` + 1
characters), made at the first symbol search after that index is built (about 25 ms per MB of
text) and read by binary search; rows written since are read and matched one by one. Otherwise
by scanning the chunks' text in DuckDB.
"""

from __future__ import annotations

import re
import string
from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nbmemory.store.db import Database
from nbmemory.store.rows import CandidateRow, HitRow, fetch_rows, preloaded

#: Quotes a symbol may be pasted in (stripped when they wrap the whole token).
_WRAPPERS = "`'\""
#: What may precede a symbol where it is written: whitespace, the start, an opener.
_OPENERS = r"\s`'\"(\[{<"
#: What may follow it: anything but more punctuation, except closers and sentence punctuation.
_FOLLOWERS_OK = r"\w\s`'\")\]}>.,;:!?"
_SENTENCE_END = ".,;:!?"
#: Longer tokens are pasted code, which the words of BM25 already cover.
MAX_LENGTH = 24
#: Symbols looked up per query, the first ones (a pasted block of code holds hundreds).
MAX_SYMBOLS = 8
_MARKS = frozenset(string.punctuation)
#: Besides letters, digits and ``_``, what may follow a symbol where it is written.
_ENDS_OK = frozenset("`'\")]}>.,;:!?")
#: Every place a symbol can start: after whitespace, the start or an opener, with punctuation in
#: the first two characters (overlapping: ``$($0)`` gives ``$($0)`` and ``$0)``).
_HEAD = re.compile(rf"(?<![^{_OPENERS}])(?=(\S?[{re.escape(string.punctuation)}]\S{{0,{MAX_LENGTH - 1}}}))")


def of_query(query: str) -> list[str]:
    """The symbols of ``query`` (the first :data:`MAX_SYMBOLS`), in order, without repeats: whitespace-separated tokens of at
    least two characters, all ASCII, with at least as many punctuation marks as letters and
    digits (``g??``, ``$0``, ``:/``, ``&&``, ``%>%``; not ``file?``, ``H.``, ``(ii)`` or ``INC-2307``).

    Prose punctuation is taken off first: quotes or backticks around the token, a sentence mark
    right after a letter, a digit, a closing bracket or a percent sign (``D:``, ``2.``, ``(SLE).``),
    and brackets around or before a word.
    """
    found: list[str] = []
    for token in query.split():
        if len(token) > 2 and token[0] == token[-1] and token[0] in _WRAPPERS:
            token = token[1:-1]
        if len(token) > 1 and token[-1] in _SENTENCE_END and (token[-2].isalnum() or token[-2] in ")]%"):
            token = token[:-1]
        if any(ch.isalnum() for ch in token):
            token = _bracketed(token)
        if not 2 <= len(token) <= MAX_LENGTH or not token.isascii():
            continue
        alnum = sum(ch.isalnum() for ch in token)
        marks = sum(ch in _MARKS for ch in token)
        # Punctuation in the first two characters: where the head index looks (``_HEAD``).
        headed = any(ch in _MARKS for ch in token[:2])
        if headed and alnum <= marks and alnum + marks == len(token) and token.lower() not in found:
            found.append(token.lower())
    return found[:MAX_SYMBOLS]


def _bracketed(token: str) -> str:
    """A word without the parentheses or square brackets prose puts around or before it."""
    for opener, closer in ("()", "[]"):
        if token.startswith(opener) and token.endswith(closer):
            token = token[1:-1]
        elif token.startswith(opener) and closer not in token:
            token = token[1:]
        elif token.endswith(closer) and opener not in token:
            token = token[:-1]
    return token


@lru_cache(maxsize=256)
def pattern(symbol: str) -> re.Pattern[str]:
    """Where ``symbol`` is written as such (see the module docstring), case aside."""
    return re.compile(rf"(?:^|(?<=[{_OPENERS}])){re.escape(symbol)}(?![^{_FOLLOWERS_OK}])", re.IGNORECASE)


@dataclass(frozen=True)
class _Heads:
    """The places symbols can start in a set of rows, lower-cased and sorted, with their chunk ids."""

    keys: list[str]
    ids: list[int]

    @classmethod
    def of(cls, rows: dict[int, CandidateRow]) -> _Heads:
        pairs = sorted(
            (key, chunk_id)
            for chunk_id, row in rows.items()
            for key in _HEAD.findall(f"{row.heading}\n{row.text}".lower())
        )
        return cls([key for key, _ in pairs], [chunk_id for _, chunk_id in pairs])

    def holders(self, symbol: str) -> set[int]:
        """Chunks where ``symbol`` (lower case) starts a head and punctuation does not continue it."""
        lo, hi = bisect_left(self.keys, symbol), bisect_left(self.keys, symbol + "\U0010ffff")
        n = len(symbol)
        return {self.ids[j] for j in range(lo, hi) if len(self.keys[j]) == n or _ends(self.keys[j][n])}


def _ends(ch: str) -> bool:
    """Whether ``ch`` after a symbol leaves it written as such (the lookahead of :func:`pattern`)."""
    return ch.isalnum() or ch == "_" or ch in _ENDS_OK


def _heads(db: Database) -> _Heads | None:
    """The head index of the preloaded rows (made once per preload), or None when none are held."""
    rows = preloaded(db)
    if rows is None:
        return None
    cached = db.cache.get("symbol_heads")
    if isinstance(cached, tuple) and cached[0] is rows:
        return cached[1]  # type: ignore[no-any-return]
    heads = _Heads.of(rows)
    db.cache["symbol_heads"] = (rows, heads)
    return heads


def holders(db: Database, symbol: str, where: str, params: list[Any]) -> tuple[list[int], int]:
    """The live chunks matching ``where`` (a condition on alias ``c``) that hold ``symbol`` as
    written, in id order, and how many live chunks hold it in all (its document frequency)."""
    heads = _heads(db)
    if heads is None:
        return _scanned(db, symbol, where, params)
    written = pattern(symbol)
    dirty = db.dirty_rows
    found = {i for i in heads.holders(symbol.lower()) if i not in dirty}
    # Rows written since the preload: read (live ones only) and matched one by one.
    for i, row in fetch_rows(db, sorted(dirty), HitRow).items():
        if written.search(f"{row.heading}\n{row.text}"):
            found.add(i)
    everything = sorted(found)
    if where == "TRUE" or not everything:
        return everything, len(everything)
    allowed = db.fetchall(
        f"SELECT c.id FROM chunks c WHERE c.id IN ({', '.join(map(str, everything))}) "
        f"AND c.deleted_at IS NULL AND ({where}) ORDER BY c.id",
        params,
    )
    return [int(r[0]) for r in allowed], len(everything)


def _scanned(db: Database, symbol: str, where: str, params: list[Any]) -> tuple[list[int], int]:
    """:func:`holders` by scanning every live chunk's text in DuckDB: ``contains`` (a byte
    search) for a symbol without letters, a case-blind regular expression for one with them
    (``ILIKE`` took 4-20 times longer on 50k chunks)."""
    if any(ch.isalpha() for ch in symbol):
        found, args = (
            "regexp_matches(c.text, ?) OR regexp_matches(c.heading, ?)",
            ["(?i)" + re.escape(symbol)] * 2,
        )
    else:
        found, args = "contains(c.text, ?) OR contains(c.heading, ?)", [symbol, symbol]
    rows = db.fetchall(
        f"SELECT c.id, ({where}) AS allowed, c.heading, c.text FROM chunks c "
        f"WHERE c.deleted_at IS NULL AND ({found}) ORDER BY c.id",
        [*params, *args],
    )
    written = pattern(symbol)
    held = [(int(i), bool(ok)) for i, ok, heading, text in rows if written.search(f"{heading}\n{text}")]
    return [i for i, ok in held if ok], len(held)
