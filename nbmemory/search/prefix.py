"""A query's words as the keyword index reads them: whether it has any, and its last, unfinished
word read as a prefix (what search-as-you-type needs).

The index's tokens are runs of letters and decimal digits (:mod:`nbmemory.store.fts`): a query of
punctuation alone (``?!...``) gives BM25 nothing, and the vector side answers it with whatever
lies nearest to the embedding of punctuation, hits that look like any others. :func:`has_words`
says which queries those are, with the standard library only, so the command line can refuse one
before it loads anything; the front ends (command line, magics, REST, MCP) refuse them with
:func:`require_words`'s message. :meth:`~nbmemory.Memory.search` itself still answers them.

Typed a letter at a time, a query's last word is unfinished until a space follows it: ``pelic``
holds no term of the index, so BM25 finds nothing until ``pelican`` is complete.
:func:`expand_last_word` replaces such a word by the index terms it begins (its stems, the most
frequent first); a word that is a term already, or begins none, is kept.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING

from nbmemory.errors import ConfigError

if TYPE_CHECKING:
    from nbmemory.store.db import Database

__all__ = ["MAX_EXPANSIONS", "MIN_PREFIX", "expand_last_word", "has_words", "prefix_terms", "require_words"]

#: A last word shorter than this is not expanded: two letters begin too many words to mean one.
MIN_PREFIX = 3
#: At most this many terms stand for an unfinished word.
MAX_EXPANSIONS = 3
# Porter strips up to a few letters ("rotation" -> "rotat"): "rotati" begins no term but its
# stem's; so a prefix that begins none is shortened by up to this many letters.
_BACK_OFF = 2


def has_words(query: str) -> bool:
    """Whether ``query`` holds a character the keyword index keeps: a letter or a decimal digit.

    A mark alone does not count (the index strips accents), nor does ``_``.
    """
    return any(unicodedata.category(c)[0] == "L" or unicodedata.category(c) == "Nd" for c in query)


def require_words(query: str) -> str:
    """``query``, when it :func:`has_words`.

    Raises
    ------
    ConfigError
        Naming the query, when it holds no letter or digit.
    """
    if not has_words(query):
        shown = query if len(query) <= 60 else query[:57] + "..."
        raise ConfigError(
            f"the query {shown!r} has no words to search for: give a letter or a digit, "
            "e.g. a word of what you are looking for"
        )
    return query


def prefix_terms(db: Database, prefix: str, most: int = MAX_EXPANSIONS) -> list[str]:
    """The index terms (stems) that begin with ``prefix``, the most frequent first (by the
    number of chunks holding them, snapshot and delta together); at most ``most``."""
    from nbmemory.store import fts, index_reads

    if not prefix or not fts.index_exists(db):
        return []
    return index_reads.prefix_terms(db, prefix, most)


def expand_last_word(db: Database, query: str) -> str:
    """``query`` with its last word read as the beginning of a word: replaced by the index terms
    it begins (``pelican clus`` -> ``pelican cluster``), so that as-you-type search finds
    keywords before they are complete.

    Unchanged when the query ends with a space or punctuation (the word is finished), or when
    its last word is shorter than :data:`MIN_PREFIX`, is a stopword, is a term some chunk holds
    already (its stem, as the index stems it), or begins none even with its last
    :data:`_BACK_OFF` letters dropped.
    """
    from nbmemory.store import fts

    if not query or query[-1].isspace() or not fts.index_exists(db):
        return query
    tokens = fts.python_tokens(query)
    if not tokens or not tokens[-1]:
        return query  # text the index tokenizes itself (CJK), or a query ending in punctuation
    last = tokens[-1]
    # A stopword is no keyword at all; a word whose stem some chunk holds is complete enough.
    terms = fts.query_terms(db, last)
    if len(last) < MIN_PREFIX or not terms or fts.idfs(db, terms)[0][terms[0]][1] > 0:
        return query
    for cut in range(_BACK_OFF + 1):
        start = last[: len(last) - cut]
        if len(start) < MIN_PREFIX:
            break
        terms = prefix_terms(db, start)
        if terms:
            return _replace_last(query, " ".join(terms))
    return query


def _replace_last(query: str, words: str) -> str:
    """``query`` with its last run of letters and digits replaced by ``words``."""
    end = len(query)
    while end and not _word_char(query[end - 1]):
        end -= 1
    start = end
    while start and _word_char(query[start - 1]):
        start -= 1
    return query[:start] + words + query[end:]


def _word_char(c: str) -> bool:
    category = unicodedata.category(c)
    return category[0] in "LM" or category == "Nd"
