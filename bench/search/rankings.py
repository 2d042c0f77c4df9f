"""The ranked ids of a fixed query set on a memory file, saved as JSON, and two such files compared:
what a change to the search stages must leave equal (or explain).

Self-contained on purpose (only ``nbmemory``, numpy and the standard library), so the same file
runs against an older checkout of the package: ``PYTHONPATH=OLD python bench/search/rankings.py``.
The store is copied to a temporary folder first (the file given is never written). Query vectors
are computed once with the store's model, or read from ``--vectors`` (written there when absent),
so both runs rank with the same vectors.

    python -m bench.search.rankings dump --store DB --queries FILE [--k 10] [--vectors NPZ] --out JSON
    python -m bench.search.rankings compare BEFORE.json AFTER.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def read_queries(path: Path, limit: int | None = None) -> list[str]:
    """Queries from a JSONL file (its ``query`` fields) or a text file (one per line), in order."""
    out: list[str] = []
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line:
            continue
        out.append(json.loads(line)["query"] if line.startswith("{") else line)
    return out[:limit]


class _Fixed:
    """An embedder whose query vectors were computed beforehand (name and fingerprint passed through)."""

    def __init__(self, inner: Any, vectors: dict[str, np.ndarray]) -> None:
        self.inner = inner
        self.vectors = vectors
        self.name, self.fingerprint, self.dim = inner.name, inner.fingerprint, inner.dim
        pool = getattr(inner, "embed_with_spans", None)
        if callable(pool):  # a store with pooled passages (NBMEMORY_PASSAGE_METHOD=late) is read as is
            self.embed_with_spans = pool

    def embed_query(self, text: str) -> np.ndarray:
        return self.vectors[text]

    def embed_documents(self, texts: Any, progress: Any = None) -> np.ndarray:
        raise RuntimeError("a ranking dump never writes: no document is embedded")


def _embedder(model: str) -> Any:
    if model.startswith("fake:"):
        from nbmemory.embed.fake import FakeEmbedder

        # fake:DIM, or fake:DIM:TAG for a store made with a tagged fake (bench_shapes --fake: fake:384:bench)
        _, dim, *tag = model.split(":")
        return FakeEmbedder(dim=int(dim), tag=tag[0] if tag else "fake")
    from nbmemory.embed.loader import load_model

    return load_model(model, None)


def query_vectors(queries: list[str], model: str, cache: Path | None) -> tuple[Any, dict[str, np.ndarray]]:
    """The model and each query's vector (from ``cache`` when it holds them all)."""
    inner = _embedder(model)
    if cache is not None and cache.exists():
        with np.load(cache, allow_pickle=False) as data:
            held = dict(zip(data["queries"].tolist(), data["vecs"], strict=True))
        if all(q in held for q in queries):
            return inner, held
    vecs = {q: np.asarray(inner.embed_query(q), dtype=np.float32) for q in queries}
    if cache is not None:
        np.savez(cache, queries=np.array(queries), vecs=np.stack([vecs[q] for q in queries]))
    return inner, vecs


def dump(store: Path, queries: list[str], model: str, k: int, cache: Path | None) -> dict[str, Any]:
    """{query: {"ids": ranked ids, "more": each hit's other chunks}} for ``queries`` on a copy of ``store``."""
    import nbmemory
    from nbmemory import Memory

    inner, vecs = query_vectors(queries, model, cache)
    with tempfile.TemporaryDirectory(prefix="nbm-rankings-") as tmp:
        copy = Path(tmp) / store.name
        shutil.copy(store, copy)
        out: dict[str, Any] = {}
        with Memory(copy, embedder=_Fixed(inner, vecs), on_model_change="error") as mem:
            for q in queries:
                result = mem.search(q, k=k, log=False)
                out[q] = {"ids": result.ids, "more": [h.more for h in result.hits]}
    return {"store": str(store), "k": k, "package": str(Path(nbmemory.__file__).parent), "rankings": out}


def compare(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """How many queries rank the same ids; the ones that differ, with both lists."""
    a, b = before["rankings"], after["rankings"]
    common = [q for q in a if q in b]
    differ = [q for q in common if a[q]["ids"] != b[q]["ids"]]
    more = [q for q in common if q not in differ and a[q]["more"] != b[q]["more"]]
    return {
        "queries": len(common),
        "same_ids": len(common) - len(differ),
        "differ": [{"query": q, "before": a[q]["ids"], "after": b[q]["ids"]} for q in differ],
        "same_ids_other_more": len(more),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("dump", help="rank a fixed query set on a copy of a store")
    d.add_argument("--store", type=Path, required=True)
    d.add_argument("--queries", type=Path, required=True, help="JSONL with a query field, or one query a line")
    d.add_argument("--limit", type=int, default=None, help="the first N queries only")
    d.add_argument("--model", default="all-MiniLM-L6-v2", help="the store's model, or fake:DIM[:TAG]")
    d.add_argument("--k", type=int, default=10)
    d.add_argument("--vectors", type=Path, default=None, help="query vectors cache (.npz)")
    d.add_argument("--out", type=Path, required=True)
    c = sub.add_parser("compare", help="compare two dumps")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "dump":
        result = dump(args.store, read_queries(args.queries, args.limit), args.model, args.k, args.vectors)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        print(f"{len(result['rankings'])} rankings -> {args.out}", file=sys.stderr)
    else:
        report = compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
        print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
