"""Convex combination of normalised retriever scores, as a pure function.

Rank fusion (RRF) forgets how far apart the scores are: a vector hit at cosine 0.71 and one at
0.35 count the same once both are rank 1 somewhere. A convex combination keeps that evidence:
``score(d) = sum_r w_r * s_r(d)`` over scores each retriever put on a common scale
(:class:`ConvexFusion` puts them there), with an item a retriever did not
return counting 0 from it.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import replace
from itertools import chain
from typing import TYPE_CHECKING, TypeVar

import numpy as np

from nbmemory.search.adaptive import QueryEvidence, idf_sum
from nbmemory.search.base import Query, Ranked, Retrieved, retriever_ranks
from nbmemory.search.evidence import lexical_evidence, query_idfs
from nbmemory.search.filters import Filters
from nbmemory.search.pool import cosines, stored_once
from nbmemory.search.trace import Trace
from nbmemory.search.turns import CONTEXT_SHARE, SPEAKER_GAIN, Turns, turns_of, vector_weight
from nbmemory.store import passages
from nbmemory.store.db import Database
from nbmemory.store.rows import CandidateRow, HitRow, fetch_rows

if TYPE_CHECKING:
    from nbmemory.embed.base import Embedder
    from nbmemory.search.config import PipelineConfig

K = TypeVar("K", bound=Hashable)

#: Candidates up to which fusion reads every candidate's stored vector with those it lacks, so the
#: pool after fusion takes the store's lock no more (a first pass fuses a few hundred); past that,
#: in a deep grouped pass, copying every row costs more than that lock, so only those it lacks.
READ_WITH_MISSING = 500


def convex(scores: Mapping[str, Mapping[K, float]], weights: Mapping[str, float]) -> list[tuple[K, float]]:
    """Fuse normalised scores: ``sum_r weights[r] * scores[r][d]``, best first.

    Parameters
    ----------
    scores:
        Retriever name -> {id: score on a common scale, higher is better}.
    weights:
        Retriever name -> weight (non-negative; a retriever without one gets 0).

    Returns
    -------
    (id, fused score) pairs, best first; ties broken by the best single score, then by first
    appearance, so the order is deterministic.
    """
    for name, w in weights.items():
        if w < 0:
            raise ValueError(f"weight for {name!r} must be >= 0, got {w}")
    # O(n log n) in the n items given, as arrays: hundreds of candidates in a notebook memory.
    # Each item's sum runs in retriever order (0 + w1*s1 + w2*s2), as a loop over dicts would.
    items = list(dict.fromkeys(chain.from_iterable(scores.values())))
    order = dict(zip(items, range(len(items)), strict=True))
    fused = np.zeros(len(order))
    best = np.full(len(order), -np.inf)
    for name, by_id in scores.items():
        at = np.fromiter(map(order.__getitem__, by_id), dtype=np.intp, count=len(by_id))
        values = np.fromiter(by_id.values(), dtype=np.float64, count=len(by_id))
        fused[at] += weights.get(name, 0.0) * values
        best[at] = np.maximum(best[at], values)
    ranked = np.lexsort((np.arange(len(order)), -best, -fused))
    return list(zip([items[j] for j in ranked.tolist()], fused[ranked].tolist(), strict=True))


class ConvexParts(Mapping[K, dict[str, float]]):
    """The parts of each item's convex score ``(1 - alpha) * lexical + alpha * cosine``, named,
    as a mapping item -> parts whose values are made when read: a search reads those of the few
    items it shows and explains, not of every fused candidate (hundreds in a notebook memory).

    ``bm25``: the keyword share at the configured weight, ``(1 - base_alpha) * lexical``;
    ``identifier``: what the identifier lean added to it, ``(base_alpha - alpha) * lexical``
    (the lean moves weight from the cosine to the keyword share); ``cosine``: the chunk's own
    cosine, ``alpha * chunk_cosine``; ``passage``: what its best passage raised that by,
    ``alpha * (cosine - chunk_cosine)``. They sum to the fused score.

    Parameters
    ----------
    lexical:
        Item -> keyword share (as fused; absent counts 0).
    chunk_cosine, cosine:
        Item -> the chunk's cosine, and the cosine fused (raised to the best passage's).
    alpha, base_alpha:
        The vector weight used, and the configured one before the identifier lean.
    items:
        The items to break down.
    context, speaker, alpha_of:
        Item -> what its neighbours added to its keyword share, its speaker gain, and the vector
        weight it was fused with when that is not ``alpha`` (turns only).
    """

    def __init__(
        self,
        lexical: Mapping[K, float],
        chunk_cosine: Mapping[K, float],
        cosine: Mapping[K, float],
        alpha: float,
        base_alpha: float,
        items: Sequence[K],
        context: Mapping[K, float] | None = None,
        speaker: Mapping[K, float] | None = None,
        alpha_of: Mapping[K, float] | None = None,
    ) -> None:
        self._inputs = (lexical, chunk_cosine, cosine, alpha, base_alpha)
        self._turns = (context or {}, speaker or {}, alpha_of or {})
        self._items = dict.fromkeys(items)

    def __getitem__(self, item: K) -> dict[str, float]:
        if item not in self._items:
            raise KeyError(item)
        lexical, chunk_cosine, cosine, alpha, base_alpha = self._inputs
        context, speaker, alpha_of = self._turns
        if item in alpha_of:
            alpha = base_alpha = alpha_of[item]  # a turn's own weight: no identifier lean
        lex = lexical.get(item, 0.0)
        raised = cosine.get(item, 0.0)
        own = chunk_cosine.get(item, raised)
        parts = {
            "bm25": (1.0 - base_alpha) * lex,
            "identifier": (base_alpha - alpha) * lex,
            "cosine": alpha * own,
            "passage": alpha * (raised - own),
        }
        if item in context:
            parts["neighbours"] = (1.0 - alpha) * context[item]
        if item in speaker:
            parts["speaker and date"] = speaker[item]
        return parts

    def __contains__(self, item: object) -> bool:
        return item in self._items

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)


def query_mass(idf: Mapping[str, tuple[float, int]], unseen_idf: float) -> float:
    """The query's IDF mass: the sum of its terms' IDF, a term no item holds at ``unseen_idf``.

    A BM25 score divided by it is the share of the query an item matches (about 1 for an item
    holding every query term once at average length; above 1 with repeats or in short items):
    an absolute scale, unlike division by the best score, which makes a poor best match look
    perfect.
    """
    return sum(value if df > 0 else unseen_idf for value, df in idf.values())


def scale_bm25(scores: Mapping[K, float], mass: float) -> dict[K, float]:
    """BM25 scores as shares of the query's IDF mass (:func:`query_mass`); 0 for a massless query."""
    if mass <= 0:
        return {item: 0.0 for item in scores}
    return {item: s / mass for item, s in scores.items()}


