"""``nbmemory watch`` and ``nbmemory status``: keep indexed folders current, and show how it goes.

The commands are registered in :mod:`nbmemory.cli.main`; this module holds what they do.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Sequence
from typing import Any

from nbmemory import live
from nbmemory.errors import NbMemoryError
from nbmemory.progress import refine_line


def run_watch(mem: Any, folders: Sequence[str], namespace: str | None, scan: bool, quiet: bool) -> int:
    """Index ``folders`` (default: the memory's roots) as they change, until Ctrl-C."""
    if not live.enabled():
        print("live indexing is off (NBMEMORY_WATCH=0): unset it to watch", file=sys.stderr)
        return 1
    if folders:
        missing = [f for f in folders if not os.path.isdir(f)]
        if missing:
            raise NbMemoryError(f"no such folder: {missing[0]}")
        ns = namespace or mem.settings.namespace
        roots = [live.Root(os.path.abspath(f), ns) for f in folders]
    else:
        roots = [live.Root(r["path"], r["namespace"]) for r in mem.roots()]
        if namespace is not None:
            roots = [r for r in roots if r.namespace == namespace]
        roots = [r for r in roots if os.path.isdir(r.path)]
        if not roots:
            raise NbMemoryError(
                "no folders to watch: name them (`nbmemory watch DIR`) or index one first (`nbmemory index DIR`)"
            )

    def show(batch: live.Batch) -> None:
        print(batch.line(), flush=True)
        for path, reason in batch.failures:
            print(f"  failed {path}: {reason}", file=sys.stderr, flush=True)

    queue = live.ChangeQueue(mem, source="watch", roots=roots, on_batch=show)
    stop, ready = threading.Event(), threading.Event()
    try:
        if scan:
            # What changed while nothing watched (and, for a folder named here, its first index).
            for root in roots:
                report = mem.index(root.path, namespace=root.namespace)
                for path, reason in report.skipped:
                    print(f"skipped {path}: {reason}", file=sys.stderr)
        if not quiet:
            names = ", ".join(f"{r.path} [{r.namespace}]" for r in roots)
            print(f"watching {names} (Ctrl-C stops)", file=sys.stderr, flush=True)
        live.watch(queue, [r.path for r in roots], stop, ready)
    except KeyboardInterrupt:
        print("stopped: everything indexed so far is kept", file=sys.stderr)
    finally:
        stop.set()
        queue.wait_idle(timeout=30)
        queue.close()
    return 0


def print_status(
    roots: list[dict[str, Any]],
    watchers: list[dict[str, Any]],
    as_json: bool,
    refine: dict[str, int] | None = None,
) -> None:
    """The roots, what each live indexer is doing and the passages made so far, as text or JSON."""
    if as_json:
        import json

        shown: dict[str, Any] = {"roots": roots, "watchers": watchers}
        if refine is not None:
            shown["refine"] = refine
        print(json.dumps(shown, indent=2, default=str))
        return
    if refine is not None:
        print(refine_line(refine))
    print(f"roots ({len(roots)}):" if roots else "roots: none (`nbmemory index DIR` adds one)")
    for r in roots:
        print(f"  {r['path']} [{r['namespace']}]")
    if not watchers:
        print("live indexing: not running (`nbmemory watch`, or a Jupyter server with nbmemory)")
    for w in watchers:
        state = f"indexing {w['indexing']}" if w["indexing"] else "idle"
        print(f"{w['source']} (pid {w['pid']}): {state}, {w['pending']} pending, {w['batches']} batches")
        if w.get("last_batch"):
            print(f"  last: {w['last_batch']['line']}")
        if w.get("error"):
            print(f"  error: {w['error']}")
        for f in w.get("failures", []):
            print(f"  failed {f['path']}: {f['reason']}")
