"""Agent memory: LoCoMo conversations stored turn by turn, searched as an agent would.

    python -m bench.quality.conversations                      # the dev half, default / bm25 / vector
    python -m bench.quality.conversations --data FILE.json --configs default,bm25,vector,rrf
    python -m bench.quality.conversations --out bench/results/conversations.json

Each conversation is one namespace; each dialogue turn one ``Memory.remember_many`` item, stored
as an agent stores a turn: ``"Speaker: text"`` (a shared photo's caption appended), the session
and its date as heading, the turn's id (``D1:3``) as source, and the fields an agent sets: the
session's date and time as event time, the speaker, the conversation. Each question of
categories 1-4 is searched in its conversation's namespace with ``k = 10``; a hit is a turn in
the question's evidence (entries split on ``;`` and spaces, ``D:11:26`` read as ``D11:26``).

Metrics (``pytrec_eval``, on the top 10 of each run): ``recall_any@k`` is trec_eval's
``success@k`` (some evidence turn in the top k), ``recall_all@5`` is ``recall@5 == 1``, MRR@10 is
``recip_rank`` of the run cut to 10. ``flagged`` is the share of answerable questions the
no-answer flag marks; category 5 (adversarial: the answer is not in the conversation) is
reported apart. Latency is the search work with the query vector already made (as
``bench.search.bench_shapes`` measures it), and the query embedding apart; load stated.

The store is built once per ingest format under ``bench/.cache/conversations/`` (document
vectors from the benchmark's embedding cache) and reused by later runs.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.lib.embed_cache import CachedEmbedder
from bench.lib.paths import REPO, RESULTS, SHARED
from nbmemory.eval.conversations import K, Question, Turn, evaluate, load
from nbmemory.search.config import PipelineConfig

DEFAULT_DATA = SHARED / "datasets" / "conversations" / "locomo-dev" / "locomo-dev.json"
DEFAULT_OUT = RESULTS / "conversations.json"
CACHE = REPO / "bench" / ".cache" / "conversations"
#: The conversations the turns stage's constants were chosen on (nbmemory/search/turns.py); the
#: others are reported apart as held out.
CHOSEN_ON = ("conv-26", "conv-41", "conv-43")
#: Bumped when what is stored for a turn changes: a new store is built.
INGEST_FORMAT = "turns-v3"

CONFIGS: dict[str, PipelineConfig] = {
    "default": PipelineConfig(),
    "default-turns": PipelineConfig(turns=False),
    "bm25": PipelineConfig(retrievers=("bm25",)),
    "vector": PipelineConfig(retrievers=("vector",)),
    "rrf": PipelineConfig.plain(),
}


def _store_key(turns: list[Turn], model_fingerprint: str) -> str:
    digest = hashlib.sha256(INGEST_FORMAT.encode())
    digest.update(model_fingerprint.encode())
    for t in turns:
        digest.update(f"{t.conversation}\0{t.dia_id}\0{t.text}\0{t.heading}\0{t.at}\n".encode())
    return digest.hexdigest()[:16]


def open_memory(turns: list[Turn], embedder: CachedEmbedder, log: Any) -> Any:
    """The memory of every conversation (one namespace each), built once and reused."""
    from nbmemory import Memory

    CACHE.mkdir(parents=True, exist_ok=True)
    path = CACHE / f"{_store_key(turns, embedder.fingerprint)}.duckdb"
    if path.exists():
        return Memory(path, embedder=embedder)
    tmp = path.with_suffix(".building.duckdb")
    for stale in (tmp, tmp.with_suffix(".duckdb.wal")):
        stale.unlink(missing_ok=True)
    log(f"storing {len(turns)} turns into {path.name}")
    memory = Memory(tmp, embedder=embedder, refine="inline")
    by_conv: dict[str, list[Turn]] = {}
    for t in turns:
        by_conv.setdefault(t.conversation, []).append(t)
    for cid, group in by_conv.items():
        memory.remember_many(
            [t.text for t in group],
            namespace=cid,
            sources=[t.dia_id for t in group],
            headings=[t.heading for t in group],
            **_fields(memory, group, cid),
        )
    memory.close()
    os.replace(tmp, path)
    return Memory(path, embedder=embedder)


def _fields(memory: Any, group: list[Turn], cid: str) -> dict[str, Any]:
    """The event time, speaker and conversation of each turn, where ``remember_many`` takes them."""
    import inspect

    params = inspect.signature(memory.remember_many).parameters
    out: dict[str, Any] = {}
    if "times" in params:
        out["times"] = [t.at for t in group]
    if "speakers" in params:
        out["speakers"] = [t.speaker for t in group]
    if "conversations" in params:
        out["conversations"] = [cid] * len(group)
    return out


def run_config(
    memory: Any, name: str, config: PipelineConfig, questions: list[Question]
) -> tuple[dict[str, list[str]], dict[str, bool], list[float]]:
    ranked: dict[str, list[str]] = {}
    flagged: dict[str, bool] = {}
    ms: list[float] = []
    for q in questions:
        started = time.perf_counter()
        result = memory.search(q.text, k=K, namespace=q.conversation, config=config, log=False)
        ms.append((time.perf_counter() - started) * 1000)
        ranked[q.qid] = [h.source for h in result.hits]
        flagged[q.qid] = bool(result.rejected)
    return ranked, flagged, ms


def summarise(
    name: str,
    per_query: dict[str, dict[str, float]],
    flagged: dict[str, bool],
    ms: list[float],
    answerable: list[Question],
    adversarial: list[Question],
) -> dict[str, Any]:
    ids = [q.qid for q in answerable]
    row: dict[str, Any] = {"config": name, "questions": len(ids)}
    for metric in ("recall_any@1", "recall_any@5", "recall_any@10", "recall_all@5", "mrr@10"):
        row[metric] = round(float(np.mean([per_query[q][metric] for q in ids])), 4)
    row["answerable_flagged"] = round(float(np.mean([flagged[q] for q in ids])), 4)
    row["cat5_flagged"] = round(float(np.mean([flagged[q.qid] for q in adversarial])), 4) if adversarial else None
    by_cat: dict[str, float] = {}
    for cat in (1, 2, 3, 4):
        cat_ids = [q.qid for q in answerable if q.category == cat]
        if cat_ids:
            by_cat[f"mrr@10_cat{cat}"] = round(float(np.mean([per_query[q]["mrr@10"] for q in cat_ids])), 4)
            by_cat[f"flagged_cat{cat}"] = round(float(np.mean([flagged[q] for q in cat_ids])), 4)
    row.update(by_cat)
    row["p50_ms"] = round(float(np.percentile(ms, 50)), 2)
    row["p95_ms"] = round(float(np.percentile(ms, 95)), 2)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument("--configs", default="default,bm25,vector")
    parser.add_argument("--conversations", default="", help="comma-separated sample ids (default: all)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    parser.add_argument("--per-query", type=Path, default=None, help="write every question's ranks here (JSONL)")
    args = parser.parse_args(argv)

    def log(message: str) -> None:
        print(time.strftime("%H:%M:%S"), message, file=sys.stderr, flush=True)

    from nbmemory.config import Settings
    from nbmemory.embed.loader import load_model

    turns, questions = load(args.data)
    if args.conversations:
        wanted = set(args.conversations.split(","))
        turns = [t for t in turns if t.conversation in wanted]
        questions = [q for q in questions if q.conversation in wanted]
    embedder = CachedEmbedder(load_model(Settings().model), log=log)
    memory = open_memory(turns, embedder, log)
    answerable = [q for q in questions if q.category in (1, 2, 3, 4) and q.evidence]
    adversarial = [q for q in questions if q.category == 5]
    searched = answerable + adversarial
    qrels = {q.qid: {e: 1 for e in q.evidence} for q in answerable}
    embed_ms = []
    vectors: dict[str, np.ndarray] = {}
    for q in searched:
        started = time.perf_counter()
        vectors[q.text] = embedder.inner.embed_query(q.text)
        embed_ms.append((time.perf_counter() - started) * 1000)
    embedder.query_vectors = vectors
    rows = []
    by_conversation: dict[str, list[dict[str, Any]]] = {}
    by_part: dict[str, list[dict[str, Any]]] = {}
    per_query_out: dict[str, dict[str, Any]] = {}
    load_before = os.getloadavg()[0]
    for name in args.configs.split(","):
        config = CONFIGS[name]
        run_config(memory, name, config, searched[:20])  # warm the memory-resident copies
        ranked, flagged, ms = run_config(memory, name, config, searched)
        per_query = evaluate({q: ranked[q] for q in qrels}, qrels)
        rows.append(summarise(name, per_query, flagged, ms, answerable, adversarial))
        for part, mine in (
            ("chosen on", [q for q in answerable if q.conversation in CHOSEN_ON]),
            ("held out", [q for q in answerable if q.conversation not in CHOSEN_ON]),
        ):
            if mine:
                row = summarise(name, per_query, flagged, ms, mine, [])
                by_part.setdefault(part, []).append({k: v for k, v in row.items() if not k.endswith("_ms")})
        for cid in sorted({q.conversation for q in answerable}):
            mine = [q for q in answerable if q.conversation == cid]
            part = summarise(name, per_query, flagged, ms, mine, [q for q in adversarial if q.conversation == cid])
            by_conversation.setdefault(cid, []).append({k: v for k, v in part.items() if not k.endswith("_ms")})
        log(f"{name}: {rows[-1]}")
        for q in answerable:
            per_query_out.setdefault(q.qid, {"question": q.text, "category": q.category, "evidence": q.evidence})
            per_query_out[q.qid][name] = {"ranked": ranked[q.qid], "flagged": flagged[q.qid], **per_query[q.qid]}
    memory.close()
    load_after = os.getloadavg()[0]
    header = ["config", "recall_any@1", "recall_any@5", "recall_any@10", "recall_all@5", "mrr@10",
              "answerable_flagged", "cat5_flagged", "p50_ms", "p95_ms"]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(str(row.get(h)) for h in header) + " |")
    report = {
        "command": "python -m bench.quality.conversations " + " ".join(argv or sys.argv[1:]),
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "data": str(args.data.name),
        "turns": len(turns),
        "answerable": len(answerable),
        "adversarial": len(adversarial),
        "load": [round(load_before, 2), round(load_after, 2)],
        "query_embedding_p50_ms": round(float(np.percentile(embed_ms, 50)), 2),
        "ingest_format": INGEST_FORMAT,
        "rows": rows,
        "chosen_on": list(CHOSEN_ON),
        "by_part": by_part,
        "by_conversation": by_conversation,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    if args.per_query:
        with args.per_query.open("w", encoding="utf-8") as fh:
            for qid, entry in per_query_out.items():
                fh.write(json.dumps({"qid": qid, **entry}) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
