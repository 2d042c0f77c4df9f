"""Relevance tiers and no-answer rejection, from thresholds derived for the active model.

The thresholds come from the diagnostics of the evaluation (``nbmemory.eval.diagnostics``):
tiers from the probability that a BEIR document at a given cosine distance is judged relevant;
the no-answer flag uses the ``medium`` tier with the share of unseen query words. They are per model
(keyed by the embedder's fingerprint): a model without derived thresholds gets no tiers and no
rejection, never constants borrowed from another model or a paper.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

TIERS = ("high", "medium", "low")
#: Share of a query's IDF mass held by words no stored item contains, from which the keyword side
#: counts as evidence of no answer. Chosen on the notes dev split (13 questions without an answer,
#: 68 with), checked on its test split, the scenario benchmark and BEIR: see README "No answer".
UNSEEN_SHARE = 0.35
#: Below this many items a word missing from the memory says little: a new memory lacks most
#: words, and on 175 real notes paraphrases ("keystroke", "multiplexer", "disk") were missing as
#: often as the topics of unanswerable questions. Smaller memories are never flagged.
LARGE_MEMORY = 1000


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
        self,
        top_vector_sim: float | None,
        unseen_share: float,
        unseen_terms: list[str] | None = None,
        items: int = LARGE_MEMORY,
    ) -> tuple[bool, str, str]:
        """Flag "no confident answer" when neither retriever supports the best hit.

        The keyword side has *negative* evidence: query words the memory has never seen carry at
        least :data:`UNSEEN_SHARE` of the query's IDF mass (a note answering it would very
        likely use them). The vector side has no strong match: the best cosine is below this
        model's ``medium`` tier. A query without indexable words, or a memory of fewer than
        :data:`LARGE_MEMORY` ``items``, has no keyword evidence either way and is never flagged.
        Returns ``(flagged, reason in words, numbers)``.
        """
        medium = self.tiers.get("medium")
        if medium is None:
            return False, "", "no tiers for this model"
        if items < LARGE_MEMORY:
            return False, "", f"{items} items < {LARGE_MEMORY}: too few for a missing word to mean no answer"
        sim = -1.0 if top_vector_sim is None else top_vector_sim
        weak_vec = sim < 1.0 - medium
        unseen = unseen_share >= UNSEEN_SHARE
        numbers = (
            f"best cosine {sim:.3f} {'<' if weak_vec else '>='} {1.0 - medium:.3f} (medium tier), "
            f"unseen words {unseen_share:.0%} {'>=' if unseen else '<'} {UNSEEN_SHARE:.0%} of the query's IDF mass"
        )
        if not (weak_vec and unseen):
            return False, "", numbers
        words = ", ".join(repr(t) for t in (unseen_terms or [])[:3])
        reason = (
            f"no confident match: {words or 'key words of the query'} appear in no stored item, "
            "and nothing stored is close in meaning"
        )
        return True, reason, numbers


def thresholds_path(fingerprint: str) -> Path:
    """Where thresholds a user derived live: ``<eval cache>/thresholds/<fingerprint>.json``."""
    from nbmemory.eval.cache import cache_root

    return cache_root() / "thresholds" / f"{fingerprint}.json"


def bundled_thresholds_path(fingerprint: str) -> Path:
    """Thresholds shipped with nbmemory for a model: ``nbmemory/eval/thresholds/<fingerprint>.json``."""
    return Path(__file__).resolve().parent.parent / "eval" / "thresholds" / f"{fingerprint}.json"


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


@lru_cache(maxsize=8)
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


def unseen_share(
    query: str, mass: float, unseen_idf: float, missing_terms: list[str]
) -> tuple[float, list[str]]:
    """The share of the query's IDF ``mass`` carried by terms no item holds, and the query's
    words behind those terms (``missing_terms`` are stems: ``kubernet`` for "kubernetes")."""
    words = [w for w in re.findall(r"[\w-]+", query) if any(w.lower().startswith(t) for t in missing_terms)]
    share = unseen_idf * len(missing_terms) / mass if mass > 0 else 0.0
    return share, words
