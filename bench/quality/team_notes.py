"""Search quality of a team memory against a personal memory of the same notes, one run.

    python -m bench.quality.team_notes [--corpus DIR] [--queries FILE] [--split all] [--configs default,bm25,vector]
        [--out bench/results/team-notes.json]

The notes (the jbranchaud-til dev set and its judged questions by default) are indexed twice with
the bundled all-MiniLM-L6-v2: into a personal memory (the evaluation store cache, as
``bench.quality.notes_compare`` builds it) and, through ``Memory.index(..., namespace="team:notes")``,
into a team lake whose catalog is a PostgreSQL cluster this run starts (``bench/lib/postgres.py``)
and whose data folder is on the local disk. The team side is searched from a memory whose personal
file is empty, so every hit comes from its replica of the lake (after ``wait_refined``: its
passages made). A third side, ``merged``, holds every other note (in path order) in a personal
file and the rest in the team: its searches rank both sides together, which is what a person with
a team attached gets. Each configuration runs every question on every side, scored by the same
code (``nbmemory.eval.notes``, pytrec_eval); ``same_top10`` is the share of questions whose ranked
files are identical to the personal memory's.

Vectors come from the evaluation vector cache when it holds them (``nbmemory.eval.cache``), so
both sides embed each text with the same vectors and the run is short after a first one.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib import postgres
from bench.lib.paths import NOTES_CORPUS, NOTES_QUERIES, RESULTS
from nbmemory import Memory
from nbmemory.config import cache_folder
from nbmemory.embed.sentence import SentenceTransformerEmbedder
from nbmemory.eval.cache import CachedEmbedder
from nbmemory.eval.harness import resolve_configs
from nbmemory.eval.notes import load_queries, prepare_notes_store, run_notes_config
from nbmemory.eval.report import write_json
from nbmemory.ingest.indexer import walk
from nbmemory.team import TeamConfig

NAMESPACE = "team:notes"
KEYS = ("hit@1", "mrr@10", "hit@10", "miss_flag", "false_flags", "p50_ms")


def log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, default=NOTES_CORPUS)
    parser.add_argument("--queries", type=Path, default=NOTES_QUERIES)
    parser.add_argument("--split", default="all", help="dev, test or all (default %(default)s)")
    parser.add_argument("--configs", default="default,bm25,vector")
    parser.add_argument("--out", default=str(RESULTS / "team-notes.json"))
    args = parser.parse_args(argv)
    corpus = args.corpus.expanduser().absolute()
    queries = load_queries(args.queries, args.split, corpus=corpus)
    configs = resolve_configs(args.configs)
    inner = SentenceTransformerEmbedder()
    embedder = CachedEmbedder(inner, "notes-" + "-".join(corpus.parts[-2:]), log=log)
    started = time.perf_counter()
    sides: dict[str, dict[str, Any]] = {"personal": {}, "team": {}, "merged": {}}
    with tempfile.TemporaryDirectory(prefix="team-notes-") as tmp, postgres.cluster() as pg:
        work = Path(tmp)
        pg.create_lake("teamnotes")
        (work / "lake-data").mkdir()
        team = TeamConfig(pg.catalog("teamnotes", "nbm_writer"), str(work / "lake-data"))
        info = prepare_notes_store(corpus, embedder, cache=True, log=log)
        with Memory(info.path, embedder=embedder) as personal:
            for name, config in configs.items():
                sides["personal"][name] = run_notes_config(personal, name, config, queries, corpus)
        with Memory(work / "empty.duckdb", embedder=embedder, team=team) as mem:
            t0 = time.perf_counter()
            report = mem.index(corpus, namespace=NAMESPACE)
            searchable = time.perf_counter() - t0
            mem.wait_refined()
            complete = time.perf_counter() - t0
            log(f"team index: {report.summary()}; searchable {searchable:.1f} s, passages {complete:.1f} s")
            for name, config in configs.items():
                sides["team"][name] = run_notes_config(mem, name, config, queries, corpus)
        pg.create_lake("teamhalf")
        (work / "half-data").mkdir()
        half = TeamConfig(pg.catalog("teamhalf", "nbm_writer"), str(work / "half-data"))
        files = sorted(str(f) for f in walk(corpus))
        with Memory(work / "half.duckdb", embedder=embedder, team=half) as mem:
            mem.index(*files[0::2])
            mem.index(*files[1::2], namespace=NAMESPACE)
            mem.wait_refined()
            for name, config in configs.items():
                sides["merged"][name] = run_notes_config(mem, name, config, queries, corpus)
        for key in (team.key, half.key):
            shutil.rmtree(cache_folder("team", key), ignore_errors=True)
    rows = []
    for name in configs:
        mine = sides["personal"][name]
        for side in sides:
            run = sides[side][name]
            same = sum(mine.ranked.get(q.qid) == run.ranked.get(q.qid) for q in queries) / len(queries)
            row = {"config": name, "side": side, **{k: run.summary.get(k) for k in KEYS}}
            row["same_top10"] = round(same, 3)
            rows.append(row)
            print(row, flush=True)
    write_json(
        {
            "command": ["python", "-m", "bench.quality.team_notes", *(argv if argv is not None else sys.argv[1:])],
            "corpus": str(corpus),
            "queries": str(args.queries),
            "split": args.split,
            "questions": len(queries),
            "model": inner.name,
            "team_index": {"files": report.files_seen, "chunks": report.chunks_added, "seconds": round(complete, 1)},
            "catalog": "PostgreSQL in a temporary cluster on this machine; lake data on the local disk",
            "rows": rows,
            "wall_s": round(time.perf_counter() - started, 1),
        },
        args.out,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
