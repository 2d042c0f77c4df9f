"""Secret redaction benchmark: recall per vendor, overall recall, false-positive rate; prints JSON
(``--out`` also writes it).

The labelled set is generated (seeded) by :mod:`tests.reliability.secret_corpus` (test data): fake keys in each
vendor's documented format, in many contexts, and look-alikes that are not secrets. With
``--pipeline`` the positives are also written into notebooks (cell sources and outputs), indexed,
and looked for in the stored text, the embedder's input and the full-text index.

Run from the repository root (the labelled set is imported from ``tests/``):

    python -m bench.ingest.secrets_bench                      # seed 20240611, 6 per format
    python -m bench.ingest.secrets_bench --per-format 10 --seeds 1,2,3,4,5 --pipeline
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from nbmemory.eval.report import write_json
from tests.reliability import secret_corpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--seeds", default=str(secret_corpus.SEED), help="comma-separated RNG seeds (default 20240611)"
    )
    parser.add_argument("--per-format", type=int, default=6, help="secrets per vendor format (default 6)")
    parser.add_argument("--per-family", type=int, default=12, help="look-alikes per family (default 12)")
    parser.add_argument("--pipeline", action="store_true", help="also index the positives as notebooks")
    parser.add_argument("--out", type=Path, help="also write the JSON here")
    args = parser.parse_args()
    runs = []
    for seed in (int(s) for s in args.seeds.split(",")):
        started = time.perf_counter()
        cases = secret_corpus.positives(seed=seed, per_format=args.per_format)
        looks = secret_corpus.negatives(seed=seed, per_family=args.per_family)
        result = secret_corpus.score(cases, looks).to_dict()
        result = {"seed": seed, **result, "seconds": round(time.perf_counter() - started, 2)}
        if args.pipeline:
            started = time.perf_counter()
            with tempfile.TemporaryDirectory() as folder:
                result["pipeline"] = secret_corpus.pipeline_score(folder, cases).to_dict()
            result["pipeline"]["seconds"] = round(time.perf_counter() - started, 2)
        runs.append(result)
    result = runs[0] if len(runs) == 1 else runs
    print(json.dumps(result, indent=2))
    if args.out:
        write_json(result, args.out)


if __name__ == "__main__":
    main()
