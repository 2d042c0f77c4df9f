"""How sure a side-by-side's margins are: paired bootstrap intervals over the judged questions,
Wilson intervals of proportions.

A margin like "+.025 MRR@10 over vstash" rests on the 31-133 answerable questions of one run, and
one question moved from rank 2 to rank 1 moves a 65-question mean by .008. For a notes comparison
(``bench/quality/notes_compare.py`` writes one), :func:`margins` resamples the answerable
questions with replacement (the same draw for every system, so the comparison stays paired) and
reports, per split (each split the run holds, then all of them), nbmemory's default against each
other system: the mean MRR@10 difference, its 95 % percentile interval, and the share of
resamples in which the difference reaches the goal (``goal``, .03 in the search-quality issue; a
share of resamples, not a probability). The default's Hit@1 and the share of no-answer questions
it flags are proportions and get :func:`wilson` intervals. The intervals cover which questions
were written, not which notes a smaller memory was cut from (one cut per run).

The per-question MRR@10 values are the ones the comparison already computed with ``pytrec_eval``
(``per_query``); nothing is re-scored here. The command (:func:`main`) is
``python -m bench.quality.margins``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

import numpy as np

from nbmemory.errors import ConfigError
from nbmemory.eval.report import write_json

DEFAULT = "default"
Z95 = 1.959963984540054


def wilson(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion.

    A percentile bootstrap of a share near 0 or 1 collapses onto it (94 of 96 would read
    .948-1.000); the Wilson interval does not.

    Parameters
    ----------
    successes:
        Number of successes (may be fractional: for a mean of values in [0, 1], such as MRR,
        pass ``mean * n``; the interval is then conservative, since such a variable's variance
        is at most ``p (1 - p)``).
    n:
        Number of trials; ``n = 0`` gives ``(0.0, 1.0)``.
    z:
        The normal quantile of the interval (95 % by default).

    Returns
    -------
    (low, high)
    """
    if n <= 0:
        return (0.0, 1.0)
    if not 0 <= successes <= n:
        raise ConfigError(f"successes must be between 0 and n={n}, got {successes}")
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def per_question(run: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """System name -> qid -> that question's row, for nbmemory's configurations and the peers (a
    peer without per-question rows, one that failed, is named on stderr and left out)."""
    systems = {name: got["per_query"] for name, got in run["nbmemory"]["configs"].items()}
    for name, got in run.get("peers", {}).items():
        if "per_query" in got:
            systems[name] = got["per_query"]
        else:
            print(f"{name}: no per-question results in this run, left out", file=sys.stderr)
    return {name: {row["qid"]: row for row in rows} for name, rows in systems.items()}


def splits_of(path: str | Path, queries_dir: Path | None = None) -> dict[str, str]:
    """qid -> split, from the queries file the run names (else the file of that name in
    ``queries_dir``: runs record the absolute path they were run with)."""
    # Here, not at the top: the scenario benchmark imports wilson from this module, and the notes
    # loader brings in the whole memory.
    from nbmemory.eval.notes import load_queries

    path = Path(path)
    if not path.exists() and queries_dir is not None:
        path = queries_dir / path.name
    return {q.qid: q.split for q in load_queries(path, "all")}


def _r(x: float) -> float:
    return round(x, 3) + 0.0  # + 0.0: no "-0.0"


def margins(
    run: dict[str, Any], split_of: dict[str, str], resamples: int = 10_000, seed: int = 0, goal: float = 0.03
) -> list[dict[str, Any]]:
    """One entry per split (see the module docstring): the default's Hit@1 and no-answer flag
    rate with their Wilson intervals, and its margin over every other system."""
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100, got {resamples}")
    by_system = per_question(run)
    if DEFAULT not in by_system:
        raise ValueError("the run has no nbmemory default configuration")
    base = by_system[DEFAULT]
    unknown = sorted(q for q in base if q not in split_of)
    if unknown:
        raise ValueError(f"{len(unknown)} questions are not in the queries file, e.g. {unknown[0]}")
    rng = np.random.default_rng(seed)
    out: list[dict[str, Any]] = []
    splits = sorted({split_of[q] for q in base})
    for split in [*splits, "all"] if len(splits) > 1 else splits:
        qids = sorted(q for q in base if split in ("all", split_of[q]))
        answerable = [q for q in qids if base[q]["kind"] != "miss"]
        misses = [q for q in qids if base[q]["kind"] == "miss"]
        entry: dict[str, Any] = {"split": split, "answerable": len(answerable), "compared": []}
        if misses:
            flagged = sum(bool(base[q]["flagged"]) for q in misses)
            entry["miss_flag"] = [
                _r(flagged / len(misses)),
                *map(_r, wilson(flagged, len(misses))),
                len(misses),
            ]
        if answerable:
            n = len(answerable)
            hits = int(sum(base[q]["hit@1"] for q in answerable))
            entry["hit@1"] = [_r(hits / n), *map(_r, wilson(hits, n))]
            draws = rng.integers(0, n, size=(resamples, n))
            mine = np.array([base[q]["mrr@10"] for q in answerable])
            for name, got in by_system.items():
                if name == DEFAULT:
                    continue
                missing = [q for q in answerable if q not in got]
                if missing:
                    raise ValueError(f"{name} has no result for {len(missing)} questions, e.g. {missing[0]}")
                theirs = np.array([got[q]["mrr@10"] for q in answerable])
                diff = mine - theirs
                means = diff[draws].mean(axis=1)
                low, high = np.percentile(means, [2.5, 97.5])
                entry["compared"].append(
                    {
                        "system": name,
                        "default_mrr@10": _r(float(mine.mean())),
                        "system_mrr@10": _r(float(theirs.mean())),
                        "margin": _r(float(diff.mean())),
                        "ci95": [_r(float(low)), _r(float(high))],
                        "share_reaching_goal": _r(float((means >= goal).mean())),
                    }
                )
        out.append(entry)
    return out


def table(name: str, entries: list[dict[str, Any]], goal: float) -> str:
    """Markdown for one run."""
    lines = [
        f"\n**{name}**\n",
        f"| split | answerable | default Hit@1 (Wilson 95 %) | system | default / system MRR@10 "
        f"| margin (bootstrap 95 %) | share of resamples >= {goal} |",
        "|---|---|---|---|---|---|---|",
    ]
    notes = []
    for e in entries:
        h = e.get("hit@1")
        hit = f"{h[0]:.3f} ({h[1]:.3f}-{h[2]:.3f})" if h else "-"
        for c in e["compared"] or [None]:
            if c is None:
                lines.append(f"| {e['split']} | {e['answerable']} | {hit} | - | - | - | - |")
                continue
            lines.append(
                f"| {e['split']} | {e['answerable']} | {hit} | {c['system']} | "
                f"{c['default_mrr@10']:.3f} / {c['system_mrr@10']:.3f} | {c['margin']:+.3f} "
                f"({c['ci95'][0]:+.3f} to {c['ci95'][1]:+.3f}) | {c['share_reaching_goal']:.2f} |"
            )
        if "miss_flag" in e:
            share, low, high, count = e["miss_flag"]
            notes.append(
                f"No-answer questions flagged, {e['split']}: {share:.2f} of {count} (Wilson 95 % {low:.2f}-{high:.2f})"
            )
    return "\n".join([*lines, "", *notes])


def main(
    argv: list[str] | None = None,
    *,
    prog: str | None = None,
    queries_dir: Path | None = None,
    out: Path | None = None,
) -> int:
    """The command: print each run's table, write them all as JSON to ``--out``.

    Parameters
    ----------
    argv:
        Command-line arguments (default ``sys.argv[1:]``).
    prog:
        The command's name in its help and in the JSON's ``command``.
    queries_dir:
        Where to look for a run's queries file by name when the path it recorded is gone.
    out:
        The default of ``--out`` (none: print only).
    """
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="notes comparison results (JSON)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--goal", type=float, default=0.03, help="the margin the issue asks for (default 0.03)"
    )
    parser.add_argument("--out", type=Path, default=out, help=f"write the JSON here (default {out})")
    args = parser.parse_args(argv)
    if args.resamples < 100:
        parser.error(f"--resamples must be at least 100, got {args.resamples}")
    report: dict[str, Any] = {
        "command": [parser.prog, *(argv if argv is not None else sys.argv[1:])],
        "resamples": args.resamples,
        "seed": args.seed,
        "goal": args.goal,
        "runs": {},
    }
    for path in args.runs:
        try:
            run = json.loads(Path(path).read_text(encoding="utf-8"))
            split_of = splits_of(run["queries"], queries_dir)
            rows = margins(run, split_of, args.resamples, args.seed, args.goal)
        except KeyError as exc:
            parser.error(f"{path}: not a notes comparison result, it lacks the field {exc}")
        except (OSError, ValueError, ConfigError) as exc:
            parser.error(f"{path}: {exc}")
        label = f"{Path(path).name} ({run.get('subset') or 'whole corpus'}; {Path(run['queries']).name})"
        print(table(label, rows, args.goal))
        report["runs"][str(path)] = {"subset": run.get("subset"), "queries": run["queries"], "splits": rows}
    if args.out is not None:
        write_json(report, args.out)
    return 0
