"""Relevance tiers and no-answer rejection, from thresholds derived for the active model.

The thresholds come from the diagnostics of the evaluation (``nbmemory.eval.diagnostics``):
tiers from the probability that a BEIR document at a given cosine distance is judged relevant,
rejection levels from the scenario benchmark's answerable questions. They are per model
(keyed by the embedder's fingerprint): a model without derived thresholds gets no tiers and no
rejection, never constants borrowed from another model or a paper.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

TIERS = ("high", "medium", "low")


@dataclass(frozen=True)
class Thresholds:
    """Per-model levels. ``tiers``: tier -> max cosine distance. Rejection: both below."""

    fingerprint: str
    tiers: dict[str, float]
    reject_vector_sim: float | None
    reject_evidence: float | None
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

    def should_reject(self, top_vector_sim: float | None, evidence: float) -> tuple[bool, str]:
        """Reject only when the vector **and** the keyword signal are both weak (MemX's R1)."""
        if self.reject_vector_sim is None or self.reject_evidence is None:
            return False, "no rejection levels for this model"
        sim = -1.0 if top_vector_sim is None else top_vector_sim
        weak_vec = sim < self.reject_vector_sim
        weak_kw = evidence < self.reject_evidence
        why = (
            f"best cosine {sim:.3f} {'<' if weak_vec else '>='} {self.reject_vector_sim:.3f}, "
            f"lexical evidence {evidence:.2f} {'<' if weak_kw else '>='} {self.reject_evidence:.2f}"
        )
        return weak_vec and weak_kw, why


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
    reject = data.get("reject") or {}
    tiers = {k: float(v) for k, v in (data.get("distance_tiers") or {}).items() if v is not None}
    return Thresholds(
        fingerprint=fingerprint,
        tiers=tiers,
        reject_vector_sim=reject.get("vector_sim_below"),
        reject_evidence=reject.get("evidence_below"),
        source=str(data.get("created", "")),
    )
