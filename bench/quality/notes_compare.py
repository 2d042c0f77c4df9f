"""nbmemory and its peers on one notes corpus, one table, one run.

    python -m bench.quality.notes_compare                  # jbranchaud-til, bench/data/notes-queries.jsonl, dev
    python -m bench.quality.notes_compare --corpus DIR --queries FILE --split test
    python -m bench.quality.notes_compare --skip-peers     # nbmemory's configurations only
    python -m bench.quality.notes_compare --subset 577:4 --split all --out bench/results/notes-compare-577.json

nbmemory runs through :func:`nbmemory.eval.notes.evaluate_notes` (``Memory.index`` into the
evaluation store cache, then ``Memory.search`` per configuration: default, bm25, vector, rrf).
The peers, vstash 0.39 and memsearch 0.4.23, run as ``../shared/peers/README.md`` says: installed
once by ``setup.sh`` (venvs under ``$TMPDIR/nbm-peers``), the corpus flattened by ``flatten.py``,
each driver run on the same queries with the same bundled all-MiniLM-L6-v2. Their ranked file
ids are scored by the same code as nbmemory's (:func:`nbmemory.eval.notes.score_run`,
``pytrec_eval``); the peers' own ``score.py`` output is kept next to it as a cross-check.

The peers have no "no answer" flag: for them a ``miss`` query counts as flagged when it is left
empty, so ``miss_flag`` reads "flagged" for nbmemory and "left empty" for the peers. Peers index
the corpus's ``.md`` files only (``flatten.py``); nbmemory indexes what ``Memory.index`` reads.
``--subset SIZE:SEED`` runs everything on a smaller memory cut from the corpus
(:mod:`nbmemory.eval.subsets`, as ``noanswer_signals.py`` cuts them: a quarter of it from the target notes, the rest at random), with
the questions that still fit it (answerable ones keep the targets left in it).
Prints one markdown table; writes everything to ``--out`` (default ``bench/results/notes-compare.json``).
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import polars as pl

from bench.lib.paths import NOTES_CORPUS, NOTES_QUERIES, RESULTS, SHARED
from nbmemory.eval.notes import (
    NotesQuery,
    NotesRun,
    evaluate_notes,
    load_queries,
    per_query_rows,
    printable,
    score_run,
)
from nbmemory.eval.report import to_markdown, write_json
from nbmemory.eval.subsets import cut_folder, fitting, present_notes, subset

DEFAULT_CORPUS = NOTES_CORPUS
DEFAULT_QUERIES = NOTES_QUERIES
DEFAULT_OUT = RESULTS / "notes-compare.json"
NBMEMORY_CONFIGS = "default,bm25,vector,rrf"
#: Peer name -> (corpus layout made by flatten.py, extra driver arguments), as the peers README runs them.
PEERS: dict[str, tuple[str, list[str]]] = {
    "vstash": ("split", []),
    "memsearch": ("flat", ["--fetch-k", "30"]),
}
COLUMNS = [
    "system",
    "hit@1",
    "hit@5",
    "hit@10",
    "mrr@10",
    "paraphrase_hit@1",
    "keyword_hit@1",
    "question_hit@1",
    "miss_flag",
    "miss_empty",
    "false_flags",
    "p50_ms",
]


def _log(message: str) -> None:
    print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)


def peers_home() -> Path:
    """Where ``setup.sh`` put the peers' venvs: ``$PEERS``, else ``$TMPDIR/nbm-peers``."""
    if os.environ.get("PEERS"):
        return Path(os.environ["PEERS"])
    return Path(os.environ.get("TMPDIR") or "/tmp") / "nbm-peers"


def flattened_names(corpus: Path) -> dict[str, str]:
    """Peer document id (flatten.py's ``folder__file`` stem, with or without ``.md``) -> relative path."""
    out: dict[str, str] = {}
    for path in sorted(corpus.rglob("*.md")):
        rel = path.relative_to(corpus)
        name = "__".join(rel.parts)
        out[name] = rel.as_posix()
        out[name[: -len(".md")]] = rel.as_posix()
    return out


def write_queries(queries: list[NotesQuery], path: Path) -> Path:
    """The queries that were run, as a queries JSONL file (what flatten.py and score.py read)."""
    with path.open("w", encoding="utf-8") as fh:
        for q in queries:
            row = {
                "qid": q.qid,
                "query": q.query,
                "kind": q.kind,
                "targets": list(q.targets),
                "split": q.split,
            }
            fh.write(json.dumps(row) + "\n")
    return path


