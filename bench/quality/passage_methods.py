"""How passage vectors are made, and what it does to ranking: windows embedded alone (the
default), or pooled from the chunk's own forward pass ("late chunking"), on the judged notes.

    python -m bench.quality.passage_methods [--methods windows,late,late-heading,late-away-0.5,late-masked-6] [--store DB] [--out FILE]

It takes the indexed store of the 1,871 notes from the evaluation cache (built on first use, as
``notes_compare`` builds it), and for each method copies it, makes every passage again that way,
measures the memory's near-miss cosine again (the no-answer flag reads it), and runs both judged
question sets with the default search. ``late-heading`` pools each window with its heading's
tokens. Prints MRR@10, misses flagged and false flags per split, and the seconds the passages
took; ``late-away-B`` moves each pooled window away from its chunk's vector, ``unit(w - B * c)``
(pooled once for every B); ``late-masked-N`` pools from a pass whose top N layers let a token read
only the tokens sharing a window with it (:mod:`bench.quality.masked_pooling`), ``late-masked-N-heading``
with the heading's tokens. Writes ``--out`` (default ``bench/results/passage-methods.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.paths import DATA, NOTES_CORPUS, RESULTS
from bench.quality.masked_pooling import MaskedLate
from nbmemory import Memory
from nbmemory.embed.base import EmbedderProxy, normalise
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.eval.cache import CachedEmbedder
from nbmemory.eval.notes import _NAMESPACE, _dataset_name, load_queries, prepare_notes_store, run_notes_config
from nbmemory.eval.report import write_json
from nbmemory.search import nearmiss
from nbmemory.search.config import PipelineConfig
from nbmemory.store import passages

OUT = RESULTS / "passage-methods.json"
QUESTION_SETS = [DATA / "notes-queries.jsonl", DATA / "notes-queries-fresh.jsonl"]


#: Late-pooled vectors by text, so that the ``late-away-*`` methods pool once between them.
_POOLED: dict[str, tuple[Any, Any]] = {}


class Method(EmbedderProxy):
    """The bundled embedder, making passages one way. ``away``: each pooled window vector moved
    away from its chunk's own vector, ``unit(w - away * c)`` (0: as pooled)."""

    def __init__(
        self, inner: SentenceTransformerEmbedder, pooled: bool, context: bool = False, away: float = 0.0
    ) -> None:
        super().__init__(inner)
        self.context, self.away = context, away
        if pooled:
            self.embed_with_spans = self._pool

    def _pool(self, texts: Any, spans: Any, keep: Any = None, progress: Any = None) -> Any:
        if not self.away:
            return self.inner.embed_with_spans(texts, spans, keep, progress=progress, context=self.context)
        keep = list(keep) if keep is not None else [0] * len(texts)
        todo = [i for i, t in enumerate(texts) if t not in _POOLED]
        if todo:
            docs, pooled = self.inner.embed_with_spans(
                [texts[i] for i in todo], [spans[i] for i in todo], [keep[i] for i in todo], progress=progress
            )
            _POOLED.update({texts[i]: (docs[j], pooled[j]) for j, i in enumerate(todo)})
        out = []
        for text in texts:
            chunk, windows = _POOLED[text]
            out.append([None if w is None else normalise((w - self.away * chunk)[None, :])[0] for w in windows])
        return np.stack([_POOLED[t][0] for t in texts]), out

    def embed_documents(self, texts: Any, progress: Any = None) -> Any:
        return self.inner.embed_documents(texts, progress=progress)

    def embed_query(self, text: str) -> Any:
        return self.inner.embed_query(text)


def splits_of(path: Path) -> dict[str, str]:
    tag = "-fresh" if "fresh" in path.name else ""
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["qid"]: r.get("split", "test") + tag for r in rows}


