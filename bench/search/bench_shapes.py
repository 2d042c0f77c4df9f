"""Search latency per stage on real-shaped memories, beside the SQLite reference given the same chunks.

The existing search benchmark (``bench_search``) measures one shape: two-sentence chunks with no
source, one chunk per item. Real memories are notebooks with dozens of cells each and notes with
many sections, where grouping per file, dedup and passages read much deeper. Shapes:

- ``notes``: the jbranchaud-til notes (1,871 files) as ``nbmemory eval notes`` indexed them
  (its cached store, copied; never written); queries: the judged notes questions.
- ``notebooks``: the hf-notebooks corpus (249 notebooks) indexed once with the bundled model
  (:mod:`bench.lib.shapes`); queries: markdown headings of its cells (a fixed sample).
- ``mix``: ``--mix-n`` items (default 50,000) made from both: every chunk of both stores, then
  copies until the count is reached; copy ``c`` of a chunk is its text plus the word ``copy<c>``
  and source plus ``#copy<c>``, its vector the original plus Gaussian noise (0.02 per dimension,
  cosine about 0.93), renormalised, and its passages likewise (as ``bench_scale`` makes its
  million); queries: both sets, alternating.
- ``DIR``: any folder of notes or notebooks (``--corpus``), indexed once like ``notebooks``.

Every search is the default search at ``k`` (10) with the query vector computed beforehand
(the query embedding is measured alone and reported beside it). nbmemory and the reference run
query by query, alternating which goes first. Per stage, p50 and p95 of the trace's times, and
what each stage read (candidates fused, read by dedup and group, passes); where the slowest
searches spent their time (a garbage collection, a write of the search log that overlapped it, an
earlier pass); and how many garbage collections ran per 100 searches, by generation (a count).

    python -m bench.search.bench_shapes [--shapes notes,notebooks,mix] [--corpus DIR ...]
        [--queries 100] [--warmup 20] [--k 10] [--mix-n 50000] [--no-log] [--out FILE]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.measure import dist, forget_queries, loadavg, log, machine_info
from bench.lib.paths import DATA, NOTES_CORPUS, RESULTS, SHARED
from bench.lib.shapes import NAMESPACE, eval_notes_store, fake_embedder, store_for, store_root
from bench.lib.sqlite_ref import SqliteReference

os.environ.setdefault("HF_HUB_OFFLINE", "1")

NOTEBOOKS = SHARED / "datasets" / "notebooks" / "hf-notebooks" / "corpus"
STAGES = ("bm25", "vector", "convex", "rrf", "rerank", "recency", "supersede", "dedup", "mmr", "group",
          "reject", "hydrate")
NOISE = 0.02


class Precomputed:
    """The bundled model with every query's vector computed beforehand: search work alone."""

    def __init__(self, inner: Any, vectors: dict[str, np.ndarray]) -> None:
        self.inner = inner
        self.vectors = vectors
        self.name, self.fingerprint, self.dim = inner.name, inner.fingerprint, inner.dim
        pool = getattr(inner, "embed_with_spans", None)
        if callable(pool):
            self.embed_with_spans = pool

    def embed_query(self, text: str) -> np.ndarray:
        # Any other text (the near-miss calibration embeds chunk titles, once per memory, before
        # the measured searches: see bench_shape) goes to the model.
        found = self.vectors.get(text)
        return self.inner.embed_query(text) if found is None else found

    def embed_documents(self, texts: Any, progress: Any = None) -> np.ndarray:
        raise RuntimeError("the benchmark never writes documents to a measured store")


def passages_as_stored(store: Path) -> str:
    """Read a store's passages the way they were made: ``NBMEMORY_PASSAGE_METHOD`` set to match
    (the notes store of ``nbmemory eval notes`` pools them from each chunk's pass; another
    method would make them all again on open, minutes with the model on a CPU)."""
    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    try:
        row = con.execute("SELECT value FROM meta WHERE key = 'passage_method'").fetchone()
    finally:
        con.close()
    os.environ["NBMEMORY_PASSAGE_METHOD"] = "late" if row and row[0].startswith("late") else "windows"
    return os.environ["NBMEMORY_PASSAGE_METHOD"]


