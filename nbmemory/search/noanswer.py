"""The no-answer flag as a search stage: whether the memory holds no confident answer.

The rules are :mod:`nbmemory.search.reject`'s (the model's tiers, the unseen words rare in
English, the misspellings) and :mod:`nbmemory.search.nearmiss`'s (this memory's near-miss
cosine); this stage reads what they need from the search and records the decision in the trace.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbmemory.search import nearmiss
from nbmemory.search import reject as reject_mod
from nbmemory.store import passages
from nbmemory.store.rows import CandidateRow, HitRow, fetch_rows

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder
    from nbmemory.search.adaptive import QueryEvidence
    from nbmemory.search.base import Ranked, Retrieved
    from nbmemory.search.trace import Stage, Trace
    from nbmemory.store.db import Database


class NoAnswer:
    """Flags "no confident answer" for a search's hits; the hits are kept (an interactive search
    never shows an empty screen).

    Parameters
    ----------
    db:
        The memory searched: the misspelling look-up, the near-miss cosine and the first hits'
        sources come from it.
    embedder:
        The memory's model: its fingerprint selects the thresholds.
    """

    def __init__(self, db: Database, embedder: Embedder) -> None:
        self.db = db
        self.embedder = embedder

    def __call__(
        self,
        query: str,
        order: Ranked,
        found: dict[str, Retrieved],
        evidence: QueryEvidence | None,
        trace: Trace,
    ) -> tuple[bool, str]:
        """``(flagged, reason in words)`` for the hits ``order`` (cut to k) of ``query``, recorded
        as the ``reject`` stage; no stage and no flag without lexical evidence (no BM25) or without
        the vector side."""
        if evidence is None or "vector" not in found:
            return False, ""
        with trace.step("reject", compare=True) as stage:
            stage.output = [i for i, _ in order]
            thresholds = reject_mod.thresholds_for(self.embedder.fingerprint)
            if thresholds is None:
                stage.notes = {"rejected": False, "why": "no thresholds derived for this model"}
                return False, ""
            top_sim = max(found["vector"].scores.values(), default=None)
            missing = reject_mod.unseen(query, evidence.mass, evidence.unseen_idf, evidence.missing_terms)
            rejected, reason, numbers = thresholds.should_reject(top_sim, missing, evidence.evidence)
            if rejected:
                # Only a flag is worth the look-up: a missing word may be a misspelling.
                spelled = reject_mod.without_typos(self.db, missing)
                if spelled.typos:
                    rejected, reason, numbers = thresholds.should_reject(top_sim, spelled, evidence.evidence)
                    numbers += f"; read as misspellings: {', '.join(sorted(spelled.typos))}"
            fusion = trace.stage("convex")
            best = fusion.notes.get("best_cosine") if fusion is not None else None
            weak_words = evidence.mass > 0 and evidence.evidence < reject_mod.KEYWORD_HALF
            if not rejected and best is not None and weak_words:
                # Two retrievers that pick the same source on their own are evidence it answers.
                if self._first_sources_agree(found):
                    numbers += "; BM25 and the vector side put the same source first"
                # A candidate whose passages are still being made may rise above the near-miss
                # cosine once they are: no call of "far from everything" rests on its own vector.
                elif waiting := self._awaiting_passages(found, fusion):
                    numbers += f"; passages of {waiting} candidates are still being made: not judged far"
                # Only then is the memory's near-miss cosine read (measured once per memory state).
                elif (near := nearmiss.near_miss(self.db, self.embedder)) is not None:
                    # The first hit's fused score as fusion gave it (later stages rescale scores).
                    top = fusion.scores.get(order[0][0]) if fusion is not None and order else None
                    rejected, reason, more = reject_mod.far_from_everything(
                        best, near.cosine, evidence.evidence, top
                    )
                    numbers += f"; {more}"
            stage.notes = {"rejected": rejected, "why": numbers}
        return rejected, reason

    def _awaiting_passages(self, found: dict[str, Retrieved], fusion: Stage | None) -> int:
        """How many of the fused candidates await their passages (the background refiner has not
        made them yet); 0 without a read when none may (:func:`nbmemory.store.passages.awaiting`)."""
        fingerprint = self.embedder.fingerprint
        if not passages.refining(self.db, fingerprint):
            return 0
        retrieved = [i for got in found.values() for i in got.ids]
        ids = list(dict.fromkeys([*retrieved, *(fusion.scores if fusion else {})]))
        rows = fetch_rows(self.db, ids, CandidateRow)
        contents = [(r.content_hash, r.heading or "", r.text, r.kind) for r in rows.values()]
        waiting = set(passages.awaiting(self.db, fingerprint, contents))
        return sum(r.content_hash in waiting for r in rows.values())

    def _first_sources_agree(self, found: dict[str, Retrieved]) -> bool:
        """Whether every retriever's first item comes from one source (a remembered item is a
        source of its own)."""
        firsts = [got.ids[0] for got in found.values() if got.ids]
        if len(firsts) < 2:
            return False
        rows = fetch_rows(self.db, firsts, HitRow)
        sources = {rows[i].source if i in rows and rows[i].source else i for i in firsts}
        return len(sources) == 1
