"""Retrieval granularity on real notes: vectors of sentence windows, aggregated to their chunk.

The default pipeline now does "slide, max" for fusion (:mod:`nbmemory.store.passages`); this
script is how that was chosen, and measures the variants beside it.

    python -m bench.quality.granularity                       # jbranchaud-til, dev and test splits
    python -m bench.quality.granularity --window 400 --stride slide,tile --aggregate max,mean

MiniLM reads 256 word pieces; a 1,200-character chunk is near that, and a long section dilutes the
one sentence a question is about. This measures, without changing the store, what smaller vector
units would give: every chunk of two or more windows also gets one vector per window (consecutive
sentences, paragraphs and code blocks packed up to ``--window`` characters, the heading path
prefixed as for chunks), and a chunk's cosine becomes an aggregate of its own and its windows'
(``max``: the best of them; ``mean``: the mean of the chunk's and its best window's). The vector
retriever then ranks chunks by that aggregate over the whole store (exact), and convex fusion
uses it in place of the chunk cosine; BM25 stays on whole chunks. ``slide`` starts a window at
every sentence (about 5 windows per chunk here), ``tile`` cuts the text into disjoint windows
(about 2.3 per chunk).

The store is the one ``nbmemory eval notes`` builds (``Memory.index``, cached); window vectors
go through the same vector cache. Scores by :func:`nbmemory.eval.notes.run_notes_config`
(file level, ``pytrec_eval``). Writes ``--out`` (default ``bench/results/granularity-notes.json``).
A one-off A/B kept because the README's "Passages" table and :mod:`nbmemory.store.windows` cite it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from bench.lib.paths import NOTES_CORPUS, NOTES_QUERIES, RESULTS
from nbmemory import Memory, PipelineConfig
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.eval.cache import CachedEmbedder
from nbmemory.eval.notes import _NAMESPACE, _dataset_name, load_queries, prepare_notes_store, run_notes_config
from nbmemory.eval.report import to_markdown, write_json
from nbmemory.search import convex as convex_mod
from nbmemory.search import vector as vector_mod
from nbmemory.search.base import Query, Retrieved
from nbmemory.search.filters import Filters
from nbmemory.store import vectors
from nbmemory.store.chunks import embedding_text
from nbmemory.store.windows import windows as slide

DEFAULT_OUT = RESULTS / "granularity-notes.json"
#: Passages off: the windows measured here come from the patch below, the "chunks" rows have none
#: (the default, ``passages=True``, is "chunks + slide windows of 400 chars, max").
CONFIGS = {
    "default": PipelineConfig(passages=False),
    "vector": PipelineConfig(retrievers=("vector",)),
}


def windows(text: str, size: int, stride: str) -> list[str]:
    """``slide``: one window per starting sentence (:func:`nbmemory.store.windows.windows`, what
    passages use); ``tile``: disjoint windows."""
    return slide(text, size, disjoint=stride == "tile")


class WindowScores:
    """Aggregate cosines of every live chunk from its own vector and its windows' vectors."""

    def __init__(self, mem: Memory, embedder: CachedEmbedder, size: int, stride: str, aggregate: str) -> None:
        rows = mem.db.execute(
            "SELECT id, heading, text FROM chunks WHERE deleted_at IS NULL ORDER BY id"
        ).fetchall()
        self.ids = [int(r[0]) for r in rows]
        self.pos = {c: n for n, c in enumerate(self.ids)}
        owner: list[int] = []
        texts: list[str] = []
        for cid, heading, text in rows:
            found = windows(text, size, stride)
            if len(found) > 1:  # one window is the chunk itself
                owner += [self.pos[int(cid)]] * len(found)
                texts += [embedding_text(heading or "", w) for w in found]
        self.windows = len(texts)
        self.w = _unit(np.asarray(embedder.embed_documents(texts), dtype=np.float32))
        self.owner = np.asarray(owner, dtype=np.int64)
        stored = vectors.get(mem.db, self.ids)
        self.c = _unit(np.stack([np.asarray(stored[i], dtype=np.float32) for i in self.ids]))
        self.aggregate = aggregate

    def scores(self, qvec: np.ndarray) -> np.ndarray:
        q = qvec / np.linalg.norm(qvec)
        own = self.c @ q
        best = np.full(len(self.ids), -1.0, dtype=np.float32)
        np.maximum.at(best, self.owner, self.w @ q)
        if self.aggregate == "max":
            return np.maximum(own, best)
        return np.where(best > -1.0, (own + best) / 2.0, own)


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def patched(win: WindowScores) -> tuple[Callable[..., Retrieved], Callable[..., dict[int, float]]]:
    """The vector retriever and the pipeline's cosine lookup, reading the aggregate scores."""

    def retrieve(self: Any, query: Query, depth: int, filters: Filters) -> Retrieved:
        s = win.scores(query.vector())
        top = np.argsort(-s, kind="stable")[:depth]
        return Retrieved([(win.ids[i], float(s[i])) for i in top], notes={"method": "windows"})

    def cosines(self: Any, query: Query, got: Retrieved, ids: list[int]) -> dict[int, float]:
        s = win.scores(query.vector())
        return {i: float(s[win.pos[i]]) for i in ids if i in win.pos}

    return retrieve, cosines


