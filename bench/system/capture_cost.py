"""What capturing executed cells adds to a cell's execution in the kernel: prints JSON and writes
it to ``--out`` (default ``bench/results/capture-cost.json``).

    python -m bench.system.capture_cost [--cells 200] [--embedder bundled|fake] [--probes 20] [--out FILE]

Two real kernels (nbclient, the venv's ``python3`` kernel) run the same ``--cells`` cells, one
after the other in turn (which kernel goes first alternates), one with capture on and one with it
off; this process owns the memory (the bundled model by default), as the Jupyter server does, and
both kernels are its clients. The cells are small and every source is new (each run is an insert
in the owner): assignments, one print, twenty prints, an expression's value, an import and a
call, and every 25th one raises.

Measured in each kernel, by hooks registered around nbmemory's: the cell's time from the first
``pre_run_cell`` hook to the last ``post_run_cell`` hook (the code, what it prints, and capture's
hooks when it is on); what capture adds is the difference of the two kernels' p50 and p95, and
the distribution of the same cell's time on less off (``added_paired``: the mix's p95 sits where
its eight failing cells, ten times slower, begin, so it moves with a few of them). Also
the time inside capture's two hooks alone (kernel with capture on), the round trip of each
execute request seen from here, and, for ``--probes`` cells, how long after its execute reply a
cell was found by a search here (the owner's write included). Wall times depend on what else runs:
the JSON has the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.lib.measure import dist, loadavg, log
from bench.lib.paths import RESULTS
from nbmemory.eval.report import write_json

# Registered before the extension loads (first pre_run_cell hook) and after capture's hooks (last
# post_run_cell hook): a cell's time in the kernel, capture's hooks included.
SETUP = """
import time as _t
_cell_ns, _t0 = [], [0]
def _start(info):
    _t0[0] = _t.perf_counter_ns()
get_ipython().events.register("pre_run_cell", _start)
"""
TIMED_HOOKS = """
_cap = get_ipython().magics_manager.registry["MemoryMagics"].cell_capture
_hook_ns, _pending = [], [0]
_pre, _post = _cap.pre_run_cell, _cap.post_run_cell
def _timed_pre(info):
    t = _t.perf_counter_ns(); _pre(info); _pending[0] = _t.perf_counter_ns() - t
def _timed_post(result):
    t = _t.perf_counter_ns(); _post(result); _hook_ns.append(_pending[0] + _t.perf_counter_ns() - t)
    _pending[0] = 0
_cap.pre_run_cell, _cap.post_run_cell = _timed_pre, _timed_post
"""
END = """
def _end(result):
    _cell_ns.append(_t.perf_counter_ns() - _t0[0])
