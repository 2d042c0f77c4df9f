"""The main job on bundled defaults: index the sample corpus and run example searches."""

from __future__ import annotations

import json
import time
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbmemory.search.result import SearchResult

SAMPLE_CORPUS = Path(str(files("nbmemory") / "sample_corpus"))


def demo_queries() -> list[dict[str, str]]:
    path = SAMPLE_CORPUS / "DEMO_QUERIES.json"
    return list(json.loads(path.read_text(encoding="utf-8")))


def target_rank(result: SearchResult, target: str) -> int | None:
    """The rank of the first hit from ``target`` (a path under the sample corpus), or None."""
    wanted = (SAMPLE_CORPUS / target).resolve()
    for rank, hit in enumerate(result.hits, start=1):
        if hit.source is not None and Path(hit.source).resolve() == wanted:
            return rank
    return None


def run_demo(
    home: str | None = None, db: str | None = None, model: str | None = None, quiet: bool = False
) -> int:
    """Index :data:`SAMPLE_CORPUS` into ``<home>/demo.duckdb`` and print ranked hits."""
    from nbmemory.config import Settings
    from nbmemory.memory import Memory
    from nbmemory.options import print_hits

    settings = Settings(home=Path(home)) if home else Settings()
    path = Path(db) if db else settings.home / "demo.duckdb"
    print(f"== nbmemory demo: memory file {path}")
    t0 = time.perf_counter()
    with Memory(path, model=model, settings=settings, progress=not quiet) as mem:
        _ = mem.embedder
        print(f"== model {mem.embedder.name} loaded in {time.perf_counter() - t0:.1f} s")
        print(f"== indexing the bundled sample corpus: {SAMPLE_CORPUS}")
        report = mem.index(SAMPLE_CORPUS, namespace="demo")
        for skipped, reason in report.skipped:
            print(f"   skipped {skipped}: {reason}")
        print("   " + report.summary().replace("\n", "\n   "))
        found = 0
        queries = demo_queries()
        for entry in queries:
            print(f"\n== search: {entry['query']!r}")
            print(f"   ({entry.get('why', '')})")
            result = mem.search(entry["query"], k=5, namespace="demo")
            print_hits(result)
            rank = target_rank(result, entry["target"])
            found += rank is not None and rank <= 3
            verdict = f"found at rank {rank}" if rank is not None else "not in the top 5"
            print(f"   target {entry['target']}: {verdict}; {result.trace.total_ms:.1f} ms")
        print(f"\n== {found} of {len(queries)} queries found their target in the top 3")
        print("\n== remember, then search at once")
        item = mem.remember(
            "The demo printer on floor 3 only accepts jobs over the guest Wi-Fi.",
            tags=["office"],
            namespace="demo",
        )
        result = mem.search("why can't I print on the third floor", k=3, namespace="demo")
        print_hits(result)
        mem.forget(item.id)
        print("\n== filtered: notebooks only, query 'recall at 10'")
        print_hits(mem.search("recall at 10", k=3, namespace="demo", kind="notebook"))
        stats = mem.stats()
        print(f"\n== {stats['items']} items in {stats['documents']} documents, {stats['file_mb']} MB")
    return 0