def run_method(store: Path, embedder: SentenceTransformerEmbedder, name: str, work: Path) -> dict[str, Any]:
    if name.startswith("late-away-"):
        maker = Method(embedder, pooled=True, away=float(name.removeprefix("late-away-")))
    elif name.startswith("late-masked-"):
        top, _, heading = name.removeprefix("late-masked-").partition("-")
        if not top.isdigit() or heading not in ("", "heading"):
            raise SystemExit(f"{name!r}: give late-masked-N or late-masked-N-heading")
        maker = Method(MaskedLate(embedder, int(top)), pooled=True, context=heading == "heading")  # type: ignore[arg-type]
    else:
        maker = {
            "windows": Method(embedder, pooled=False),
            "late": Method(embedder, pooled=True),
            "late-heading": Method(embedder, pooled=True, context=True),
        }[name]
    # Pooling is used only when asked for (nbmemory.store.passages.method).
    os.environ["NBMEMORY_PASSAGE_METHOD"] = "windows" if name == "windows" else "late"
    copy = work / f"{name}.duckdb"
    shutil.copy(store, copy)
    with Memory(copy, embedder=embedder, namespace=_NAMESPACE) as mem:
        started = time.perf_counter()
        with mem.db.transaction():
            mem.db.execute("DELETE FROM passages")
        mem.db.passage_cache.clear()
        made = passages.fill_missing(mem.db, maker)  # type: ignore[arg-type]
        seconds = time.perf_counter() - started
        # Else the first search finds them made another way than the embedder makes them, and
        # makes them again (passages.upgrade), plain.
        mem.db.set_meta("passage_method", passages.SEPARATE if name == "windows" else passages.LATE)
        # The near-miss cosine was measured with the store's passages: measure it again.
        nearmiss.forget(mem.db, embedder.fingerprint)
        nearmiss.near_miss(mem.db, embedder)
        splits: dict[str, dict[str, Any]] = {}
        for path in QUESTION_SETS:
            questions = load_queries(path, "all", corpus=NOTES_CORPUS)
            split_of = splits_of(path)
            run = run_notes_config(mem, "default", PipelineConfig(), questions, NOTES_CORPUS)
            rr: dict[str, list[float]] = defaultdict(list)
            flags: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
            for q in questions:
                split = split_of[q.qid]
                if q.kind == "miss":
                    flags[split][0] += int(run.flagged[q.qid])
                    flags[split][1] += 1
                else:
                    rr[split].append(run.per_query[q.qid]["mrr@10"])
                    flags[split][2] += int(run.flagged[q.qid])
            for split, values in rr.items():
                flagged, misses, false = flags[split]
                splits[split] = {
                    "mrr@10": round(sum(values) / len(values), 4),
                    "answerable": len(values),
                    "misses_flagged": f"{flagged}/{misses}",
                    "false_flags": false,
                }
    copy.unlink()
    return {"method": name, "window_vectors": made, "passage_seconds": round(seconds, 1), "splits": splits}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", default="windows,late,late-heading", help="comma-separated (default %(default)s)")
    parser.add_argument("--store", type=Path, help="an indexed store of the notes to start from (default: the cache's)")
    parser.add_argument("--out", default=str(OUT), help="write the JSON here (default %(default)s)")
    args = parser.parse_args()
    embedder = SentenceTransformerEmbedder()
    store = args.store
    if store is None:
        cached = CachedEmbedder(embedder, _dataset_name(NOTES_CORPUS), log=None)
        store = prepare_notes_store(NOTES_CORPUS, cached, None, cache=True, log=None).path
    rows = []
    with tempfile.TemporaryDirectory() as work:
        for name in args.methods.split(","):
            rows.append(run_method(store, embedder, name.strip(), Path(work)))
            print(json.dumps(rows[-1]), flush=True)
    store_arg = f" --store {args.store}" if args.store else ""
    command = f"python -m bench.quality.passage_methods --methods {args.methods}{store_arg} --out {args.out}"
    write_json({"command": command, "corpus": str(NOTES_CORPUS), "runs": rows}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