get_ipython().events.register("post_run_cell", _end)
"""


#: What each measured cell does, by ``i % 5`` (every 25th one raises instead).
KINDS = ("assign", "one print", "twenty prints", "value", "import and call")


def kind_of(i: int) -> str:
    return "raise" if i % 25 == 24 else KINDS[i % 5]


def cell(i: int) -> str:
    """The ``i``-th measured cell; every source is new."""
    if i % 25 == 24:
        return f"1 / 0  # cell {i} fails"
    kind = i % 5
    if kind == 0:
        return f"value_{i} = {i} * 2"
    if kind == 1:
        return f'print("probe zqv{i}w printed one line")'
    if kind == 2:
        return f'for j in range(20):\n    print("row", {i}, j)'
    if kind == 3:
        return f"{i} ** 2"
    return f"import math\nmath.sqrt({i})"


class Kernel:
    """One kernel, run cell by cell through nbclient."""

    def __init__(self, name: str, folder: Path) -> None:
        import nbformat
        from nbclient import NotebookClient

        self.name = name
        self.nb = nbformat.v4.new_notebook()
        self.client = NotebookClient(
            self.nb,
            kernel_name="python3",
            timeout=120,
            allow_errors=True,
            resources={"metadata": {"path": str(folder)}},
        )
        self.round_trip_ms: list[float] = []

    def __enter__(self) -> Kernel:
        self._context = self.client.setup_kernel()
        self._context.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._context.__exit__(*exc)

    def run(self, source: str, timed: bool = False) -> Any:
        import nbformat

        cell = nbformat.v4.new_code_cell(source)
        self.nb.cells.append(cell)
        started = time.perf_counter()
        self.client.execute_cell(cell, len(self.nb.cells) - 1)
        if timed:
            self.round_trip_ms.append((time.perf_counter() - started) * 1000)
        return cell.outputs

    def value(self, expression: str) -> Any:
        """The JSON value of ``expression`` in the kernel."""
        outputs = self.run(f"import json as _json\nprint(_json.dumps({expression}))")
        text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
        return json.loads(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cells", type=int, default=200, help="measured cells per kernel (default 200)")
    parser.add_argument(
        "--embedder", choices=("bundled", "fake"), default="bundled", help="the owner's model"
    )
    parser.add_argument("--probes", type=int, default=20, help="cells whose time to be found is measured")
    parser.add_argument("--out", type=Path, default=RESULTS / "capture-cost.json")
    args = parser.parse_args(argv)

    from nbmemory.remote import connect

    folder = Path(tempfile.mkdtemp(prefix="nbmemory-capture-cost-"))
    os.environ["NBMEMORY_HOME"] = str(folder / "home")
    os.environ["IPYTHONDIR"] = str(folder / "ipython")
    # Both kernels load the extension with capture off; one turns it on once its timers are set.
    os.environ["NBMEMORY_CAPTURE"] = "0"
    kwargs: dict[str, Any] = {}
    if args.embedder == "fake":
        from nbmemory.embed import FakeEmbedder

        kwargs["embedder"] = FakeEmbedder(dim=384)
    owner = connect(folder / "home" / "memory.duckdb", **kwargs)
    owner.warm_up()
    load_before = loadavg()
    log(f"owner ready ({args.embedder}); load {load_before}")
    probed = [i for i in range(args.cells) if cell(i).startswith('print("probe')]
    probes = set(probed[:: max(1, len(probed) // max(1, args.probes))][: args.probes])
    found_after: list[float] = []
    probed = [i for i in probed if i in probes]
    with Kernel("on", folder) as on, Kernel("off", folder) as off:
        for kernel in (on, off):
            kernel.run(SETUP)
            kernel.run("%load_ext nbmemory")
        on.run(TIMED_HOOKS)
        on.run("%memcapture on")
        for kernel in (on, off):
            kernel.run(END)
        for i in range(args.cells):
            pair = (on, off) if i % 2 == 0 else (off, on)
            for kernel in pair:
                kernel.run(cell(i), timed=True)
                if kernel is on and i in probes:
                    ended = time.perf_counter()
                    token = f"zqv{i}w"
                    while time.perf_counter() - ended < 30:
                        hits = owner.search(token, k=3, kind="execution", log=False).hits
                        if any(token in h.text for h in hits):
                            found_after.append(time.perf_counter() - ended)
                            break
                        time.sleep(0.01)
            if i % 50 == 49:
                log(f"{i + 1} cells per kernel")
        n = args.cells
        cell_ms = {k.name: [ns / 1e6 for ns in k.value(f"_cell_ns[-{n}:]")] for k in (on, off)}
        hook_ms = [ns / 1e6 for ns in on.value(f"_hook_ns[-{n}:]")]
        on.run("_cap.flush(60)")
        status = on.value("_cap.status()")
    load_after = loadavg()
    captured = owner.memory.db.fetchall("SELECT count(*) FROM chunks WHERE kind = 'execution'")[0][0]
    owner.close()
    on_d, off_d = dist(cell_ms["on"]), dist(cell_ms["off"])
    result = {
        "command": (
            "python -m bench.system.capture_cost " + " ".join(argv if argv is not None else sys.argv[1:])
        ).strip(),
        "cells_per_kernel": n,
        "embedder": args.embedder,
        "kernel_cell_ms": {
            "capture_on": on_d,
            "capture_off": off_d,
            "added": {
                "p50": round(on_d["p50"] - off_d["p50"], 3),
                "p95": round(on_d["p95"] - off_d["p95"], 3),
            },
            # Cell by cell: the same cell's time with capture on less its time with it off.
            "added_paired": dist([a - b for a, b in zip(cell_ms["on"], cell_ms["off"], strict=True)]),
        },
        "by_cell_kind_p50_p95_ms": {
            kind: {
                name: [dist(v)["p50"], dist(v)["p95"]]
                for name, v in (
                    (name, [ms for i, ms in enumerate(values) if kind_of(i) == kind])
                    for name, values in (("on", cell_ms["on"]), ("off", cell_ms["off"]))
                )
            }
            for kind in (*KINDS, "raise")
        },
        "capture_hooks_ms": dist(hook_ms),
        "round_trip_ms": {"capture_on": dist(on.round_trip_ms), "capture_off": dist(off.round_trip_ms)},
        "found_after_reply_s": dist(found_after) if found_after else None,
        "probes_found": f"{len(found_after)} of {len(probed)}",
        "items_captured": int(captured),
        "kernel_status": status,
        "loadavg_before": load_before,
        "loadavg_after": load_after,
        "cpu_count": os.cpu_count(),
    }
    text = json.dumps(result, indent=2)
    print(text)
    write_json(result, args.out)
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