def run_all(mem: Memory, corpus: Path, queries: Path, label: str) -> list[dict[str, Any]]:
    out = []
    for split in ("dev", "test"):
        loaded = load_queries(queries, split, corpus=corpus)
        for name, config in CONFIGS.items():
            s = run_notes_config(mem, name, config, loaded, corpus).summary
            row = {"units": label, "split": split, "system": name}
            row.update(
                {
                    key: s[key]
                    for key in (
                        "hit@1",
                        "hit@5",
                        "mrr@10",
                        "paraphrase_hit@1",
                        "keyword_hit@1",
                        "question_hit@1",
                    )
                }
            )
            out.append(row)
            print(time.strftime("%H:%M:%S"), row, file=sys.stderr, flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--corpus", default=str(NOTES_CORPUS))
    parser.add_argument("--queries", default=str(NOTES_QUERIES))
    parser.add_argument("--window", type=int, default=400, help="window size in characters (default 400)")
    parser.add_argument("--stride", default="slide,tile", help="slide and/or tile (default both)")
    parser.add_argument("--aggregate", default="max,mean", help="max and/or mean (default both)")
    parser.add_argument("--out", default=str(DEFAULT_OUT), help="write the JSON here (default %(default)s)")
    args = parser.parse_args()
    corpus, queries = Path(args.corpus), Path(args.queries)
    embedder = CachedEmbedder(SentenceTransformerEmbedder(), _dataset_name(corpus), log=None)
    info = prepare_notes_store(corpus, embedder, None, cache=True, log=None)
    rows: list[dict[str, Any]] = []
    counts: dict[str, int] = {}
    original = (vector_mod.VectorRetriever.retrieve, convex_mod.ConvexFusion._cosines)
    with Memory(info.path, embedder=embedder, namespace=_NAMESPACE) as mem:
        rows += run_all(mem, corpus, queries, "chunks")
        for stride in args.stride.split(","):
            for aggregate in args.aggregate.split(","):
                win = WindowScores(mem, embedder, args.window, stride, aggregate)
                label = f"chunks + {stride} windows of {args.window} chars, {aggregate}"
                counts[label] = win.windows
                retrieve, cosines = patched(win)
                vector_mod.VectorRetriever.retrieve = retrieve  # type: ignore[method-assign]
                convex_mod.ConvexFusion._cosines = cosines  # type: ignore[method-assign]
                try:
                    rows += run_all(mem, corpus, queries, label)
                finally:
                    vector_mod.VectorRetriever.retrieve, convex_mod.ConvexFusion._cosines = original
        chunks = int(mem.db.scalar("SELECT count(*) FROM chunks WHERE deleted_at IS NULL"))
    print(to_markdown(pl.DataFrame(rows)))
    print(f"\n{corpus}: {chunks} chunks; window vectors: {counts}")
    write_json({"corpus": str(corpus), "chunks": chunks, "windows": counts, "rows": rows}, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