def run_peer(
    name: str,
    home: Path,
    scripts: Path,
    flat: Path,
    queries_file: Path,
    queries: list[NotesQuery],
    names: dict[str, str],
    work: Path,
) -> tuple[NotesRun, dict[str, Any]]:
    """Run one peer's driver on the flattened corpus; score its file ids like nbmemory's."""
    layout, extra = PEERS[name]
    python = home / name / "venv" / "bin" / "python"
    out = work / f"{name}.jsonl"
    cmd = [str(python), "run.py", str(flat / layout), str(flat / "queries.beir.jsonl"), "--top-k", "10"]
    cmd += [*extra, "--out", str(out)]
    _log(f"{name}: {' '.join(cmd[1:])}")
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=home / name, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{name} driver failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    summary = [line for line in proc.stderr.splitlines() if line.startswith(("#", name))]
    ranked: dict[str, list[str]] = {}
    latency: dict[str, float] = {}
    unknown: set[str] = set()
    for line in out.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        files = []
        for doc in row.get("ids", []):
            rel = names.get(doc)
            if rel is None:
                unknown.add(doc)
                rel = doc
            files.append(rel)
        ranked[row["qid"]] = files
        latency[row["qid"]] = float(row["ms"])
    if unknown:
        _log(f"{name}: {len(unknown)} returned ids are not corpus files, e.g. {sorted(unknown)[:3]}")
    # No flag to read: a query left empty is the peer saying "no answer".
    empty = {q.qid: not ranked.get(q.qid) for q in queries}
    run = score_run(name, queries, ranked, empty, latency)
    score = subprocess.run(
        [sys.executable, str(scripts / "score.py"), str(out), str(queries_file), name],
        capture_output=True,
        text=True,
        check=True,
    )
    own = json.loads(score.stdout)
    details = {
        "driver": {
            "command": cmd[1:],
            "stderr_summary": summary,
            "wall_s": round(time.perf_counter() - started, 1),
        },
        "score_py": own,
        "cross_check": cross_check(run, own),
        "unknown_ids": sorted(unknown),
    }
    return run, details


def cross_check(run: NotesRun, own: dict[str, Any]) -> dict[str, Any]:
    """Our figures next to score.py's (it rounds to 3 places); ``ok`` when they agree."""
    pairs = {
        "hit@1": "answerable_hit1",
        "hit@5": "answerable_hit5",
        "hit@10": "answerable_hit10",
        "mrr@10": "mrr10",
        "miss_empty": "miss_empty",
    }
    rows = {}
    ok = True
    for ours, theirs in pairs.items():
        if theirs not in own:
            continue
        mine = round(float(run.summary[ours]), 3)
        same = abs(mine - float(own[theirs])) <= 0.0015
        ok &= same
        rows[ours] = {"ours": mine, "score_py": own[theirs], "same": same}
    return {"ok": ok, "metrics": rows}


