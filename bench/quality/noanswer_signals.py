"""How well the no-answer signals separate questions without an answer, on the notes and on smaller
memories cut from them.

    python -m bench.quality.noanswer_signals                 # full corpus + 900/600/600/577/300-note subsets
    python -m bench.quality.noanswer_signals --quantile 0.1 --out OUT   # another near-miss quantile
    python -m bench.quality.noanswer_signals --queries bench/data/notes-queries-fresh.jsonl \
        --out bench/results/noanswer-signals-fresh.json        # the fresh set (no dev split)
    python -m bench.quality.noanswer_signals --rule 0.45,0,0.5 --out OUT   # a rule fitted elsewhere

For every judged question (``bench/data/notes-queries.jsonl``, dev and test) and every memory
(the whole jbranchaud-til corpus, then seeded random subsets holding up to a quarter of their notes from
the target notes, the questions whose targets all fell out dropped), it records what the search knows
at query time: the best cosine, the share of the query's IDF mass held by words no item holds
(``unseen``; ``unseen_rare`` counts only the words rare in English, :data:`nbmemory.search.reject.RARE_ZIPF`)
and the share the best keyword match holds (``coverage``). It then searches rules of
the form "flag when best cosine < a and unseen >= u and coverage < b" for the one that flags the
most dev misses over every memory with no dev false flag, and reports it, the shipped rule
(cosine < 0.60, unseen words rare in English >= 0.35 of the IDF mass and more of it than BM25's
best match among its top 5 holds), the rule before it (every
unseen word, nothing flagged below 1,000 items) and that rule without its floor, on the dev and test questions of every memory. A question set without a dev split (the fresh
one) has the rule fitted on the questions it is then scored on: that row is an upper bound for
the rule's form, not a held-out figure. ``--rule A,U,B`` adds a rule of that form chosen
elsewhere, to see how it transfers. Writes ``--out`` (default ``bench/results/noanswer-signals.json``).
"""

from __future__ import annotations

import fcntl
import itertools
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.paths import NOTES_CORPUS, NOTES_QUERIES, RESULTS
from nbmemory import Memory, PipelineConfig
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.eval.cache import CachedEmbedder
from nbmemory.eval.notes import _NAMESPACE, _dataset_name, load_queries, prepare_notes_store
from nbmemory.eval.report import write_json
from nbmemory.eval.subsets import cut_folder, present_notes, subset
from nbmemory.search import nearmiss, reject
from nbmemory.search.base import Query
from nbmemory.search.bm25 import idfs as bm25_idfs
from nbmemory.search.evidence import lexical_evidence
from nbmemory.search.filters import Filters
from nbmemory.search.pipeline import SearchPipeline
from nbmemory.search.trace import Trace

CORPUS = NOTES_CORPUS
QUERIES = NOTES_QUERIES
OUT = RESULTS / "noanswer-signals.json"
#: (notes, seed) of the smaller memories.
SUBSETS = ((900, 3), (600, 0), (600, 1), (577, 4), (300, 2))


