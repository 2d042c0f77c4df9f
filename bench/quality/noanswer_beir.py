"""How often the no-answer flag fires on BEIR, where every judged query has an answer.

Searches every judged test query of SciFact and NFCorpus in the harness's cached stores (build
them first with ``nbmemory eval beir --data ...``) and counts the flagged ones under the shipped
rule (missing words rare in English, more of the query than its best keyword match holds; or a
best cosine below the memory's near-miss cosine with no keyword match holding half the query),
under its rare-word part alone, and under the previous one (every missing word, whatever the
best match holds),
with the NDCG@10 (pytrec_eval) of the flagged queries against that of all of them: a flag on a
query the search answers well is a false flag.

    python -m bench.quality.noanswer_beir [--data ../shared/datasets/beir/scifact ../shared/datasets/beir/nfcorpus]

Prints a few lines per dataset; writes no file.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.lib.paths import BEIR as DATA

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def _mean(per: dict[str, float], qids: Iterable[str]) -> float:
    values = [per.get(q, 0.0) for q in qids]
    return statistics.mean(values) if values else float("nan")


def main(argv: list[str] | None = None) -> int:
    import pytrec_eval

    from nbmemory import Memory
    from nbmemory.embed.sentence import SentenceTransformerEmbedder
    from nbmemory.eval import beir
    from nbmemory.eval.cache import cache_root
    from nbmemory.eval.harness import _NAMESPACE
    from nbmemory.search import reject

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=[str(DATA / "scifact"), str(DATA / "nfcorpus")])
    args = parser.parse_args(argv)
    embedder = SentenceTransformerEmbedder()
    shipped, decide, far = reject.rare, reject.Thresholds.should_reject, reject.far_from_everything

    def previous(self: Any, top: float | None, missing: Any, covered: float = 0.0) -> tuple[bool, str, str]:
        return decide(self, top, missing)  # what the best match holds did not count

    def never(best: float, near: float, covered: float, top: float | None = None) -> tuple[bool, str, str]:
        return False, "", ""

    # Rule -> (which missing words count, the rare-word rule, the near-miss rule).
    rules: dict[str, tuple[Any, Any, Any]] = {
        "shipped": (shipped, decide, far),
        "rare words alone": (shipped, decide, never),
        "previous": (lambda word: True, previous, never),
    }

    for folder in args.data:
        dataset = beir.load(folder)
        stores = sorted((cache_root() / "stores").glob(f"{dataset.name}-*.duckdb"), key=os.path.getmtime)
        if not stores:
            print(
                f"{dataset.name}: no cached store; run nbmemory eval beir --data {folder} first",
                file=sys.stderr,
            )
            return 2
        run: dict[str, dict[str, float]] = {}
        flagged: dict[str, set[str]] = {rule: set() for rule in rules}
        with tempfile.TemporaryDirectory() as tmp:
            copy = Path(tmp) / "store.duckdb"
            shutil.copy(stores[-1], copy)  # searches write their log: leave the cache as it was
            with Memory(copy, embedder=embedder, namespace=_NAMESPACE) as mem:
                for qid, text in dataset.queries.items():
                    for rule in flagged:
                        reject.rare, reject.Thresholds.should_reject, reject.far_from_everything = rules[rule]
                        result = mem.search(text, k=10, log=False)
                        if result.rejected:
                            flagged[rule].add(qid)
                        if rule == "shipped":
                            run[qid] = {str(h.source): 1.0 / (i + 1) for i, h in enumerate(result.hits)}
            reject.rare, reject.Thresholds.should_reject, reject.far_from_everything = rules["shipped"]
        per = {
            q: v["ndcg_cut_10"]
            for q, v in pytrec_eval.RelevanceEvaluator(dataset.qrels, {"ndcg_cut.10"}).evaluate(run).items()
        }

        print(
            f"{dataset.name}: {len(dataset.queries)} judged queries, NDCG@10 {_mean(per, dataset.queries):.3f}"
        )
        for rule, qids in flagged.items():
            good = sum(per.get(q, 0.0) >= 0.5 for q in qids)
            print(
                f"  {rule}: {len(qids)} flagged, their NDCG@10 {_mean(per, qids):.3f}, {good} of them at >= 0.5"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