def table(runs: list[NotesRun]) -> pl.DataFrame:
    """The comparison: one row per system, the same columns for all."""
    rows = []
    for run in runs:
        row: dict[str, Any] = {"system": run.name}
        for column in COLUMNS[1:]:
            value = run.summary.get(column)
            if isinstance(value, float):
                value = round(value, 1) if column.endswith("_ms") else round(value, 3)
            row[column] = value
        rows.append(row)
    return pl.DataFrame(rows, schema_overrides={c: pl.Float64 for c in COLUMNS[1:] if c != "false_flags"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.quality.notes_compare", description=__doc__.splitlines()[0]
    )
    parser.add_argument(
        "--corpus", default=str(DEFAULT_CORPUS), help=f"notes folder (default {DEFAULT_CORPUS})"
    )
    parser.add_argument(
        "--queries", default=str(DEFAULT_QUERIES), help=f"queries JSONL (default {DEFAULT_QUERIES})"
    )
    parser.add_argument(
        "--split", choices=["dev", "test", "all"], default="dev", help="queries to run (default dev)"
    )
    parser.add_argument(
        "--configs", default=NBMEMORY_CONFIGS, help=f"nbmemory configurations ({NBMEMORY_CONFIGS})"
    )
    parser.add_argument(
        "--model", help="embedding model for nbmemory (default: the bundled all-MiniLM-L6-v2)"
    )
    parser.add_argument("--skip-peers", action="store_true", help="run nbmemory's configurations only")
    parser.add_argument(
        "--peers-home", type=Path, help="the peers' venvs (default $PEERS or $TMPDIR/nbm-peers)"
    )
    parser.add_argument(
        "--torch-threads", type=int, help="torch intra-op threads for nbmemory (1 on a busy machine)"
    )
    parser.add_argument("--out", default=str(DEFAULT_OUT), help=f"JSON output (default {DEFAULT_OUT})")
    parser.add_argument("--keep-work", action="store_true", help="keep the flattened corpus and peer outputs")
    parser.add_argument(
        "--subset",
        metavar="SIZE:SEED",
        help="a memory of SIZE notes cut from the corpus with SEED, and the questions that fit it",
    )
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    corpus = Path(os.path.abspath(Path(args.corpus).expanduser()))
    queries: str | list[NotesQuery] = args.queries
    source_corpus = corpus
    if args.subset:
        size_text, _, seed_text = args.subset.partition(":")
        if not (size_text.isdigit() and seed_text.isdigit() and int(size_text) > 0):
            parser.error(f"--subset takes SIZE:SEED, two whole numbers (e.g. 577:4), got {args.subset!r}")
        size, seed = int(size_text), int(seed_text)
        every = load_queries(args.queries, "all", corpus=corpus)
        targets = sorted({t for q in every for t in q.targets})
        # Named like the corpus (parent and folder), so the vector cache of the whole corpus serves
        # it; at the same path each run, so the evaluation store cache keeps one store per cut.
        cut = cut_folder(f"nbm-notes-subset-{size}-{seed}")
        shutil.rmtree(cut, ignore_errors=True)
        atexit.register(shutil.rmtree, cut, ignore_errors=True)  # also when a peer fails
        try:
            folder = subset(corpus, targets, size, seed, cut / corpus.parent.name / corpus.name)
        except ValueError as exc:
            parser.error(f"--subset {args.subset}: {exc}")
        present = present_notes(folder)
        queries = [q for q in fitting(every, present) if args.split in ("all", q.split)]
        _log(f"subset {size}:{seed}: {len(present)} notes, {len(queries)} questions fit")
        corpus = folder
    result = evaluate_notes(
        corpus,
        queries,
        args.configs,
        split=args.split,
        model=args.model,
        torch_threads=args.torch_threads,
        log=_log,
    )
    runs = []
    for name, run in result.runs.items():
        run.name = f"nbmemory {name}"
        runs.append(run)
    peers: dict[str, Any] = {}
    if not args.skip_peers:
        home = args.peers_home or peers_home()
        scripts = SHARED / "peers"
        missing = [n for n in PEERS if not (home / n / "venv" / "bin" / "python").exists()]
        if missing:
            raise SystemExit(
                f"peers {', '.join(missing)} not installed under {home}: run {scripts / 'setup.sh'} once, "
                "or pass --skip-peers"
            )
        work = Path(tempfile.mkdtemp(prefix="notes-compare-"))
        try:
            queries_file = write_queries(result.queries, work / "queries.jsonl")
            subprocess.run(
                [
                    sys.executable,
                    str(scripts / "flatten.py"),
                    str(corpus),
                    str(queries_file),
                    str(work / "flat"),
                ],
                check=True,
                capture_output=True,
            )
            names = flattened_names(corpus)
            for name in PEERS:
                run, details = run_peer(
                    name, home, scripts, work / "flat", queries_file, result.queries, names, work
                )
                runs.append(run)
                peers[name] = {
                    "summary": run.summary,
                    **details,
                    "per_query": per_query_rows(run, result.queries),
                }
                if not details["cross_check"]["ok"]:
                    _log(f"{name}: our scoring and score.py disagree: {details['cross_check']['metrics']}")
        finally:
            if args.keep_work:
                _log(f"peer work folder kept: {work}")
            else:
                shutil.rmtree(work, ignore_errors=True)

    frame = table(runs)
    print(to_markdown(printable(frame)))
    print(
        f"\n{result.describe()}\n"
        "miss_flag: share of miss queries flagged (nbmemory: SearchResult.rejected; peers have no flag: "
        "left empty); miss_empty: left empty; false_flags: answerable queries flagged (peers: left empty); "
        "p50_ms: end to end per query, query embedding included"
    )
    for name, entry in peers.items():
        check = entry["cross_check"]
        print(
            f"{name}: score.py {'agrees' if check['ok'] else 'DISAGREES'} ({json.dumps(entry['score_py'])})"
        )
    payload = {
        "command": [
            "python",
            "-m",
            "bench.quality.notes_compare",
            *(argv if argv is not None else sys.argv[1:]),
        ],
        "corpus": str(corpus),
        "subset": args.subset,
        "cut_from": str(source_corpus),
        "queries": args.queries,
        "split": args.split,
        "load_average": {"before": load_before, "after": os.getloadavg()},
        "table": frame.to_dicts(),
        "nbmemory": result.to_dict(),
        "peers": peers,
    }
    write_json(payload, args.out)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
