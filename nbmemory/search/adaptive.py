"""Adaptive fusion weights: how much to trust BM25 versus vectors, per query.

Plain RRF gives both retrievers the same say on every query. That loses to the better single
retriever whenever one of them is clearly right: a ticket number or a function name is found
by BM25 and missed by the embedding; a question worded unlike the note is found by the
embedding and missed by BM25. The weights here come from
the query terms' IDF in the corpus (vstash's idea), read as one number, the *lexical evidence*:

    evidence = max over BM25's top 5 of (IDF of the query terms the item holds) / (IDF of all query terms)

A query term the corpus lacks counts in the denominator with the IDF of an unseen term, so
wording the notes do not use lowers the evidence. Term frequency plays no part (a long
abstract repeating a word is not more of a match), so the evidence is the share of the query's
IDF mass that the best keyword match covers: 1 when one item holds all of the query's words, near
0 when nothing holds its rare ones. An identifier in the query (``INC-4821``, ``parse_config``,
``v2.3.1``, ``0x1f``) that the corpus holds is its own evidence, in proportion to its share of
the query's IDF mass: those are exactly what an embedding cannot see.

The evidence can only say when BM25 *cannot* match: a fully covered query of common words
("statins breast cancer") is covered by dozens of items, and coverage does not tell whether
BM25's pick among them is right (on NFCorpus the median query is fully covered, and plain RRF
beats both retrievers there). So the lean (in [-1, 1], positive = BM25) is:

* ``2 * evidence - 1`` when the evidence is below 0.5 (towards vectors), else 0;
* ``2 * share - 1`` when identifiers the corpus holds carry a share above 0.5 of the IDF mass
  of the query terms the corpus holds (towards BM25): embeddings do not represent ``INC-4821``.

The weights move symmetrically around 1: ``bm25 = 1 + strength * lean``, ``vector = 1 -
strength * lean``, and each retriever's RRF constant is divided by its weight (a trusted
retriever's top ranks count more against its lower ones). RRF at k=60 is flat (rank 1 and rank
4 differ by 5 %), so weights alone barely move a top-1; the sharper constant is what lets a
trusted retriever's #1 beat an item the other retriever alone put first.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

#: Identifier-like tokens: letters and digits mixed (INC-4821, sha256, v2), numbers of 3+
#: digits, snake_case, camelCase, dotted names (os.path.join) and hex literals.
_IDENTIFIER = re.compile(
    r"""(?x)
    \b(?=[\w.-]*\d)(?=[\w.-]*[A-Za-z])[\w.-]*\w   # letters and digits mixed
    | \b\d{3,}\b                                   # long numbers: ticket and error codes
    | \b\w+_\w+\b                                  # snake_case
    | \b[a-z]+[A-Z]\w*\b                           # camelCase
    | \b[A-Za-z_]\w*\.[A-Za-z_]\w*(?:\.\w+)*\b     # dotted.names
    """
)


@dataclass
class QueryEvidence:
    """What the weights were computed from, for the trace."""

    evidence: float
    lean: float
    weights: dict[str, float]
    identifiers: list[str] = field(default_factory=list)
    missing_terms: list[str] = field(default_factory=list)
    reason: str = ""
    #: The query's IDF mass (terms no item holds count at ``unseen_idf``, the IDF of a term no
    #: item holds): the scale of BM25 scores in convex fusion and of the no-answer flag.
    mass: float = 0.0
    unseen_idf: float = 0.0
    #: Each identifier in ``identifiers`` -> its index terms (``INC-4821`` -> ``inc``, ``4821``).
    pieces: dict[str, list[str]] = field(default_factory=dict)


def identifiers(query: str) -> list[str]:
    """Identifier-like tokens of ``query`` (see the module docstring)."""
    return [m.group(0) for m in _IDENTIFIER.finditer(query)]


def idf_sum(idf: Mapping[str, tuple[float, int]], terms: Iterable[str]) -> float:
    """The IDF of those of ``terms`` that ``idf`` holds, summed in sorted order: a set of terms
    iterates in an order that changes with the process's string hashing (``PYTHONHASHSEED``),
    and a sum in that order could differ in its last bit from one process to the next."""
    return sum(idf[t][0] for t in sorted(terms) if t in idf)


def fusion_weights(
    query: str,
    idf: dict[str, tuple[float, int]],
    unseen_idf: float,
    matched: Sequence[AbstractSet[str]],
    term_of: dict[str, list[str]] | None = None,
    strength: float = 0.8,
) -> QueryEvidence:
    """Per-query RRF weights for ``bm25`` and ``vector``.

    Parameters
    ----------
    query:
        The raw query (identifiers are found in it).
    idf:
        Query term -> (IDF, document frequency) in the corpus, terms as the index stems them.
    unseen_idf:
        The IDF of a term no document holds (counts for query terms the corpus lacks).
    matched:
        For each of BM25's top items, the query terms it holds (empty when BM25 found nothing).
    term_of:
        Identifier -> its index terms (``INC-4821`` -> ``["inc", "4821"]``); an identifier
        counts only when every one of its terms is in the corpus. Names here that
        :func:`identifiers` does not find (symbols: ``g??``) count as identifiers too.
    strength:
        How far the weights may move from 1 (0 gives plain RRF).
    """
    if not 0.0 <= strength < 1.0:
        raise ValueError(f"strength must be in [0, 1), got {strength}")
    missing = sorted(t for t, (_, df) in idf.items() if df == 0)
    mass = sum(value if df > 0 else unseen_idf for value, df in idf.values())
    covered = max((idf_sum(idf, terms) for terms in matched), default=0.0)
    evidence = 0.0 if mass <= 0 else min(1.0, covered / mass)
    term_of = term_of or {}
    found_ids = [
        name
        for name in dict.fromkeys([*identifiers(query), *term_of])
        if term_of.get(name) and all(idf.get(t, (0.0, 0))[1] > 0 for t in term_of[name])
    ]
    lean = min(0.0, 2.0 * evidence - 1.0)
    reason = f"the best keyword match holds {evidence:.0%} of the query's IDF mass"
    if evidence >= 0.5:
        reason += ": BM25 can match it, equal weights"
    else:
        reason += ": wording the notes do not use, lean to vectors"
    present = sum(value for value, df in idf.values() if df > 0)
    if found_ids and present > 0:
        # The identifiers' share of the IDF mass of the query terms the corpus holds: all of
        # "INC-4821", little of a long sentence that happens to mention "IL-6". Words the
        # corpus lacks do not dilute it: they cannot outvote an identifier it holds.
        id_terms = {t for name in found_ids for t in term_of[name]}
        share = idf_sum(idf, id_terms) / present
        if share > 0.5:
            lean = 2.0 * share - 1.0
            reason = f"identifier {found_ids[0]!r} is in the corpus and carries {share:.0%} of the query's IDF mass"
    weights = {"bm25": 1.0 + strength * lean, "vector": 1.0 - strength * lean}
    pieces = {name: term_of[name] for name in found_ids}
    return QueryEvidence(evidence, lean, weights, found_ids, missing, reason, mass, unseen_idf, pieces)
