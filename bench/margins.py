"""How sure the side-by-side's margins are: paired bootstrap intervals over the judged questions.

    .venv/bin/python bench/margins.py bench/results/notes-compare.json bench/results/notes-compare-577.json
    .venv/bin/python bench/margins.py RUN.json --resamples 20000 --seed 1 --out OUT.json

A margin like "+.025 MRR@10 over vstash" rests on 65-135 questions, and one question moved from
rank 2 to rank 1 moves a 65-question mean by .008. For every ``notes_compare.py`` result given, this
resamples the answerable questions with replacement (the same draw for every system, so the
comparison stays paired) and reports, per split (dev, test, all), nbmemory's default against each
other system: the mean MRR@10 difference, its 95 % percentile interval, and the share of resamples
in which the difference reaches the goal (``--goal``, .03 in the search-quality issue). The
default's Hit@1 gets the same interval, and so does the share of no-answer questions it flags.

The per-question MRR@10 values are the ones the comparison already computed with ``pytrec_eval``
(``per_query``); nothing is re-scored here. Writes ``bench/results/margins.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "bench" / "results" / "margins.json"
DEFAULT = "default"


def per_question(run: dict[str, Any]) -> dict[str, dict[str, dict[str, Any]]]:
    """System name -> qid -> that question's row, for nbmemory's configurations and the peers."""
    systems = {name: got["per_query"] for name, got in run["nbmemory"]["configs"].items()}
    systems.update(
        {name: got["per_query"] for name, got in run.get("peers", {}).items() if "per_query" in got}
    )
    return {name: {row["qid"]: row for row in rows} for name, rows in systems.items()}


def splits_of(path: str | Path) -> dict[str, str]:
    """qid -> split, from the queries file the run names (else the file of that name in
    ``bench/data``: runs record the absolute path they were run with)."""
    path = Path(path)
    if not path.exists():
        path = REPO / "bench" / "data" / path.name
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            raw = json.loads(line)
            out[raw["qid"]] = raw.get("split") or "dev"
    return out


def interval(values: np.ndarray, draws: np.ndarray) -> tuple[float, float, float, np.ndarray]:
    """Mean of ``values``, its 95 % percentile interval over ``draws`` (rows of indices), and the
    resampled means."""
    means = values[draws].mean(axis=1)
    low, high = np.percentile(means, [2.5, 97.5])
    return float(values.mean()), float(low), float(high), means


def margins(
    run: dict[str, Any], split_of: dict[str, str], resamples: int = 10_000, seed: int = 0, goal: float = 0.03
) -> list[dict[str, Any]]:
    """One row per split and system compared with the default (see the module docstring)."""
    if resamples < 100:
        raise ValueError(f"resamples must be at least 100, got {resamples}")
    by_system = per_question(run)
    if DEFAULT not in by_system:
        raise ValueError("the run has no nbmemory default configuration")
    rows: list[dict[str, Any]] = []
    rng = np.random.default_rng(seed)
    base = by_system[DEFAULT]
    for split in ("dev", "test", "all"):
        qids = sorted(q for q in base if split in ("all", split_of.get(q)))
        answerable = [q for q in qids if base[q]["kind"] != "miss"]
        misses = [q for q in qids if base[q]["kind"] == "miss"]
        if not answerable:
            continue
        n = len(answerable)
        draws = rng.integers(0, n, size=(resamples, n))
        mine = np.array([base[q]["mrr@10"] for q in answerable])
        hit1, low, high, _ = interval(np.array([base[q]["hit@1"] for q in answerable]), draws)
        head: dict[str, Any] = {
            "split": split,
            "answerable": n,
            "hit@1": [round(hit1, 3), round(low, 3), round(high, 3)],
        }
        if misses:
            flagged = np.array([float(base[q]["flagged"]) for q in misses])
            share, low, high, _ = interval(
                flagged, rng.integers(0, len(misses), size=(resamples, len(misses)))
            )
            head["miss_flag"] = [round(share, 3), round(low, 3), round(high, 3), len(misses)]
        for name, got in by_system.items():
            if name == DEFAULT:
                continue
            missing = [q for q in answerable if q not in got]
            if missing:
                raise ValueError(f"{name} has no result for {len(missing)} questions, e.g. {missing[0]}")
            theirs = np.array([got[q]["mrr@10"] for q in answerable])
            diff, low, high, means = interval(mine - theirs, draws)
            rows.append(
                {
                    **head,
                    "system": name,
                    "default_mrr@10": round(float(mine.mean()), 3),
                    "system_mrr@10": round(float(theirs.mean()), 3),
                    "margin": round(diff, 3),
                    "ci95": [round(low, 3), round(high, 3)],
                    "p_reaches_goal": round(float((means >= goal).mean()), 3),
                }
            )
    return rows


def table(name: str, rows: list[dict[str, Any]], goal: float) -> str:
    """Markdown rows for one run."""
    lines = [
        f"\n**{name}**\n",
        f"| split | n | default Hit@1 (95 % CI) | system | default / system MRR@10 | margin (95 % CI) | P(margin >= {goal}) |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        h = r["hit@1"]
        lines.append(
            f"| {r['split']} | {r['answerable']} | {h[0]:.3f} ({h[1]:.3f}-{h[2]:.3f}) | {r['system']} | "
            f"{r['default_mrr@10']:.3f} / {r['system_mrr@10']:.3f} | {r['margin']:+.3f} "
            f"({r['ci95'][0]:+.3f} to {r['ci95'][1]:+.3f}) | {r['p_reaches_goal']:.2f} |"
        )
    flags = {r["split"]: r["miss_flag"] for r in rows if "miss_flag" in r}
    for split, (share, low, high, count) in flags.items():
        lines.append(
            f"\nNo-answer questions flagged, {split}: {share:.2f} of {count} (95 % CI {low:.2f}-{high:.2f})"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="notes_compare.py result files (JSON)")
    parser.add_argument("--resamples", type=int, default=10_000, help="bootstrap resamples (default 10000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument(
        "--goal", type=float, default=0.03, help="the margin the issue asks for (default 0.03)"
    )
    parser.add_argument("--out", default=str(OUT), help=f"JSON output (default {OUT})")
    args = parser.parse_args(argv)
    if args.resamples < 100:
        parser.error(f"--resamples must be at least 100, got {args.resamples}")
    report: dict[str, Any] = {
        "command": ["margins.py", *(argv if argv is not None else sys.argv[1:])],
        "resamples": args.resamples,
        "seed": args.seed,
        "goal": args.goal,
        "runs": {},
    }
    for path in args.runs:
        try:
            run = json.loads(Path(path).read_text(encoding="utf-8"))
            split_of = splits_of(run["queries"])
            rows = margins(run, split_of, args.resamples, args.seed, args.goal)
        except (OSError, KeyError, ValueError) as exc:
            parser.error(f"{path}: {exc}")
        label = f"{Path(path).name} ({run.get('subset') or 'whole corpus'}; {Path(run['queries']).name})"
        print(table(label, rows, args.goal))
        report["runs"][str(path)] = {"subset": run.get("subset"), "queries": run["queries"], "rows": rows}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
