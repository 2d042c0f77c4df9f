"""The pipeline's optional stages as pure functions: hand-checkable inputs and outputs."""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from nbmemory.search.adaptive import fusion_weights, identifiers
from nbmemory.search.decay import ItemSignals, recency_factor
from nbmemory.search.dedup import Deduper, dedup
from nbmemory.search.mmr import mmr
from nbmemory.search.reject import RARE_ZIPF, Thresholds, Unseen, rare, unseen
from nbmemory.search.rerank import blend, gate
from nbmemory.search.rrf import rrf
from nbmemory.search.supersede import demote


def unit(*xs: float) -> np.ndarray:
    v = np.array(xs, dtype=np.float32)
    return v / np.linalg.norm(v)


# -- adaptive fusion -------------------------------------------------------------------------
def test_identifiers_are_found_and_words_are_not() -> None:
    found = identifiers("why did INC-4821 fail in parse_config or os.path.join at v2.3.1, code 5003?")
    assert {"INC-4821", "parse_config", "os.path.join", "v2.3.1", "5003"} <= set(found)
    assert identifiers("how do I rotate the token") == []


def test_identifier_carrying_the_query_leans_to_bm25() -> None:
    idf = {"inc": (1.5, 200), "4821": (5.5, 3)}
    ev = fusion_weights("INC-4821", idf, 7.5, [{"inc", "4821"}], {"INC-4821": ["inc", "4821"]})
    assert ev.weights["bm25"] > 1.5 > 0.5 > ev.weights["vector"]
    assert ev.identifiers == ["INC-4821"] and "identifier" in ev.reason


def test_identifier_absent_from_the_corpus_is_no_evidence() -> None:
    idf = {"inc": (1.5, 200), "9999": (7.5, 0)}
    ev = fusion_weights("INC-9999", idf, 7.5, [{"inc"}], {"INC-9999": ["inc", "9999"]})
    assert ev.identifiers == [] and ev.missing_terms == ["9999"]
    # 1.5 of 9.0 IDF covered: words the notes lack, so vectors lead.
    assert ev.evidence == pytest.approx(1.5 / 9.0)
    assert ev.weights["vector"] > ev.weights["bm25"]


def test_fully_covered_common_words_keep_equal_weights() -> None:
    idf = {"statin": (2.0, 300), "cancer": (1.2, 800)}
    ev = fusion_weights("statins cancer", idf, 8.9, [{"statin", "cancer"}, {"cancer"}], {})
    assert ev.evidence == pytest.approx(1.0)
    assert ev.weights == {"bm25": 1.0, "vector": 1.0}


def test_strength_zero_is_plain_rrf_and_bad_strength_is_refused() -> None:
    ev = fusion_weights("x", {"x": (1.0, 0)}, 1.0, [], {}, strength=0.0)
    assert ev.weights == {"bm25": 1.0, "vector": 1.0}
    with pytest.raises(ValueError, match="strength"):
        fusion_weights("x", {}, 1.0, [], {}, strength=1.0)


_EVIDENCE = """
from nbmemory.search.adaptive import fusion_weights
idf = {t: (v, 5) for t, v in zip("abcdefgh", (0.1, 0.2, 0.3, 0.7, 1.1, 2.3, 3.9, 1e-3))}
print(repr(fusion_weights("a b c d e f g h", idf, 9.0, [set("abcdefg")], {}).evidence))
"""


