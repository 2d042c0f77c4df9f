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
or an opening quote, backtick or bracket) and is followed by whitespace, the end, a closing quote
or bracket, a sentence mark, or (when it ends in punctuation) a letter or digit: ``:/`` is written
in ``git show :/typo`` but not in ``https://``; ``$0`` in ``$0.lang`` and ``$($0)`` but not in
``$05``; ``-t`` in ``nginx -t`` but not in ``find -type``. Case is folded for ASCII letters only.

Finding the chunks that hold a symbol: while the memory-resident index holds every live row
(:func:`nbmemory.store.rows.preloaded`), from a sorted list of the places a symbol can start
(every token head with punctuation in its first two characters, up to :data:`MAX_LENGTH` + 1
characters), made at the first symbol search after that index is built (its cost grows with the
text, so no memory pays it before it searches for a symbol) and read by binary search; rows
written since are read and matched one by one. Otherwise
by scanning the chunks' text in DuckDB.
"""

from __future__ import annotations

import re
import string
from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from nbmemory.store import search_reads
from nbmemory.store.db import Database
from nbmemory.store.rows import CandidateRow, HitRow, fetch_rows, preloaded

#: Quotes a symbol may be pasted in (taken off when they wrap it, or open or close it alone).
_WRAPPERS = "`'\""
#: What may precede a symbol where it is written: whitespace, the start, an opener.
_OPENERS = r"\s`'\"(\[{<"
_SENTENCE_END = ".,;:!?"
#: Besides letters, digits and ``_`` (after a symbol ending in punctuation), what may follow a
#: symbol where it is written: closing brackets and quotes, and sentence marks.
_ENDS_OK = "`'\")]}>.,;:!?"
#: Longer tokens are pasted code, which the words of BM25 already cover.
MAX_LENGTH = 24
#: Symbols looked up per query, the first ones (a pasted block of code holds hundreds).
MAX_SYMBOLS = 8
_MARKS = frozenset(string.punctuation)
#: Symbols are ASCII, so case is folded for ASCII letters only, the same way on every path.
_ASCII_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
#: Abbreviations of prose (``i.e.,``, ``e.g.``, ``p.m.``): letters and dots, not symbols.
_ABBREVIATION = re.compile(r"(?:[A-Za-z]\.){2,}[,;:]?")
#: Every place a symbol can start: after whitespace, the start or an opener, with punctuation in
#: the first two characters (overlapping: ``$($0)`` gives ``$($0)`` and ``$0)``).
_HEAD = re.compile(rf"(?<![^{_OPENERS}])(?=(\S?[{re.escape(string.punctuation)}]\S{{0,{MAX_LENGTH - 1}}}))")


def of_query(query: str) -> list[str]:
    """The symbols of ``query`` (the first :data:`MAX_SYMBOLS`), in order, lower-cased, without
    repeats: whitespace-separated tokens of at least two characters, all ASCII, with punctuation
    in the first two and at least as many punctuation marks as letters and digits (``g??``,
    ``$0``, ``:/``, ``&&``, ``%>%``, ``c++``; not ``file?``, ``H.``, ``(ii)``, ``i.e.,`` or
    ``INC-2307``).

    Prose punctuation is taken off first, until none is left: quotes or backticks around the
    token (or opening or closing it alone), ``*`` emphasis around it, a sentence mark right after
    a letter, a digit, a closing bracket or quote or a percent sign (``D:``, ``2.``, ``(SLE).``,
    ``"$0",``), and brackets around or before a word.
    """
    found: list[str] = []
    for raw in query.split():
        if raw.isalnum() or _ABBREVIATION.fullmatch(raw):  # a plain word holds no punctuation
            continue
        token = _unwrapped(raw)
        if not 2 <= len(token) <= MAX_LENGTH or not token.isascii():
            continue
        alnum = sum(ch.isalnum() for ch in token)
        marks = sum(ch in _MARKS for ch in token)
        # Punctuation in the first two characters: where the head index looks (``_HEAD``).
        headed = any(ch in _MARKS for ch in token[:2])
        if headed and alnum <= marks and alnum + marks == len(token) and token.lower() not in found:
            found.append(token.lower())
    return found[:MAX_SYMBOLS]


def _unwrapped(token: str) -> str:
    """``token`` without the punctuation prose puts around it (see :func:`of_query`)."""
    while True:
        before = token
        if len(token) > 2 and token[0] == token[-1] and token[0] in _WRAPPERS + "*":
            token = token[1:-1]
        elif (
            len(token) > 1
            and token[-1] in _SENTENCE_END
            and (token[-2].isalnum() or token[-2] in ")]%" + _WRAPPERS)
        ):
            token = token[:-1]
        elif any(ch.isalnum() for ch in token):
            token = _bracketed(token)
        if token == before:
            return token


def _bracketed(token: str) -> str:
    """A word without the brackets or quotes prose puts around or before it, or after it alone."""
    for opener, closer in ("()", "[]", *((q, q) for q in _WRAPPERS)):
        if len(token) > 1 and token.startswith(opener) and token.endswith(closer):
            token = token[1:-1]
        elif token.startswith(opener) and closer not in token[1:]:
            token = token[1:]
        elif token.endswith(closer) and opener not in token[:-1]:
            token = token[:-1]
    return token


@lru_cache(maxsize=256)
def pattern(symbol: str) -> re.Pattern[str]:
    """Where ``symbol`` is written as such (see the module docstring), ASCII case aside."""
    body = "".join(f"[{ch.lower()}{ch.upper()}]" if ch.isalpha() else re.escape(ch) for ch in symbol)
    # After a symbol ending in a letter or digit, another one would make it part of a word.
    ends = re.escape(_ENDS_OK) if _word_end(symbol) else rf"\w{re.escape(_ENDS_OK)}"
    return re.compile(rf"(?:^|(?<=[{_OPENERS}])){body}(?=$|[\s{ends}])")


def _word_end(symbol: str) -> bool:
    return symbol[-1].isalnum() or symbol[-1] == "_"


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
            for key in _HEAD.findall(f"{row.heading}\n{row.text}".translate(_ASCII_LOWER))
        )
        return cls([key for key, _ in pairs], [chunk_id for _, chunk_id in pairs])

    def holders(self, symbol: str) -> set[int]:
        """Chunks where ``symbol`` (lower case) starts a head and what follows leaves it whole."""
        lo, hi = bisect_left(self.keys, symbol), bisect_left(self.keys, symbol + "\U0010ffff")
        n, word_end = len(symbol), _word_end(symbol)
        return {
            self.ids[j] for j in range(lo, hi) if len(self.keys[j]) == n or _ends(self.keys[j][n], word_end)
        }


def _ends(ch: str, word_end: bool) -> bool:
    """Whether ``ch`` after a symbol leaves it written as such (the lookahead of :func:`pattern`)."""
    return ch in _ENDS_OK or (not word_end and (ch.isalnum() or ch == "_"))


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


def prepare(db: Database) -> None:
    """Make the head index now if it can be made (outside the store's lock: writers go on)."""
    _heads(db)


def holders(
    db: Database,
    names: list[str],
    where: str,
    params: list[Any],
    keep: Callable[[list[int]], list[int]] | None = None,
) -> dict[str, tuple[list[int], int]]:
    """For each symbol of ``names`` (lower case): the live chunks matching ``where`` (a condition
    on alias ``c``) that hold it as written, in id order, and how many live chunks hold it in
    all (its document frequency).

    ``keep``: those of some ids (in order) that match the filters, given by the caller (the
    memory-resident index's mask of them); ``where`` is then not read.
    """
    heads = _heads(db)
    if heads is None:
        if keep is not None:
            scanned = {name: _scanned(db, name, "TRUE", []) for name in names}
            return {name: (keep(ids), df) for name, (ids, df) in scanned.items()}
        return {name: _scanned(db, name, where, params) for name in names}
    dirty = db.dirty_rows
    found = {name: {i for i in heads.holders(name) if i not in dirty} for name in names}
    # Rows written since the preload: read (live ones only) and matched one by one, once.
    for i, row in fetch_rows(db, sorted(dirty), HitRow).items():
        text = f"{row.heading}\n{row.text}"
        for name in names:
            if pattern(name).search(text):
                found[name].add(i)
    out = {}
    for name in names:
        everything = sorted(found[name])
        if where == "TRUE" or not everything:
            out[name] = (everything, len(everything))
            continue
        if keep is not None:
            out[name] = (keep(everything), len(everything))
            continue
        out[name] = (search_reads.allowed_sorted(db, everything, where, params), len(everything))
    return out


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
    rows = search_reads.text_matches(db, found, args, where, params)
    written = pattern(symbol)
    held = [(int(i), bool(ok)) for i, ok, heading, text in rows if written.search(f"{heading}\n{text}")]
    return [i for i, ok in held if ok], len(held)