def signals(corpus: Path, embedder: CachedEmbedder, queries: Path = QUERIES) -> list[dict[str, Any]]:
    """Per question answerable in ``corpus`` (or without an answer): the query-time signals."""
    present = present_notes(corpus)
    questions = [
        q
        for q in load_queries(queries, "all", corpus=CORPUS)
        if not q.targets or any(t in present for t in q.targets)
    ]
    info = prepare_notes_store(corpus, embedder, None, cache=True, log=None)
    rows = []
    with Memory(info.path, embedder=embedder, namespace=_NAMESPACE) as mem:
        pipeline = SearchPipeline(mem.db, embedder, PipelineConfig())
        items = int(mem.db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))
        near = nearmiss.near_miss(mem.db, embedder)
        for q in questions:
            # The shipped flag as a search raises it (both rules), and the cosine it compared.
            result = mem.search(q.query, k=10, log=False)
            convex = result.trace.stage("convex")
            found = pipeline._retrieve(Query(q.query, embedder), 50, Filters(), Trace(q.query))
            evidence = lexical_evidence(pipeline.db, q.query, found["bm25"], pipeline.config.adaptive_strength)
            assert evidence is not None
            missing = reject.unseen(q.query, evidence.mass, evidence.unseen_idf, evidence.missing_terms)
            bm25 = found["bm25"]
            idf, _ = bm25_idfs(mem.db, bm25.terms) if bm25.terms else ({}, 0.0)
            coverage = max(
                (sum(idf[t][0] for t in bm25.matched.get(i, ()) if t in idf) for i in bm25.ids), default=0.0
            )
            rows.append(
                {
                    "qid": q.qid,
                    "kind": q.kind,
                    "split": q.split,
                    "items": items,
                    "cosine": max(found["vector"].scores.values(), default=-1.0),
                    "unseen": missing.idf_share * len(missing.words),
                    "unseen_rare": missing.share(),
                    "unseen_words": {t: [(w, reject.rare(w)) for w in ws] for t, ws in missing.words.items()},
                    "coverage": coverage / evidence.mass if evidence.mass > 0 else 0.0,
                    # What the pipeline compares the rare unseen share with: BM25's top 5 only.
                    "covered": evidence.evidence,
                    "flagged": result.rejected,
                    "best_cosine": convex.notes.get("best_cosine") if convex is not None else None,
                    "near_miss": near.cosine if near is not None else None,
                }
            )
    return rows


def counts(
    rows: list[dict[str, Any]], a: float, u: float, b: float, floor: int = 0, rare: bool = False
) -> tuple[int, int, int, int]:
    """(misses flagged, misses, answerable flagged, answerable) under one rule: nothing flagged
    below ``floor`` items; with ``rare``, only the unseen words rare in English count, and only
    when they outweigh what the best keyword match holds (the shipped rule)."""
    flagged = [
        r["cosine"] < a
        and r["unseen_rare" if rare else "unseen"] >= u
        and (not rare or r["unseen_rare"] > r["covered"])
        and r["coverage"] < b
        and r["items"] >= floor
        for r in rows
    ]
    miss = [f for f, r in zip(flagged, rows, strict=True) if r["kind"] == "miss"]
    answerable = [f for f, r in zip(flagged, rows, strict=True) if r["kind"] != "miss"]
    return sum(miss), len(miss), sum(answerable), len(answerable)


