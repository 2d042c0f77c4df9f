"""Per-split rows from a ``bench.quality.notes_compare`` JSON (dev: the split methods were chosen
on; test: held out). Means over per-query values that notes_compare computed with pytrec_eval.
Prints two markdown tables; writes no file.

    python -m bench.quality.notes_splits bench/results/notes-compare.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bench.lib.paths import NOTES_QUERIES as QUERIES


def rows(result: dict, queries: dict[str, dict], split: str) -> list[dict[str, object]]:
    systems = {f"nbmemory {n}": c["per_query"] for n, c in result["nbmemory"]["configs"].items()}
    systems.update({n: p["per_query"] for n, p in result.get("peers", {}).items()})
    out = []
    for name, per_query in systems.items():
        mine = [r for r in per_query if queries[r["qid"]]["split"] == split]
        answerable = [r for r in mine if queries[r["qid"]]["kind"] != "miss"]
        misses = [r for r in mine if queries[r["qid"]]["kind"] == "miss"]
        row: dict[str, object] = {"system": name, "split": split, "answerable": len(answerable)}
        for metric in ("hit@1", "hit@5", "mrr@10"):
            row[metric] = round(sum(r[metric] for r in answerable) / len(answerable), 3)
        for kind in ("paraphrase", "keyword", "question"):
            of_kind = [r for r in answerable if queries[r["qid"]]["kind"] == kind]
            row[f"{kind}_hit@1"] = round(sum(r["hit@1"] for r in of_kind) / len(of_kind), 3)
        row["miss_flagged"] = f"{sum(bool(r.get('flagged') or r.get('empty')) for r in misses)}/{len(misses)}"
        row["false_flags"] = sum(bool(r.get("flagged") or r.get("empty")) for r in answerable)
        out.append(row)
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="a notes_compare result (JSON)")
    args = parser.parse_args(argv)
    result = json.loads(args.run.read_text())
    queries = {q["qid"]: q for q in map(json.loads, QUERIES.read_text().splitlines()) if q}
    for split in ("dev", "test"):
        table = rows(result, queries, split)
        cols = list(table[0])
        print("| " + " | ".join(cols) + " |")
        print("|" + "---|" * len(cols))
        for row in table:
            print("| " + " | ".join(str(row[c]) for c in cols) + " |")
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
