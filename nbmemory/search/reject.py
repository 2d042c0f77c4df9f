"""Relevance tiers and no-answer rejection, from thresholds derived for the active model.

The thresholds come from the diagnostics of the evaluation (``nbmemory.eval.diagnostics``):
tiers from the probability that a BEIR document at a given cosine distance is judged relevant;
the no-answer flag uses the ``medium`` tier with the share of unseen query words. They are per model
(keyed by the embedder's fingerprint): a model without derived thresholds gets no tiers and no
rejection, never constants borrowed from another model or a paper.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from nbmemory.search import bm25
from nbmemory.store import fts
from nbmemory.store.db import Database
from nbmemory.store.fts import words_of_terms

TIERS = ("high", "medium", "low")
#: Share of a query's IDF mass held by words no stored item contains, from which the keyword side
#: counts as evidence of no answer. Chosen on the notes benchmark's dev split and checked on held-out
#: questions, the scenario benchmark and BEIR (docs/evaluation/notes.md, "No answer").
UNSEEN_SHARE = 0.35
#: Only a missing word rare in English counts, rare meaning below this Zipf frequency (wordfreq's
#: English list; 3 is once per million words: "laptop" 4.2, "bookmark" 3.0, "kubernetes" 2.3,
#: "asyncio" 0). A personal memory lacks most common words, so a paraphrase's "laptop" or "awake"
#: missing from it says nothing, while a missing "kubernetes", "asyncio" or "terraform" is the
#: topic itself. Lower, a question about a rare topic the memory lacks goes unflagged; higher,
#: answerable questions worded differently from their notes get flagged (docs/evaluation/notes.md,
#: "No answer").
RARE_ZIPF = 3.0
#: The best keyword match holds under this share of the query's IDF mass: wording the notes do not
#: use (the boundary at which adaptive fusion leans to the vector side, :mod:`~nbmemory.search.adaptive`).
KEYWORD_HALF = 0.5
#: Missing words at least this long are checked for being misspellings of words the memory holds.
TYPO_MIN_CHARS = 5


def rare(word: str) -> bool:
    """Whether ``word`` is rare in English (under Zipf :data:`RARE_ZIPF`); a word with a digit
    always is (codes, numbers: "INC-4821", "2019")."""
    lower = word.lower()
    return any(c.isdigit() for c in lower) or lower not in _common_words()


@functools.cache
def _common_words() -> frozenset[str]:
    """The English words at Zipf >= :data:`RARE_ZIPF` in wordfreq's large English list (the list
    its ``zipf_frequency`` reads; ``tests/search/test_stages.py`` checks that they agree).

    Read from wordfreq's data file without importing wordfreq, whose import is slower still: a
    gzipped msgpack list whose first entry is a header and entry ``i`` the words at ``-(i - 1)``
    centibels, that is at Zipf ``9 - (i - 1) / 100``.
    """
    import gzip
    import importlib.util

    import msgpack

    spec = importlib.util.find_spec("wordfreq")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("wordfreq is not installed: pip install nbmemory")
    data = Path(next(iter(spec.submodule_search_locations))) / "data" / "large_en.msgpack.gz"
    header, *bins = msgpack.unpackb(gzip.decompress(data.read_bytes()), raw=False)
    if header != {"format": "cB", "version": 1}:
        raise ValueError(f"{data}: unknown word-frequency format {header!r}")
    keep = round((9.0 - RARE_ZIPF) * 100) + 1  # bins from Zipf 9 down to RARE_ZIPF
    return frozenset(word for words in bins[:keep] for word in words)


@dataclass(frozen=True)
class Unseen:
    """The query's words no stored item holds.

    ``words``: each missing index term -> the query's words behind it; ``idf_share``: the share of
    the query's IDF mass one missing term carries (the IDF of a term no item holds / the mass).
    """

    words: dict[str, list[str]]
    idf_share: float
    #: Missing terms whose words are one edit from a word the memory holds: misspellings.
    typos: frozenset[str] = frozenset()

    def _rare(self) -> list[str]:
        # A term counts when every word behind it is rare (a term whose words the stemmer changed
        # past recognition has none and counts: it is no English word), and is no misspelling.
        return [
            t for t, words in self.words.items() if t not in self.typos and all(rare(w) for w in words)
        ]

    def share(self) -> float:
        """Share of the query's IDF mass on the missing terms rare in English."""
        return self.idf_share * len(self._rare())

    def names(self) -> list[str]:
        """The query's words behind the missing terms rare in English, as written."""
        return [w for t in self._rare() for w in (self.words[t] or [t])]