def as_searched(rows: list[dict[str, Any]]) -> tuple[int, int, int, int]:
    """(misses flagged, misses, answerable flagged, answerable) as the search flagged them."""
    miss = [r["flagged"] for r in rows if r["kind"] == "miss"]
    answerable = [r["flagged"] for r in rows if r["kind"] != "miss"]
    return sum(miss), len(miss), sum(answerable), len(answerable)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quantile", type=float, default=nearmiss.QUANTILE, help="near-miss quantile")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--queries",
        type=Path,
        default=QUERIES,
        help="judged questions (default: the first set); a set without a dev split has the rule "
        "fitted on all of its questions, which makes that row an upper bound, not a held-out figure",
    )
    parser.add_argument(
        "--rule",
        metavar="A,U,B",
        help="also score the rule 'cosine < A, unseen >= U, coverage < B' (e.g. one fitted on another set)",
    )
    args = parser.parse_args(argv)
    extra = None
    if args.rule:
        try:
            extra = tuple(float(x) for x in args.rule.split(","))
        except ValueError:
            extra = ()
        if len(extra) != 3 or not all(np.isfinite(extra)):
            parser.error(f"--rule takes three finite numbers A,U,B, got {args.rule!r}")
    nearmiss.QUANTILE = args.quantile
    embedder = CachedEmbedder(SentenceTransformerEmbedder(), _dataset_name(CORPUS), log=None)
    every = load_queries(args.queries, "all", corpus=CORPUS)
    targets = sorted({t for q in every for t in q.targets})
    memories: dict[str, list[dict[str, Any]]] = {"all 1,871 notes": signals(CORPUS, embedder, args.queries)}
    # At the same path each run (one folder per question set), so the evaluation store cache keeps
    # one store per cut instead of one per run.
    # A second run on the same set waits for the first (it would delete the first one's cuts).
    work = cut_folder(f"nbm-noanswer-{args.queries.stem}")
    lock = open(work.with_name(work.name + ".lock"), "w")  # noqa: SIM115 - held until the process ends
    fcntl.flock(lock, fcntl.LOCK_EX)
    shutil.rmtree(work, ignore_errors=True)
    try:
        for size, seed in SUBSETS:
            folder = subset(CORPUS, targets, size, seed, work / f"notes-{size}-{seed}" / "corpus")
            memories[f"{size} notes (seed {seed})"] = signals(folder, embedder, args.queries)
            print(f"{size} notes (seed {seed}) done", file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    def split(name: str, part: str) -> list[dict[str, Any]]:
        return [r for r in memories[name] if r["split"] == part]

    # A set without a dev split (the fresh one) has the rule fitted on the questions it is scored on.
    fit_on = "dev" if any(q.split == "dev" for q in every) else "test"
    best: tuple[int, float, float, float] | None = None
    for a, u, b in itertools.product(
        np.arange(0.40, 0.66, 0.01), np.arange(0.0, 0.5, 0.02), (0.3, 0.4, 0.5, 0.6, 0.7, 1.01)
    ):
        results = [counts(split(name, fit_on), a, u, b) for name in memories]
        if all(r[2] == 0 for r in results):
            flagged = sum(r[0] for r in results)
            if best is None or flagged > best[0]:
                best = (flagged, float(a), float(u), float(b))
    assert best is not None
    flagged_best, a, u, b = best
    shipped = (0.60, reject.UNSEEN_SHARE, 9.0)
    rules: dict[str, tuple[float, float, float, int, bool]] = {}
    if flagged_best > 0:
        upper = " (an upper bound)" if fit_on == "test" else ""
        fitted = f"fitted on {fit_on}{upper}: cosine < {a:.2f}, unseen >= {u:.2f}, coverage < {b:.2f}"
        rules[fitted] = (a, u, b, 0, False)
    else:
        print(
            f"no rule of this form flags a {fit_on} miss without a false flag: none fitted", file=sys.stderr
        )
    rare_only = (
        "rare words alone: cosine < 0.60, unseen words rare in English >= 0.35 and > the best match's share"
    )
    rules[rare_only] = (*shipped, 0, True)
    before = "before: cosine < 0.60, unseen >= 0.35, nothing flagged below 1,000 items"
    rules[before] = (*shipped, 1000, False)
    if extra:
        given = f"given: cosine < {extra[0]:.2f}, unseen >= {extra[1]:.2f}, coverage < {extra[2]:.2f}"
        rules[given] = (*extra, 0, False)
    rules["cosine < 0.60, unseen >= 0.35 (every word, any size)"] = (*shipped, 0, False)
    table = []
    print(
        "| rule | memory | items | dev misses flagged | dev false flags | test misses flagged | test false flags |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in memories:
        dev, test = as_searched(split(name, "dev")), as_searched(split(name, "test"))
        items = memories[name][0]["items"]
        near = memories[name][0]["near_miss"]
        rule = "shipped: rare unseen words, or below the memory's near-miss cosine"
        table.append(
            {"rule": rule, "memory": name, "items": items, "near_miss": near, "dev": dev, "test": test}
        )
        print(
            f"| {rule} ({near:.3f}) | {name} | {items} | {dev[0]}/{dev[1]} | {dev[2]}/{dev[3]} "
            f"| {test[0]}/{test[1]} | {test[2]}/{test[3]} |"
        )
    for rule, (ra, ru, rb, floor, rare) in rules.items():
        for name in memories:
            dev = counts(split(name, "dev"), ra, ru, rb, floor, rare)
            test = counts(split(name, "test"), ra, ru, rb, floor, rare)
            items = memories[name][0]["items"]
            table.append({"rule": rule, "memory": name, "items": items, "dev": dev, "test": test})
            print(
                f"| {rule} | {name} | {items} | {dev[0]}/{dev[1]} | {dev[2]}/{dev[3]} "
                f"| {test[0]}/{test[1]} | {test[2]}/{test[3]} |"
            )
    write_json({"quantile": args.quantile, "memories": memories, "rules": table}, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
