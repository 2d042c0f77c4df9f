"""A small BEIR collection cut from a real one, in the BEIR layout, for the notebook tests and the
wheel check (``python -m tests.notebooks.beir_subset SRC DEST``): the first judged test queries,
their judged documents, then other documents up to a total, as :func:`nbmemory.eval.beir.load`
slices them. Nothing is downloaded."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from nbmemory.eval.beir import load

#: The collections of this project's machines (docs/evaluation/ablation.md), when present.
SHARED_BEIR = Path(__file__).resolve().parents[3] / "shared" / "datasets" / "beir"


def cut(source: Path, into: Path, queries: int = 8, docs: int = 80) -> Path:
    """Write ``queries`` judged queries and ``docs`` documents of ``source`` into ``into/<name>``."""
    ds = load(source, "test", queries, docs)
    target = into / source.name
    (target / "qrels").mkdir(parents=True, exist_ok=True)
    with (target / "corpus.jsonl").open("w", encoding="utf-8") as out:
        for doc in ds.corpus.values():
            out.write(json.dumps({"_id": doc.id, "title": doc.title, "text": doc.text}) + "\n")
    with (target / "queries.jsonl").open("w", encoding="utf-8") as out:
        for qid, text in ds.queries.items():
            out.write(json.dumps({"_id": qid, "text": text}) + "\n")
    judged = {d for rel in ds.qrels.values() for d in rel}
    lines = ["query-id\tcorpus-id\tscore"] + [
        f"{q}\t{d}\t{r}" for q, rel in ds.qrels.items() for d, r in rel.items() if d in ds.corpus
    ]
    assert judged & set(ds.corpus), "the cut kept no judged document"
    (target / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source", type=Path, help="folder holding BEIR collections (scifact, nfcorpus)")
    parser.add_argument("dest", type=Path)
    parser.add_argument("--names", default="scifact,nfcorpus")
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--docs", type=int, default=80)
    args = parser.parse_args()
    for name in args.names.split(","):
        print(cut(args.source / name, args.dest, args.queries, args.docs))


if __name__ == "__main__":
    main()