def without_typos(db: Database, missing: Unseen) -> Unseen:
    """``missing`` with the terms marked whose every word is one edit (a letter dropped, added,
    changed or two swapped) from a word the memory holds: "educaton" where the memory says
    "education" is a slip of the keys, not a topic the memory lacks. Words shorter than
    :data:`TYPO_MIN_CHARS` are left alone: too many words lie one edit from them."""
    if not missing.words:
        return missing
    typos = set()
    for term, words in missing.words.items():
        if words and all(len(w) >= TYPO_MIN_CHARS and _one_edit_held(db, w.lower()) for w in words):
            typos.add(term)
    return replace(missing, typos=frozenset(typos)) if typos else missing


def _one_edit_held(db: Database, word: str) -> bool:
    letters = "abcdefghijklmnopqrstuvwxyz"
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    edits = {a + b[1:] for a, b in splits if b}
    edits |= {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
    edits |= {a + c + b[1:] for a, b in splits if b for c in letters}
    edits |= {a + c + b for a, b in splits for c in letters}
    edits.discard(word)
    terms = sorted(set(fts.stems(sorted(edits))))
    held, _ = bm25.idfs(db, terms)
    return any(df > 0 for _, df in held.values())


def unseen(query: str, mass: float, unseen_idf: float, missing_terms: list[str]) -> Unseen:
    """The words of ``query`` whose terms no item holds (``missing_terms`` are stems: ``kubernet``
    for "kubernetes"), and the share of the query's IDF ``mass`` one of them carries."""
    if not missing_terms or mass <= 0:
        return Unseen({}, 0.0)
    return Unseen(words_of_terms(query, missing_terms), unseen_idf / mass)


@dataclass(frozen=True)
class Thresholds:
    """Per-model levels. ``tiers``: tier -> max cosine distance."""

    fingerprint: str
    tiers: dict[str, float]
    source: str

    def tier(self, distance: float | None) -> str:
        """``high``, ``medium``, ``low`` or ``none`` for a cosine distance."""
        if distance is None:
            return "none"
        for name in TIERS:
            limit = self.tiers.get(name)
            if limit is not None and distance <= limit:
                return name
        return "none"

    def should_reject(
        self, top_vector_sim: float | None, missing: Unseen, covered: float = 0.0
    ) -> tuple[bool, str, str]:
        """Flag "no confident answer" when neither retriever supports the best hit.

        The keyword side has *negative* evidence: query words rare in English that the memory has
        never seen carry at least :data:`UNSEEN_SHARE` of the query's IDF mass (a note answering
        it would very likely use them), and more of it than the best keyword match holds
        (``covered``, a share of the same mass): "Ivermectin is used to treat lymphatic
        filariasis" lacks "Ivermectin" but its best match holds the rarer "lymphatic
        filariasis". The vector side has no strong match: the best cosine is below this model's
        ``medium`` tier. A query without such words has no keyword evidence and is never
        flagged. Returns ``(flagged, reason in words, numbers)``.
        """
        medium = self.tiers.get("medium")
        if medium is None:
            return False, "", "no tiers for this model"
        sim = -1.0 if top_vector_sim is None else top_vector_sim
        weak_vec = sim < 1.0 - medium
        numbers = f"best cosine {sim:.3f} {'<' if weak_vec else '>='} {1.0 - medium:.3f} (medium tier)"
        if not weak_vec:
            return False, "", numbers  # no need to read the word list (slow at its first use)
        share = missing.share()
        unseen_enough = share >= UNSEEN_SHARE and share > covered
        numbers += (
            f", unseen words rare in English {share:.0%} {'>=' if share >= UNSEEN_SHARE else '<'} "
            f"{UNSEEN_SHARE:.0%} of the query's IDF mass, the best keyword match holds {covered:.0%}"
        )
        if not unseen_enough:
            return False, "", numbers
        names = missing.names()[:3]
        words = ", ".join(repr(t) for t in names) or "key words of the query"
        verb = "appears" if len(names) == 1 else "appear"
        reason = (
            f"no confident match: {words} {verb} in no stored item, and nothing stored is close in meaning"
        )
        return True, reason, numbers


def far_from_everything(
    best_cosine: float, near_miss: float, covered: float, top_score: float | None = None
) -> tuple[bool, str, str]:
    """Flag "no confident answer" when the best match is weak on both sides, measured against
    this memory: the best cosine (passages included), or the best hit's fused score (the cosine
    and keyword share together, :mod:`nbmemory.search.convex`), is below the memory's near-miss
    cosine (:mod:`nbmemory.search.nearmiss`: what 95 % of its own titles find in other notes),
    and the best keyword match holds under :data:`KEYWORD_HALF` of the query's IDF mass
    (``covered``). Returns ``(flagged, reason in words, numbers)``."""
    far = best_cosine < near_miss or (top_score is not None and top_score < near_miss)
    weak_words = covered < KEYWORD_HALF
    numbers = (
        f"best cosine with passages {best_cosine:.3f} "
        + (f"and best fused score {top_score:.3f} " if top_score is not None else "")
        + f"{'<' if far else '>='} {near_miss:.3f} "
        f"(this memory's near-miss cosine), the best keyword match holds {covered:.0%}"
    )
    if not (far and weak_words):
        return False, "", numbers
    reason = (
        "no confident match: nothing stored is as close to the question as this memory's notes "
        f"are to each other, and no item holds half of its words (best keyword match {covered:.0%})"
    )
    return True, reason, numbers


def thresholds_path(fingerprint: str) -> Path:
    """Where thresholds a user derived live: ``<eval cache>/thresholds/<fingerprint>.json``."""
    from nbmemory.config import cache_home

    return cache_home() / "eval" / "thresholds" / f"{fingerprint}.json"


def bundled_thresholds_path(fingerprint: str) -> Path:
    """Thresholds shipped with nbmemory for a model: ``nbmemory/search/thresholds/<fingerprint>.json``."""
    return Path(__file__).resolve().parent / "thresholds" / f"{fingerprint}.json"


def load_thresholds(fingerprint: str, path: str | os.PathLike[str] | None = None) -> dict[str, Any] | None:
    """Thresholds for a model fingerprint: ``path``, else the user's own (eval cache), else the shipped ones.

    Returns None when none were derived for this model.
    """
    candidates = (
        [Path(path)]
        if path is not None
        else [thresholds_path(fingerprint), bundled_thresholds_path(fingerprint)]
    )
    for target in candidates:
        if target.exists():
            data: dict[str, Any] = json.loads(target.read_text(encoding="utf-8"))
            return data
    return None


@functools.lru_cache(maxsize=8)
def thresholds_for(fingerprint: str) -> Thresholds | None:
    """The thresholds derived for a model fingerprint (the user's own first, then shipped ones)."""
    data: dict[str, Any] | None = load_thresholds(fingerprint)
    if data is None:
        return None
    tiers = {k: float(v) for k, v in (data.get("distance_tiers") or {}).items() if v is not None}
    return Thresholds(
        fingerprint=fingerprint,
        tiers=tiers,
        source=str(data.get("created", "")),
    )