# -- queries ------------------------------------------------------------------------------------
def notes_queries() -> list[str]:
    out = []
    for name in ("notes-queries.jsonl", "notes-queries-fresh.jsonl"):
        for line in (DATA / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                out.append(json.loads(line)["query"])
    return list(dict.fromkeys(out))


def heading_queries(store: Path, seed: int = 0) -> list[str]:
    """The last part of distinct cell headings of three to ten words, shuffled with ``seed``."""
    import duckdb

    con = duckdb.connect(str(store), read_only=True)
    try:
        rows = con.execute("SELECT DISTINCT heading FROM chunks WHERE deleted_at IS NULL AND heading <> ''").fetchall()
    finally:
        con.close()
    picked = set()
    for (heading,) in rows:
        last = heading.split(">")[-1].strip(" #")
        if 3 <= len(last.split()) <= 10:
            picked.add(last)
    out = sorted(picked)
    random.Random(seed).shuffle(out)
    return out


def alternate(*lists: list[str]) -> list[str]:
    out: list[str] = []
    for group in zip(*lists, strict=False):
        out.extend(group)
    return list(dict.fromkeys(out))


# -- the mix ------------------------------------------------------------------------------------
def read_store(path: Path) -> tuple[list[dict[str, Any]], np.ndarray, dict[str, list[np.ndarray]]]:
    """Every live chunk's columns, its vector, and the passage vectors by content hash."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        cols = ["id", "kind", "text", "heading", "source", "ordinal", "cell_id", "cell_index",
                "line_start", "line_end", "page", "content_hash"]
        rows = con.execute(
            f"SELECT {', '.join('c.' + c for c in cols)}, v.vec FROM chunks c JOIN vectors v ON v.chunk_id = c.id "
            "WHERE c.deleted_at IS NULL ORDER BY c.id"
        ).fetchall()
        passages: dict[str, list[np.ndarray]] = {}
        for digest, vec in con.execute("SELECT content_hash, vec FROM passages ORDER BY content_hash, n").fetchall():
            passages.setdefault(digest, []).append(np.asarray(vec, dtype=np.float32))
    finally:
        con.close()
    chunks = [dict(zip(cols, r[:-1], strict=True)) for r in rows]
    vecs = np.asarray([r[-1] for r in rows], dtype=np.float32)
    return chunks, vecs, passages


def _noisy(vecs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    out = vecs + (NOISE * rng.standard_normal(vecs.shape)).astype(np.float32)
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def mix_store(sources: list[Path], n: int, fingerprint: str, embedder: Any, seed: int = 0) -> tuple[Path, dict[str, Any]]:
    """A store of ``n`` chunks made from ``sources`` (see the module docstring), built once."""
    import pyarrow as pa

    from nbmemory.store import chunks as chunk_rows
    from nbmemory.store import fts, vectors
    from nbmemory.store.db import Database, utcnow

    path = store_root() / f"mix-{n}-{'-'.join(p.stem.rsplit('-', 1)[-1][:8] for p in sources)}.duckdb"
    how = {
        "sources": [str(p) for p in sources],
        "n": n,
        "copies": f"copy c of a chunk: text + ' copy<c>', source + '#copy<c>', vector + N(0, {NOISE}^2) per "
        "dimension renormalised, its passages likewise (seed 0)",
    }
    if path.exists():
        return path, how
    base: list[dict[str, Any]] = []
    base_vecs = []
    passages: dict[str, list[np.ndarray]] = {}
    for store in sources:
        c, v, p = read_store(store)
        base += c
        base_vecs.append(v)
        passages.update(p)
    vecs = np.concatenate(base_vecs)
    rng = np.random.default_rng(seed)
    tmp = path.with_name(f".{path.name}.building")
    tmp.unlink(missing_ok=True)
    db = Database(tmp)
    vectors.start(db, embedder)
    written = 0
    copy = 0
    while written < n:
        take = min(len(base), n - written)
        suffix = f" copy{copy}" if copy else ""
        rows = []
        for c in base[:take]:
            rows.append(chunk_rows.NewChunk(
                namespace=NAMESPACE, kind=c["kind"], text=c["text"] + suffix, heading=c["heading"] or "",
                source=(c["source"] + f"#copy{copy}") if (copy and c["source"]) else c["source"],
                ordinal=c["ordinal"] or 0, cell_id=c["cell_id"], cell_index=c["cell_index"],
                line_start=c["line_start"], line_end=c["line_end"], page=c["page"],
            ))
        block = vecs[:take] if copy == 0 else _noisy(vecs[:take], rng)
        owners, ns, pvecs = [], [], []
        for c, row in zip(base[:take], rows, strict=True):
            held = passages.get(c["content_hash"])
            if held:
                mat = np.stack(held)
                mat = mat if copy == 0 else _noisy(mat, rng)
                owners += [row.hash] * len(held)
                ns += list(range(len(held)))
                pvecs += list(mat)
        with db.transaction():
            for start in range(0, take, 20_000):
                chunk_rows.insert(db, rows[start : start + 20_000], block[start : start + 20_000], utcnow())
            if owners:
                table = pa.table({
                    "content_hash": pa.array(owners, type=pa.string()),
                    "fingerprint": pa.array([fingerprint] * len(owners), type=pa.string()),
                    "n": pa.array(ns, type=pa.int32()),
                    "vec": pa.array(pvecs, type=pa.list_(pa.float32())),
                })
                db.with_arrow("_nbm_new_passages", table, "INSERT INTO passages SELECT * FROM _nbm_new_passages")
        written += take
        copy += 1
        log(f"mix: {written}/{n} chunks written")
    fts.rebuild(db)
    db.execute("CHECKPOINT")
    db.close()
    os.replace(tmp, path)
    return path, how


# -- one shape ----------------------------------------------------------------------------------
def _pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(values, q)), 3) if values else 0.0


def bench_shape(name: str, store: Path, queries: list[str], real: Any, args: argparse.Namespace,
                workdir: Path, how: dict[str, Any] | None = None) -> dict[str, Any]:
    from nbmemory import Memory
    from nbmemory.search import hot

    queries = queries[: args.warmup + args.queries]
    copy = workdir / f"{name}.duckdb"
    shutil.copy(store, copy)
    method = passages_as_stored(copy)
    chunks, vecs, _ = read_store(copy)
    files = len({c["source"] for c in chunks if c["source"]})
    out: dict[str, Any] = {
        "store": str(store),
        "chunks": len(chunks),
        "files": files,
        "chunks_per_file": round(len(chunks) / max(files, 1), 1),
        "queries": len(queries),
        "k": args.k,
        "passage_method": method,
    }
    if how:
        out["how"] = how
    log(f"[{name}] {len(chunks)} chunks in {files} files; embedding {len(queries)} queries")
    qvecs: dict[str, np.ndarray] = {}
    embed_ms = []
    for q in queries:
        forget_queries(real)
        t = time.perf_counter()
        qvecs[q] = np.asarray(real.embed_query(q), dtype=np.float32)
        embed_ms.append((time.perf_counter() - t) * 1000)
    out["query_embedding_ms"] = dist(embed_ms)
    embedder = Precomputed(real, qvecs)

    log(f"[{name}] reference build")
    ref = SqliteReference(workdir / f"{name}.sqlite", embedder)
    ref.build([f"{c['heading']}\n{c['text']}" if c["heading"] else c["text"] for c in chunks], vecs,
              [c["source"] for c in chunks])
    del vecs

    mem = Memory(copy, embedder=embedder, on_model_change="error")
    from nbmemory.search import nearmiss

    nearmiss.near_miss(mem.db, embedder)  # measured once per memory, not inside a timed search
    hot.ensure(mem.db)
    warm = queries[: args.warmup]
    measured = queries[args.warmup : args.warmup + args.queries] or queries[: args.queries]
    for q in warm:
        mem.search(q, k=args.k, log=not args.no_log)
        ref.search(q, k=args.k)
    mem.flush()

    gc_ms: list[float] = []
    gc_full: list[float] = []
    gc_start: list[float] = []

    def on_gc(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            gc_start.append(time.perf_counter())
        elif gc_start:
            ms = (time.perf_counter() - gc_start.pop()) * 1000
            gc_ms.append(ms)
            if info.get("generation") == 2:
                gc_full.append(ms)

    stages: dict[str, list[float]] = {s: [] for s in STAGES}
    stages["earlier_passes"] = []
    stages["outside_pipeline"] = []
    e2e: list[float] = []
    cpu: list[float] = []
    ref_e2e: list[float] = []
    ref_stages: dict[str, list[float]] = {"bm25": [], "vector": [], "rrf": [], "hydrate": []}
    counts: dict[str, list[int]] = {"fused": [], "dedup_read": [], "dedup_checked": [], "group_read": [], "passes": []}
    slow: list[dict[str, Any]] = []
    gc_counts = [0, 0, 0]
    overlap = []
    out["loadavg_at_search"] = loadavg()
    gc.callbacks.append(on_gc)
    try:
        for n, q in enumerate(measured):
            def run_nbm(q: str = q) -> list[str]:
                gc_ms.clear()
                gc_full.clear()
                # bench-only: did a write of the search log overlap this search (it waits for it)
                before = getattr(mem._search_log, "flushes", None)
                pending = mem._search_log._pending
                waiting = len(pending)
                collections = [g["collections"] for g in gc.get_stats()]
                c0 = time.thread_time()
                t = time.perf_counter()
                result = mem.search(q, k=args.k, log=not args.no_log)
                ms = (time.perf_counter() - t) * 1000
                cpu.append((time.thread_time() - c0) * 1000)
                if before is None:  # an older checkout: the search itself wrote the log
                    flushed = not args.no_log and len(mem._search_log._pending) <= waiting
                else:
                    flushed = not args.no_log and mem._search_log.flushes != before
                ran = [g["collections"] - c for g, c in zip(gc.get_stats(), collections, strict=True)]
                for gen, n in enumerate(ran):
                    gc_counts[gen] += n
                e2e.append(ms)
                tr = result.trace
                for s in STAGES:
                    st = tr.stage(s)
                    stages[s].append(st.ms if st is not None else 0.0)
                stages["earlier_passes"].append(tr.earlier_ms)
                stages["outside_pipeline"].append(ms - tr.total_ms)
                fused = tr.stage("convex") or tr.stage("rrf")
                dd, gr = tr.stage("dedup"), tr.stage("group")
                counts["fused"].append(len(fused.output) if fused else 0)
                counts["dedup_read"].append(int(dd.notes.get("read", len(dd.output))) if dd else 0)
                counts["dedup_checked"].append(int(dd.notes.get("checked", 0)) if dd else 0)
                counts["group_read"].append(int(gr.notes.get("read", gr.notes.get("chunks", 0))) if gr else 0)
                counts["passes"].append(getattr(tr, "passes", 1))
                slow.append({"query": q, "ms": round(ms, 2), "gc_ms": round(sum(gc_ms), 2),
                        "full_gc_ms": round(sum(gc_full), 2),
                             "log_write": flushed, "passes": getattr(tr, "passes", 1),
                             "stages": {s.name: round(s.ms, 2) for s in tr.stages}})
                return [h.source or str(h.id) for h in result.hits]

            def run_ref(q: str = q) -> list[str]:
                t = time.perf_counter()
                ref.search(q, k=args.k)
                ref_e2e.append((time.perf_counter() - t) * 1000)
                for s, v in ref.last_stage_ms.items():
                    ref_stages[s].append(v)
                return [h[1] or str(h[0]) for h in ref.last_hits]

            if n % 2 == 0:
                a, b = run_nbm(), run_ref()
            else:
                b, a = run_ref(), run_nbm()
            overlap.append(len(set(a) & set(b)) / max(len(set(b)), 1))
    finally:
        gc.callbacks.remove(on_gc)
    out["loadavg_after"] = loadavg()
    out["nbmemory_ms"] = {
        "e2e_query_vector_precomputed": dist(e2e),
        "thread_cpu": dist(cpu),
        "stages_p50": {s: _pct(v, 50) for s, v in stages.items() if any(v)},
        "stages_p95": {s: _pct(v, 95) for s, v in stages.items() if any(v)},
    }
    out["reference_ms"] = {
        "e2e_query_vector_precomputed": dist(ref_e2e),
        "stages_p50": {s: _pct(v, 50) for s, v in ref_stages.items()},
        "stages_p95": {s: _pct(v, 95) for s, v in ref_stages.items()},
    }
    out["p50_ratio_to_reference"] = round(_pct(e2e, 50) / max(_pct(ref_e2e, 50), 1e-9), 3)
    out["read"] = {c: {"p50": _pct([float(x) for x in v], 50), "p95": _pct([float(x) for x in v], 95),
                       "max": max(v, default=0)} for c, v in counts.items()}
    cut = float(np.percentile(e2e, 95))
    tail = [s for s in slow if s["ms"] >= cut]
    out["tail"] = {
        "p95_ms": round(cut, 3),
        "slowest": sorted(tail, key=lambda s: -s["ms"])[:8],
        "searches_with_gc": sum(1 for s in slow if s["gc_ms"] > 0),
        # Counts, not times: garbage collections per 100 searches, per generation (0, 1, 2 = full).
        "gc_collections_per_100_searches": [round(100 * n / max(len(slow), 1), 1) for n in gc_counts],
        "searches_with_full_gc": sum(1 for s in slow if s["full_gc_ms"] > 0),
        "gc_ms_total": round(sum(s["gc_ms"] for s in slow), 2),
        "searches_writing_the_log": sum(1 for s in slow if s["log_write"]),
        "searches_with_earlier_passes": sum(1 for s in slow if s["passes"] > 1),
        "p95_without_log_writes": _pct([s["ms"] for s in slow if not s["log_write"]], 95),
        "p95_without_full_gc": _pct([s["ms"] for s in slow if s["full_gc_ms"] == 0], 95),
    }
    out["top_k_source_overlap_with_reference"] = round(float(np.mean(overlap)), 3) if overlap else None
    mem.close()
    ref.close()
    return out


def print_table(name: str, r: dict[str, Any]) -> None:
    n50, n95 = r["nbmemory_ms"]["stages_p50"], r["nbmemory_ms"]["stages_p95"]
    r50, r95 = r["reference_ms"]["stages_p50"], r["reference_ms"]["stages_p95"]
    print(f"\n{name}: {r['chunks']} chunks, {r['files']} files ({r['chunks_per_file']}/file), "
          f"{r['queries']} queries, k={r['k']}, load {r['loadavg_at_search']}")
    print(f"{'stage':<18}{'nbm p50':>9}{'nbm p95':>9}{'ref p50':>9}{'ref p95':>9}")
    for s in list(n50) + [s for s in r50 if s not in n50]:
        print(f"{s:<18}{n50.get(s, 0):>9.2f}{n95.get(s, 0):>9.2f}{r50.get(s, 0):>9.2f}{r95.get(s, 0):>9.2f}")
    ne, re_ = r["nbmemory_ms"]["e2e_query_vector_precomputed"], r["reference_ms"]["e2e_query_vector_precomputed"]
    print(f"{'total':<18}{ne['p50']:>9.2f}{ne['p95']:>9.2f}{re_['p50']:>9.2f}{re_['p95']:>9.2f}")
    print(f"query embedding (separate): p50 {r['query_embedding_ms']['p50']:.2f} p95 {r['query_embedding_ms']['p95']:.2f}")
    print("read: " + ", ".join(f"{c} p50 {v['p50']:.0f} max {v['max']}" for c, v in r["read"].items()))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", default="notes,notebooks,mix", help="notes, notebooks, mix (comma-separated)")
    parser.add_argument("--corpus", type=Path, nargs="*", default=[], help="more corpus folders, each a shape")
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--mix-n", type=int, default=50_000)
    parser.add_argument("--no-log", action="store_true", help="search with log=False (no search-log writes)")
    parser.add_argument("--fake", action="store_true",
                        help="stores indexed with the fake embedder (seconds, not hours): what a search reads "
                        "and costs on the same chunks and files, not real rankings")
    parser.add_argument("--out", type=Path, default=RESULTS / "search-shapes.json")
    args = parser.parse_args(argv)

    from nbmemory.config import DEFAULT_MODEL
    from nbmemory.embed.loader import load_model

    command = "python -m bench.search.bench_shapes " + " ".join(argv if argv is not None else sys.argv[1:])
    real = fake_embedder() if args.fake else load_model(DEFAULT_MODEL, None)
    result: dict[str, Any] = {
        "command": command.strip(),
        "machine": machine_info(real),
        "embedder": "fake (384 dims): real chunks and files, not real rankings" if args.fake else real.name,
        "shapes": {},
    }
    shapes = [s for s in args.shapes.split(",") if s]
    with tempfile.TemporaryDirectory(prefix="nbm-shapes-") as tmp:
        workdir = Path(tmp)
        notebooks = store_for(NOTEBOOKS, log=log, fake=args.fake) if {"notebooks", "mix"} & set(shapes) else None
        notes = store_for(NOTES_CORPUS, log=log, fake=True) if args.fake else eval_notes_store()
        for shape in shapes:
            if shape == "notes":
                r = bench_shape("notes", notes, notes_queries(), real, args, workdir)
            elif shape == "notebooks":
                assert notebooks is not None
                r = bench_shape("notebooks", notebooks, heading_queries(notebooks), real, args, workdir)
            elif shape == "mix":
                assert notebooks is not None
                path, how = mix_store([notes, notebooks], args.mix_n, real.fingerprint, real)
                queries = alternate(notes_queries(), heading_queries(notebooks))
                r = bench_shape("mix", path, queries, real, args, workdir, how)
            else:
                raise SystemExit(f"unknown shape {shape!r}: notes, notebooks or mix (other folders: --corpus)")
            result["shapes"][shape] = r
            print_table(shape, r)
            (workdir / f"{shape}.duckdb").unlink(missing_ok=True)
        for corpus in args.corpus:
            store = store_for(corpus, log=log, fake=args.fake)
            r = bench_shape(corpus.name, store, heading_queries(store), real, args, workdir)
            result["shapes"][corpus.name] = r
            print_table(corpus.name, r)
    result["machine"]["loadavg_end"] = loadavg()
    result["preliminary"] = max(result["machine"]["loadavg_start"] or [0]) > 1.5
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    log(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
