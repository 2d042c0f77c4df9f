"""The search pipeline's settings: :class:`PipelineConfig`, one field per knob, one boolean per stage."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from nbmemory.errors import ConfigError

RETRIEVERS = ("bm25", "vector")
FUSIONS = ("convex", "rrf")
EQUAL_WEIGHTS = {"bm25": 1.0, "vector": 1.0}


@dataclass
class PipelineConfig:
    """Knobs of the search pipeline. Every boolean is one stage, on or off.

    Stages run in this order: retrieval (``retrievers``), fusion (``fusion``: convex
    combination of scores or RRF; ``adaptive`` weights), ``reranker`` (gated cross-encoder),
    ``recency``, ``supersede``, ``dedup``, ``mmr``, ``group`` (one result per source), the cut
    to ``k``, ``reject`` (the no-answer flag) and the relevance tiers. Why that order: see
    docs/search-pipeline.md, "Why this order".

    Parameters
    ----------
    retrievers:
        Which retrievers run; one alone gives a single-retriever search (for evaluation).
    depth:
        Candidates taken from each retriever; ``None`` means ``max(50, 3 * k)``.
    fusion:
        ``"convex"``: ``vector_weight * cosine + (1 - vector_weight) * BM25 / query IDF mass``
        (scores on absolute scales, so a weak best match stays weak); ``"rrf"``: Reciprocal
        Rank Fusion of the two rankings.
    passages:
        In convex fusion, a candidate's cosine is the best of its own and its passages' (windows
        of consecutive sentences, :mod:`nbmemory.store.passages`): the one sentence a question is
        about is not diluted by the rest of a long chunk. Off: chunk vectors only.
    vector_weight:
        The vector side's weight in the convex combination. MiniLM's cosines of relevant notes
        spread over about a third of the range BM25's share of the query spans, so 0.8 gives
        both sides a similar say; an identifier the corpus holds moves it towards BM25.
    fill_bm25:
        In convex fusion, a candidate only the vector side found gets its BM25 score too (as one
        only BM25 found gets its cosine). Off, such a candidate counts 0 on the keyword side
        whatever words it holds, so the ranking depends on how deep BM25 was read (on ``k``).
    literal:
        In convex fusion, an identifier of the query (``NEXT_PUBLIC_``, ``INC-2307``) counts for
        a candidate only where it is written as such, when some candidate has it so; BM25 alone
        also matches its pieces scattered over a note.
    turns:
        In convex fusion, a conversation turn (an item with a ``conversation``) is read with the
        turns around it, and a question naming one of the speakers favours that speaker's turns
        (:mod:`nbmemory.search.turns`). Items without a conversation are untouched.
    time_words:
        A query's own time words ("yesterday", "last week", "in March") narrow the search to
        the items that happened then, when some did (:mod:`nbmemory.search.when`; the trace's
        ``when`` says what was done).
    symbols:
        A query token made of punctuation more than letters (``g??``, ``$0``, ``:/``), which the
        full-text index drops, is one more keyword term, held where it is written as such
        (:mod:`nbmemory.search.symbols`).
    rrf_k:
        RRF constant.
    weights:
        Per-retriever RRF weights, for ``fusion="rrf"`` with ``adaptive`` off; other weights
        with any other fusion are refused (they would change nothing): the convex fusion's
        weight is ``vector_weight``.
    adaptive:
        Per-query weights from the lexical evidence (:mod:`nbmemory.search.adaptive`).
    adaptive_strength:
        How far adaptive weights may move from 1 (0.8: from 1.8/0.2 to 0.2/1.8).
    reranker:
        A sentence-transformers CrossEncoder name or folder; ``None`` turns reranking off.
    rerank_depth:
        Fused candidates the cross-encoder scores when the gate lets it run.
    rerank_gate:
        The gate: the cross-encoder runs only when the fused top is ambiguous (the top score
        leads the next four by at most this share, and the retrievers disagree on #1);
        ``None`` runs it on every query.
    recency:
        Multiply fused scores by a bounded recency/importance/frequency factor.
    half_life_days, recency_weight:
        Decay half-life, and the factor's range ``[1 - w, 1 + w]``. RRF scores of neighbouring
        ranks differ by 2-3 %, so 0.05 lets age move an item a few places among near-ties, and
        no further (0.05 was chosen on the scenario benchmark's seed 11; 0.1 already cost
        paraphrase and procedure questions there).
    supersede:
        An item another item supersedes (a ``supersedes`` link) ranks right below it, or at
        the end when the newer one is not among the results.
    dedup:
        Collapse exact and near-duplicate results (cosine >= ``dedup_threshold``).
    mmr:
        Maximal Marginal Relevance with ``mmr_lambda`` (1.0 = relevance only).
    group:
        One result per source (note, notebook, file): its best chunk, with the others in
        ``Hit.more``; off gives the flat list of chunks.
    reject:
        Flag "no confident answer" (``SearchResult.rejected``, hits kept) when neither signal
        supports the best hit (:mod:`nbmemory.search.reject`).
    """

    retrievers: tuple[str, ...] = RETRIEVERS
    depth: int | None = None
    fusion: str = "convex"
    passages: bool = True
    vector_weight: float = 0.8
    fill_bm25: bool = True
    literal: bool = True
    turns: bool = True
    time_words: bool = True
    symbols: bool = True
    rrf_k: int = 60
    weights: dict[str, float] = field(default_factory=lambda: dict(EQUAL_WEIGHTS))
    adaptive: bool = True
    adaptive_strength: float = 0.8
    reranker: str | None = None
    rerank_depth: int = 20
    rerank_gate: float | None = 0.15
    recency: bool = False
    half_life_days: float = 30.0
    recency_weight: float = 0.05
    supersede: bool = True
    dedup: bool = True
    dedup_threshold: float = 0.95
    mmr: bool = False
    mmr_lambda: float = 0.7
    group: bool = True
    reject: bool = True

    def __post_init__(self) -> None:
        if not self.retrievers:
            raise ConfigError("at least one retriever is needed: bm25, vector or both")
        for name in self.retrievers:
            if name not in RETRIEVERS:
                raise ConfigError(f"retriever {name!r} is not one of {', '.join(RETRIEVERS)}")
        if self.depth is not None and self.depth <= 0:
            raise ConfigError(f"depth must be greater than 0, got {self.depth}")
        if self.rrf_k <= 0:
            raise ConfigError(f"rrf_k must be greater than 0, got {self.rrf_k}")
        if not 0.0 <= self.adaptive_strength < 1.0:
            raise ConfigError(f"adaptive_strength must be in [0, 1), got {self.adaptive_strength}")
        if self.rerank_depth <= 1:
            raise ConfigError(f"rerank_depth must be at least 2, got {self.rerank_depth}")
        if self.half_life_days <= 0:
            raise ConfigError(f"half_life_days must be greater than 0, got {self.half_life_days}")
        if not 0.0 <= self.recency_weight < 1.0:
            raise ConfigError(f"recency_weight must be in [0, 1), got {self.recency_weight}")
        if not 0.0 < self.dedup_threshold <= 1.0:
            raise ConfigError(f"dedup_threshold must be in (0, 1], got {self.dedup_threshold}")
        if self.fusion not in FUSIONS:
            raise ConfigError(f"fusion must be one of {', '.join(FUSIONS)}, got {self.fusion!r}")
        if not 0.0 <= self.vector_weight <= 1.0:
            raise ConfigError(f"vector_weight must be between 0 and 1, got {self.vector_weight}")
        if not 0.0 <= self.mmr_lambda <= 1.0:
            raise ConfigError(f"mmr_lambda must be between 0 and 1, got {self.mmr_lambda}")
        if self.weights != EQUAL_WEIGHTS and (self.fusion != "rrf" or self.adaptive) and len(self.retrievers) > 1:
            # A setting that changes nothing must not look as if it did.
            raise ConfigError(
                f"weights {self.weights} are the RRF weights of fusion='rrf' with adaptive=False; with "
                f"fusion={self.fusion!r}{' and adaptive on' if self.adaptive else ''} they would change nothing. "
                "For the default convex fusion set vector_weight (the vector side's share, 0 to 1); for "
                "weighted RRF pass fusion='rrf', adaptive=False"
            )
        for name, w in self.weights.items():
            if w < 0:
                raise ConfigError(f"weight for {name!r} must be >= 0, got {w}")

    @classmethod
    def plain(cls, retrievers: tuple[str, ...] = RETRIEVERS, **changes: Any) -> PipelineConfig:
        """Retrieval and equal-weight RRF only: every optional stage off (the evaluation baselines)."""
        off: dict[str, Any] = {f.name: False for f in dataclasses.fields(cls) if isinstance(f.default, bool)}
        return cls(retrievers=retrievers, **{**off, "fusion": "rrf", **changes})