def test_the_evidence_does_not_follow_the_string_hashing() -> None:
    # A set of terms iterates in an order PYTHONHASHSEED sets; summed in that order, the IDF
    # covered differed in its last bit between processes (3 values over 6 seeds before the fix).
    printed = {
        subprocess.run(
            [sys.executable, "-c", _EVIDENCE],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in range(8)
    }
    assert len(printed) == 1


def test_per_retriever_k_sharpens_the_trusted_list() -> None:
    rankings = {"bm25": ["right", "a", "b", "wrong"], "vector": ["wrong", "c"]}
    # Weights alone, even 9:1, leave bm25 #4 + vector #1 above bm25 #1 (RRF at k=60 is flat)...
    assert rrf(rankings, k=60, weights={"bm25": 1.8, "vector": 0.2})[0][0] == "wrong"
    # ...the constant divided by the weight lets the trusted #1 win.
    sharp = rrf(
        rankings, k=60, weights={"bm25": 1.8, "vector": 0.2}, ks={"bm25": 60 / 1.8, "vector": 60 / 0.2}
    )
    assert sharp[0][0] == "right"
    assert dict(sharp)["right"] == pytest.approx(1.8 / (60 / 1.8 + 1))


# -- reranker gate and blend -------------------------------------------------------------------
def test_gate_skips_when_retrievers_agree_or_the_leader_is_clear() -> None:
    close = [(1, 0.0325), (2, 0.0320), (3, 0.0318), (4, 0.0317), (5, 0.0316)]
    assert gate(close, {"bm25": 1, "vector": 1}).run is False
    decision = gate(close, {"bm25": 1, "vector": 2})
    assert decision.run is True and "ambiguous" in decision.reason
    clear = [(1, 0.05), (2, 0.02), (3, 0.02), (4, 0.02), (5, 0.02)]
    assert gate(clear, {"bm25": 1, "vector": 2}).run is False


def test_blend_reorders_only_the_scored_head_by_rank() -> None:
    order = [1, 2, 3, 4]
    out = blend(order, {1: 0.1, 2: 0.9, 3: 0.5}, k=60)
    ids = [i for i, _ in out]
    # 2: fused #2 + ce #1; 1: fused #1 + ce #3; 3: fused #3 + ce #2 -> 2, then 1 and 3 tie at 1/61+1/63.
    assert ids[0] == 2 and set(ids[1:3]) == {1, 3} and ids[3] == 4
    assert dict(out)[2] == pytest.approx(1 / 62 + 1 / 61)
    assert [s for _, s in out] == sorted((s for _, s in out), reverse=True)


# -- MMR ---------------------------------------------------------------------------------------
def test_mmr_hand_computed() -> None:
    vecs = {1: unit(1, 0), 2: unit(1, 0.01), 3: unit(0, 1)}
    rel = {1: 1.0, 2: 0.9, 3: 0.5}
    picked = mmr([1, 2, 3], rel, vecs, lam=0.5)
    # 1 first; then 2 scores 0.5*0.8 - 0.5*~1.0 < 3 scores 0.5*0 - 0.5*0: the different one wins.
    assert [p for p, _, _ in picked] == [1, 3, 2]
    assert picked[2][2] == 1
    assert [p for p, _, _ in mmr([1, 2, 3], rel, vecs, lam=1.0)] == [1, 2, 3]
    with pytest.raises(ValueError, match="lambda"):
        mmr([1], rel, vecs, lam=1.5)


# -- dedup -------------------------------------------------------------------------------------
def test_dedup_collapses_same_words_and_contained_copies_but_not_different_facts() -> None:
    v = unit(1, 0)
    texts = {
        1: "Polars over pandas.",
        2: "polars   OVER pandas",  # same words
        3: "pandas over polars",  # same words, other order: another fact
        4: "Polars over pandas. Lazy queries are faster.",  # the first, with a line added
        5: "The on-call owner is Marek.",
    }
    kept, dropped = dedup([1, 2, 3, 4, 5], texts, {i: v for i in texts}, threshold=0.95)
    assert kept == [1, 3, 5]
    assert dropped == {2: (1, 1.0), 4: (1, pytest.approx(1.0))}


def test_dedup_needs_the_embeddings_to_agree_for_contained_text() -> None:
    texts = {1: "restart the worker", 2: "restart the worker only after the backup finished"}
    kept, _ = dedup([1, 2], texts, {1: unit(1, 0), 2: unit(0, 1)}, threshold=0.95)
    assert kept == [1, 2]


def _dedup_all_pairs(ids: list[int], texts: dict[int, str], vecs: dict[int, np.ndarray], threshold: float) -> list[int]:
    """The rule of :func:`dedup` checked against every kept item (the reference, quadratic)."""
    kept: list[int] = []
    seen: dict[str, int] = {}
    for i in ids:
        w = " ".join(re.findall(r"\w+", texts[i].lower()))
        if w and w in seen:
            continue
        padded = f" {w} "
        if w and any(
            (padded in f" {seen_w} " or f" {seen_w} " in padded) and float(vecs[j] @ vecs[i]) >= threshold
            for seen_w, j in seen.items()
        ):
            continue
        kept.append(i)
        if w:
            seen.setdefault(w, i)
    return kept


def test_dedup_finds_what_comparing_every_pair_finds_short_texts_included() -> None:
    rng = np.random.default_rng(3)
    vocab = ["a", "b", "c", "d"]
    for trial in range(40):
        texts: dict[int, str] = {}
        for i in range(60):
            n = int(rng.integers(0, 7))  # empty, one or two words, and longer
            texts[i] = " ".join(rng.choice(vocab, n)) if i % 5 else texts.get(i - 1, "a b c") + " d"
        vecs = {i: unit(1.0, float(rng.uniform(0, 0.2))) for i in texts}
        ids = list(texts)
        kept, _ = dedup(ids, texts, vecs, threshold=0.99)
        assert kept == _dedup_all_pairs(ids, texts, vecs, 0.99), trial


def _leaders(ids: list[int], texts: dict[int, str], vecs: dict[int, np.ndarray], source: dict[int, int],
             k: int, *, ask_all: bool) -> list[int]:
    """The walk of dedup and group: one leader per source, not a duplicate of an earlier kept
    candidate. ``ask_all``: every candidate is offered (the rule); else a candidate whose source
    already leads is only added (what the search does)."""
    deduper, leaders, led = Deduper(0.99), [], set()
    for i in ids:
        if source[i] in led and not ask_all:
            deduper.add(i, texts[i], vecs[i])
            continue
        if deduper.offer(i, texts[i], vecs[i]) is None and source[i] not in led:
            leaders.append(i)
            led.add(source[i])
            if len(leaders) == k:
                break
    return leaders


def test_candidates_added_unasked_leave_the_leaders_an_offer_of_each_gives() -> None:
    rng = np.random.default_rng(5)
    vocab = ["a", "b", "c", "d"]
    for trial in range(60):
        texts: dict[int, str] = {}
        for i in range(60):
            n = int(rng.integers(0, 7))
            texts[i] = " ".join(rng.choice(vocab, n)) if i % 4 else texts.get(i - 1, "a b c") + " d"
        vecs = {i: unit(1.0, float(rng.uniform(0, 0.2))) for i in texts}
        source = {i: int(rng.integers(0, 12)) for i in texts}
        ids = list(texts)
        assert _leaders(ids, texts, vecs, source, 8, ask_all=False) == _leaders(
            ids, texts, vecs, source, 8, ask_all=True
        ), trial


def _objects_kept_by_a_deduper(cells: int) -> int:
    """Objects the garbage collector tracks that a :class:`Deduper` still holds after ``cells``
    cells of one notebook were offered (all kept: each has words of its own)."""
    rng = np.random.default_rng(0)
    texts = [
        f"notebook training > section {n % 3}\n" + " ".join(f"w{n}x{j}" for j in range(25))
        for n in range(cells)
    ]
    vecs = [unit(*rng.standard_normal(8)) for _ in texts]
    gc.collect()
    was = gc.isenabled()
    gc.disable()  # no collection resets the count while it is read
    try:
        before = gc.get_count()[0]
        deduper = Deduper(0.95)
        for n, (text, vec) in enumerate(zip(texts, vecs, strict=True)):
            assert deduper.offer(n, text, vec) is None
        return gc.get_count()[0] - before
    finally:
        if was:
            gc.enable()


def test_dedup_postings_are_not_one_object_per_word_sequence() -> None:
    # A count, not a time: a list per word sequence of every kept item (about 75 per cell here)
    # made dedup the search's main source of garbage collections. A sequence held by one item
    # is an int; only the few shared by several (the heading path) are lists, so the objects
    # kept do not grow with the cells read.
    few, many = _objects_kept_by_a_deduper(20), _objects_kept_by_a_deduper(200)
    assert many <= 40
    assert many - few <= 5


# -- recency -----------------------------------------------------------------------------------
def test_recency_factor_is_bounded_and_prefers_recent_important_items() -> None:
    now = datetime(2026, 11, 22)
    fresh = ItemSignals(now - timedelta(days=1), None, 0.5, 0, False)
    old = ItemSignals(now - timedelta(days=365), None, 0.5, 0, False)
    old_but_used = ItemSignals(now - timedelta(days=365), now - timedelta(days=2), 0.5, 10, False)
    pinned = ItemSignals(now - timedelta(days=900), None, 0.0, 0, True)
    f_fresh, _ = recency_factor(fresh, now)
    f_old, why = recency_factor(old, now)
    assert 0.95 <= f_old < f_fresh <= 1.05 and "age 365 d" in why
    assert recency_factor(old, now, weight=0.2)[0] < f_old
    assert recency_factor(old_but_used, now)[0] > f_old  # last retrieval counts, not creation
    assert recency_factor(pinned, now)[0] == pytest.approx(1.05)
    with pytest.raises(ValueError, match="half_life_days"):
        recency_factor(fresh, now, half_life_days=0)


# -- supersede ---------------------------------------------------------------------------------
def test_superseded_item_moves_right_below_its_successor_or_to_the_end() -> None:
    order = [(1, 0.9), (2, 0.8), (3, 0.7), (4, 0.6)]
    assert [i for i, _ in demote(order, {1: 3})] == [2, 3, 1, 4]
    assert [i for i, _ in demote(order, {1: 99})] == [2, 3, 4, 1]
    assert [i for i, _ in demote(order, {1: 2, 2: 3})] == [3, 2, 1, 4]
    scores = [s for _, s in demote(order, {1: 3})]
    assert scores == sorted(scores, reverse=True)


# -- tiers and rejection -------------------------------------------------------------------------
def test_tiers_and_the_no_answer_flag_need_both_signals_against() -> None:
    t = Thresholds("fp", {"high": 0.25, "medium": 0.4, "low": 0.55}, "test")
    assert [t.tier(d) for d in (0.1, 0.3, 0.5, 0.7, None)] == ["high", "medium", "low", "none", "none"]
    kubernetes = Unseen({"kubernet": ["kubernetes"]}, 0.5)
    flagged, reason, numbers = t.should_reject(0.45, kubernetes)
    assert flagged and "'kubernetes' appears in no stored item" in reason and "0.450 < 0.600" in numbers
    assert t.should_reject(0.45, Unseen({"kubernet": ["kubernetes"]}, 0.2))[0] is False  # a small share
    assert t.should_reject(0.65, Unseen({"kubernet": ["kubernetes"]}, 0.9))[0] is False  # close in meaning
    # The best keyword match holds more of the query than the missing words carry.
    flagged, _, numbers = t.should_reject(0.45, kubernetes, covered=0.6)
    assert not flagged and "the best keyword match holds 60%" in numbers
    assert t.should_reject(None, Unseen({}, 0.0))[0] is False  # no indexable words: no keyword evidence
    none = Thresholds("fp", {}, "test")
    assert none.should_reject(0.0, kubernetes) == (False, "", "no tiers for this model")


def test_only_unseen_words_rare_in_english_count() -> None:
    missing = unseen("Kubernetes on my laptop, slimmed-down", 10.0, 2.0, ["kubernet", "laptop", "slim"])
    assert missing.words == {"kubernet": ["Kubernetes"], "laptop": ["laptop"], "slim": ["slimmed"]}
    # "laptop" is common English (Zipf 4.2): a memory lacking it says nothing.
    assert not rare("laptop") and rare("Kubernetes") and rare("asyncio") and rare("INC-4821")
    assert missing.share() == pytest.approx(0.4) and missing.names() == ["Kubernetes", "slimmed"]
    assert unseen("anything", 0.0, 2.0, []).share() == 0.0
    # Words outside ASCII are matched to their terms by prefix; a term without a word counts as
    # rare (the stemmer changed it past recognition: it is no English word).
    accented = unseen("Ñandú facts", 4.0, 2.0, ["ñandú", "xyzzi"])
    assert accented.words == {"ñandú": ["Ñandú"], "xyzzi": []} and accented.names() == ["Ñandú", "xyzzi"]
    t = Thresholds("fp", {"high": 0.25, "medium": 0.4, "low": 0.55}, "test")
    common = unseen("keep my laptop awake", 4.0, 2.0, ["laptop", "awak"])
    assert common.words == {"laptop": ["laptop"], "awak": ["awake"]} and common.share() == 0.0
    flagged, _, numbers = t.should_reject(0.3, common)
    assert not flagged and "unseen words rare in English 0% < 35%" in numbers
    flagged, reason, _ = t.should_reject(0.3, unseen("asyncio gather", 4.0, 2.0, ["asyncio", "gather"]))
    assert flagged and reason.startswith("no confident match: 'asyncio' appears in no stored item")


def test_rare_words_are_those_wordfreq_puts_under_zipf_3() -> None:
    from wordfreq import zipf_frequency

    queries = Path(__file__).resolve().parents[2] / "bench" / "data" / "notes-queries.jsonl"
    words = {
        w.lower() for line in queries.read_text().splitlines() for w in re.findall(r"[a-z]+", line, re.I)
    }
    words |= {"laptop", "awake", "bookmark", "kubernetes", "terraform", "asyncio", "slimmed", "the"}
    assert len(words) > 1000
    for word in sorted(words):
        assert rare(word) == (zipf_frequency(word, "en") < RARE_ZIPF), word
