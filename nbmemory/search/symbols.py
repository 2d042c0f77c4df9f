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
"""

from __future__ import annotations

import re
import string
from functools import lru_cache
from typing import Any

from nbmemory.store.db import Database

#: Quotes a symbol may be pasted in (stripped when they wrap the whole token).
_WRAPPERS = "`'\""
#: What may precede a symbol where it is written: whitespace, the start, an opener.
_OPENERS = r"\s`'\"(\[{<"
#: What may follow it: anything but more punctuation, except closers and sentence punctuation.
_FOLLOWERS_OK = r"\w\s`'\")\]}>.,;:!?"
_SENTENCE_END = ".,;:!?"
#: Longer tokens are pasted code, which the words of BM25 already cover.
MAX_LENGTH = 24


def of_query(query: str) -> list[str]:
    """The symbols of ``query``, in order, without repeats: whitespace-separated tokens of at
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
        marks = sum(ch in string.punctuation for ch in token)
        if marks and alnum <= marks and alnum + marks == len(token) and token.lower() not in found:
            found.append(token.lower())
    return found


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


def holders(db: Database, symbol: str, where: str, params: list[Any]) -> tuple[list[int], int]:
    """The live chunks matching ``where`` (a condition on alias ``c``) that hold ``symbol`` as
    written, in id order, and how many live chunks hold it in all (its document frequency)."""
    like = "%" + symbol.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = db.fetchall(
        f"SELECT c.id, ({where}) AS allowed, c.heading, c.text FROM chunks c "
        "WHERE c.deleted_at IS NULL AND (c.text ILIKE ? ESCAPE '\\' OR c.heading ILIKE ? ESCAPE '\\') "
        "ORDER BY c.id",
        [*params, like, like],
    )
    written = pattern(symbol)
    held = [(int(i), bool(ok)) for i, ok, heading, text in rows if written.search(f"{heading}\n{text}")]
    return [i for i, ok in held if ok], len(held)