class ConvexFusion:
    """The default fusion stage (the :class:`~nbmemory.search.base.Fusion` role):
    ``vector_weight * cosine + (1 - vector_weight) * keyword share`` for every candidate either
    retriever found, with the cosine raised to the candidate's best passage and the keyword
    share read as :meth:`_lexical` says; the vector weight leans towards BM25 for identifiers the
    corpus holds. It needs both retrievers. Cost: linear in the candidates (one exact cosine and
    one BM25 lookup each, one passage lookup per candidate with passages)."""

    name = "convex"

    def __init__(self, db: Database, embedder: Embedder, config: PipelineConfig) -> None:
        self.db = db
        self.embedder = embedder
        self.config = config

    def __call__(
        self,
        query: Query,
        found: dict[str, Retrieved],
        k: int,
        trace: Trace,
        pool_size: int,
        filters: Filters,
    ) -> tuple[QueryEvidence | None, Ranked]:
        """Convex combination of the cosine and the BM25 share of the query, for every candidate."""
        config = self.config
        ranks = retriever_ranks(found)
        with trace.step(self.name) as stage:
            evidence = lexical_evidence(self.db, query.text, found.get("bm25"), self.config.adaptive_strength)
            alpha = config.vector_weight
            why = "fixed weights"
            if evidence is not None and config.adaptive and evidence.lean > 0:
                # Identifiers the corpus holds are what an embedding cannot see.
                alpha = config.vector_weight * (1.0 - 0.5 * evidence.lean)
                why = evidence.reason
            elif evidence is not None and config.adaptive:
                why = "cosine and keyword share on their own scales"
            weights = {"bm25": 1.0 - alpha, "vector": alpha}
            candidates = list(dict.fromkeys(i for got in found.values() for i in got.ids))
            turns = turns_of(self.db, query.text, candidates, filters) if config.turns else None
            if turns is not None:
                candidates += turns.added(candidates)
            exact = self._cosines(query, found["vector"], candidates)
            # In candidate order, whichever way the cosines were read: ties break by first seen.
            cosine = {i: exact[i] for i in candidates if i in exact}
            rescored = None
            chunk_cosine = cosine
            if config.passages:
                cosine, rescored = self._passage_cosines(query, cosine)
            bm25, filled = found["bm25"], 0
            if config.fill_bm25:
                bm25, filled = self._fill_bm25(bm25, candidates)
            lexical = self._lexical(bm25, evidence)
            sides = {"bm25": lexical, "vector": cosine}
            context: dict[int, float] = {}
            gain: dict[int, float] = {}
            alpha_of: dict[int, float] = {}
            shown = weights
            if turns is not None:
                sides, weights, context, gain, alpha_of = self._turns(turns, lexical, cosine, alpha, candidates)
                turn_alpha = next(iter(alpha_of.values()), alpha)
                # What a turn was fused with (each side's scores arrive weighted).
                shown = {"bm25": 1.0 - turn_alpha, "vector": turn_alpha}
                stage.notes["turns"] = {
                    "turns": len(alpha_of),
                    "vector_weight": round(turn_alpha, 3),
                    "speaker": turns.named,
                    "dates": [str(p) for p in turns.dates],
                    "neighbour_share": CONTEXT_SHARE,
                    "gain": SPEAKER_GAIN,
                }
            fused = convex(sides, weights)[:pool_size]
            stage.notes.update(weights={n: round(w, 3) for n, w in shown.items()}, why=why)
            if filled:
                stage.notes["bm25_filled"] = filled
            if rescored is not None:
                stage.notes["with_passages"] = rescored
            if cosine:
                # What the no-answer flag compares with the memory's near-miss cosine.
                stage.notes["best_cosine"] = round(max(cosine.values()), 4)
            if evidence is not None:
                stage.notes.update(evidence=round(evidence.evidence, 3), mass=round(evidence.mass, 3))
            stage.output = [i for i, _ in fused]
            stage.scores = dict(fused)
            stage.parts = ConvexParts(  # type: ignore[assignment]  # a read-only mapping
                lexical, chunk_cosine, cosine, alpha, config.vector_weight, stage.output, context, gain, alpha_of
            )
            stage.detail = {
                doc: ", ".join(
                    (f"{name} #{ranks[name][doc]}" if doc in ranks[name] else f"{name} -")
                    + f" ({(cosine if name == 'vector' else lexical).get(doc, 0.0):.3f})"
                    for name in found
                )
                for doc in stage.output[:k]
            }
        return evidence, list(fused)

    @staticmethod
    def _turns(
        turns: Turns, lexical: dict[int, float], cosine: dict[int, float], alpha: float, candidates: list[int]
    ) -> tuple[dict[str, dict[int, float]], dict[str, float], dict[int, float], dict[int, float], dict[int, float]]:
        """The convex inputs with conversation turns weighed as turns (:mod:`nbmemory.search.turns`):
        each side's scores already weighted per item (a turn by the weight its candidates'
        separation gives, any other item by ``alpha``), the keyword share of a turn raised by its
        neighbours', the speaker's gain; and those parts, for the explanation."""
        members = turns.members
        turn_alpha = vector_weight(cosine, lexical, members, alpha)
        alpha_of = {i: turn_alpha for i in candidates if i in members}
        context = turns.context(lexical)
        keyword = {i: lexical.get(i, 0.0) + context.get(i, 0.0) for i in {*lexical, *context}}
        gain = turns.speaker_gain(candidates)
        for i, more in turns.date_gain(candidates).items():
            gain[i] = gain.get(i, 0.0) + more
        sides = {
            "bm25": {i: (1.0 - alpha_of.get(i, alpha)) * s for i, s in keyword.items()},
            "vector": {i: alpha_of.get(i, alpha) * c for i, c in cosine.items()},
            "speaker": gain,
        }
        return sides, dict.fromkeys(sides, 1.0), context, gain, alpha_of

    @staticmethod
    def _fill_bm25(bm25: Retrieved, candidates: list[int]) -> tuple[Retrieved, int]:
        """BM25's answer with the scores of the candidates it ranked below its cut (found by the
        vector side) added after its own, and how many of them hold a query term."""
        known = bm25.scores
        below = [i for i in candidates if i not in known]
        if not below or bm25.score_of is None:
            return bm25, 0
        scores, held = bm25.score_of(below)
        ranked = bm25.ranked + [(i, scores[i]) for i in below if i in scores]
        return replace(bm25, ranked=ranked, matched={**bm25.matched, **held}), len(scores)

    def _lexical(self, bm25: Retrieved, evidence: QueryEvidence | None) -> dict[int, float]:
        """The keyword side on the convex scale: the BM25 score as a share of the query's IDF mass,
        at least the share of that mass the item holds (tf and length aside), so an item holding
        a rare query word is not sunk by BM25's length normalisation."""
        mass = evidence.mass if evidence is not None else 0.0
        scaled = scale_bm25(bm25.scores, mass)
        if mass <= 0 or not bm25.terms:
            return scaled
        idf, _ = query_idfs(self.db, bm25)
        # Hundreds of candidates hold a few distinct combinations of the query's terms: each
        # combination's share is summed once (in sorted order: the same sum in every process).
        shares: dict[frozenset[str], float] = {}
        for item, terms in bm25.matched.items():
            if item in scaled:
                key = frozenset(terms)  # the same set, when the memory-resident index made it
                held = shares.get(key)
                if held is None:
                    held = shares[key] = idf_sum(idf, key) / mass
                scaled[item] = max(scaled[item], held)
        if self.config.literal and evidence is not None and evidence.identifiers:
            self._literal_identifiers(scaled, bm25, evidence, idf)
        return scaled

    def _literal_identifiers(
        self,
        scaled: dict[int, float],
        bm25: Retrieved,
        evidence: QueryEvidence,
        idf: dict[str, tuple[float, int]],
    ) -> None:
        """An identifier counts where it is written, not where its pieces are scattered.

        BM25 splits ``NEXT_PUBLIC_`` into ``next`` and ``public``, and a note about the ``public``
        schema that mentions what comes next matches it as well as the note that uses the
        prefix. When some candidate holds an identifier of the query as written (case aside), a
        candidate that holds only its pieces loses the share of its BM25 score those pieces gave.
        """
        rows = fetch_rows(self.db, list(scaled), HitRow)
        texts = {i: f"{row.heading}\n{row.text}".lower() for i, row in rows.items()}
        for name in evidence.identifiers:
            if name in bm25.symbol_idf:
                # The retriever found where a symbol is written as such: ``:/`` is not in ``https://``.
                written = {item for item in texts if name in bm25.matched.get(item, ())}
            else:
                written = {item for item, text in texts.items() if name.lower() in text}
            if not written:
                continue
            pieces = set(evidence.pieces[name])
            for item in texts:
                if item in written:
                    continue
                terms = bm25.matched.get(item, set())
                held = idf_sum(idf, terms)
                lost = idf_sum(idf, terms & pieces)
                if held > 0 and lost > 0:
                    scaled[item] *= 1.0 - lost / held

    def _cosines(self, query: Query, got: Retrieved, ids: list[int]) -> dict[int, float]:
        """Cosine similarity to the query of every candidate (the vector side's own, else exact).
        When some must be read, every candidate's stored vector is read with them (up to
        :data:`READ_WITH_MISSING` candidates; a deeper pass reads only those it lacks): the pool
        after fusion finds them in the query's memo instead of taking the store's lock again."""
        if all(i in got.scores for i in ids):
            return dict(got.scores)
        wanted = ids if len(ids) <= READ_WITH_MISSING else [i for i in ids if i not in got.scores]
        return cosines(self.db, query.vector(), ids, got.scores, stored_once(self.db, wanted, query.memo))

    def _passage_cosines(self, query: Query, cosine: dict[int, float]) -> tuple[dict[int, float], int]:
        """Each candidate's cosine raised to its best passage's (:mod:`nbmemory.store.passages`),
        and how many candidates had passages."""
        if passages.none_stored(self.db, self.embedder.fingerprint):
            return cosine, 0  # no passage to find: skip reading the candidates' content hashes
        rows = fetch_rows(self.db, list(cosine), CandidateRow)
        hashes = {i: row.content_hash for i, row in rows.items()}
        best = passages.best(self.db, self.embedder.fingerprint, query.vector(), hashes)
        return {i: max(c, best.get(i, c)) for i, c in cosine.items()}, len(best)
