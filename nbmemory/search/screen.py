"""An exact vector scan from a copy a quarter the size: an int8 screen with a proven error bound.

The exact scan of the memory-resident index multiplies every stored vector (float32) by the
query: at 50,000 chunks of 384 dimensions that is 77 MB read per search, and the scan is bound by
memory, not arithmetic. The screen keeps each unit row ``u`` as 7-bit integers ``q`` with one
scale ``s`` (``u = s * q + e``) and the query likewise (``x = t * p + f``), and scores every row
with one integer product through ONNX Runtime's ``MatMulInteger``, reading a quarter of the bytes. Then
``u . x = s * t * (q . p) + s * (q . f) + e . x``, and by Cauchy-Schwarz

    | u . x - s * t * (q . p) |  <=  s * |q| * |f|  +  |e| * |x|  (+ float32 rounding),

with ``|q|`` and ``|e|`` kept per row and ``|f|`` taken per query: a bound, not an estimate. A row
whose upper bound lies below the ``L``-th best lower bound cannot be among the ``L`` best, so only
the others (a few hundred of 50,000 on BEIR chunks) are scored again in float32, exactly as the
full scan scores them. The result is the full scan's ``L`` best: no recall is traded
(``tests/search/test_screen.py``), unlike the partitions that serve above
:data:`~nbmemory.search.hot.ANN_MIN_ROWS`.

Weights are 7-bit (-64..63), not 8: a kernel that sums unsigned-by-signed byte pairs into 16 bits
(AVX2's ``vpmaddubsw``) then cannot saturate (255 * 64 * 2 < 32768). Each build also checks the
runtime's integer products against numpy's on probes that reach those extremes, and serves
without a screen (the float32 scan) if they differ.

Rows written after the build are scanned exactly (``stale`` and rows past the build), as the
partitions' are; past :data:`MAX_DRIFT` of them the index is built again.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

#: From this many rows the screen serves the unfiltered and filtered scans; below, its fixed costs
#: are most of what it would save (``bench/search/screen_scan.py`` measures both scans by size).
MIN_ROWS = 10_000
#: ``NBMEMORY_SCREEN=0``: always the float32 scan (the results are the same; for comparison).
ENABLED = os.environ.get("NBMEMORY_SCREEN", "1") != "0"
#: Largest weight magnitude: 7-bit, see the module docstring.
WEIGHT_MAX = 63
QUERY_MAX = 127
#: Added to every bound: the float32 scan's own rounding (384 products and a scale: under 3e-5).
ROUNDING = 1e-4
#: Rows quantized at a time while building (their float64 copies: 12 MB).
BUILD_BLOCK = 4096
#: Share of rows written since the build (scanned exactly meanwhile) past which it is made again.
MAX_DRIFT = 0.1

Scan = Callable[[int], tuple[np.ndarray, np.ndarray]]
#: Runs a search's integer product while BM25 runs (ONNX Runtime releases the GIL): one thread.
_POOL = ThreadPoolExecutor(max_workers=1, thread_name_prefix="nbmemory-screen")
_STARTED = "screen_product"


class Screen:
    """The int8 copy of a :class:`~nbmemory.search.hot.HotIndex`'s unit rows, as one ONNX Runtime
    session, and each row's scale and norms. Build with :meth:`build`; read with :meth:`scan`."""

    def __init__(self, session: Any, scale: np.ndarray, qnorm: np.ndarray, enorm: np.ndarray) -> None:
        self.session = session
        self.weights: np.ndarray | None = None
        self.scale, self.qnorm, self.enorm = scale, qnorm, enorm
        self.n = len(scale)
        self.stale = np.zeros(self.n, dtype=bool)

    @classmethod
    def build(cls, mat: np.ndarray, inv_norm: np.ndarray) -> Screen | None:
        """The screen of ``mat``'s rows (scaled by ``inv_norm``; a row scaled by 0 is never a
        candidate), or None when ONNX Runtime is missing or its integer products are not exact."""
        try:
            import onnx  # noqa: F401  (the model is built with it)
            import onnxruntime  # noqa: F401
        except ImportError:
            return None
        n = len(mat)
        q = np.empty(mat.shape, dtype=np.int8)
        scale, qnorm, enorm = np.zeros(n), np.zeros(n), np.zeros(n)
        for lo in range(0, n, BUILD_BLOCK):  # float64 work a block at a time: no copy of the whole
            hi = min(lo + BUILD_BLOCK, n)
            unit = (mat[lo:hi] * inv_norm[lo:hi, None]).astype(np.float64)
            scale[lo:hi] = np.abs(unit).max(axis=1) / WEIGHT_MAX if hi > lo else 0.0
            safe = np.where(scale[lo:hi] > 0, scale[lo:hi], 1.0)
            q[lo:hi] = np.clip(np.rint(unit / safe[:, None]), -WEIGHT_MAX - 1, WEIGHT_MAX)
            qnorm[lo:hi] = scale[lo:hi] * np.linalg.norm(q[lo:hi].astype(np.float64), axis=1)
            enorm[lo:hi] = np.linalg.norm(unit - scale[lo:hi, None] * q[lo:hi], axis=1)
        session, weights = _session(q)
        del q
        if not _exact(session, weights):
            return None
        # Kept in float32 (read once per search); each norm rounded up, so bounds stay bounds.
        up = np.float32(1 + 1e-6)
        screen = cls(session, scale.astype(np.float32), qnorm.astype(np.float32) * up, enorm.astype(np.float32) * up)
        screen.weights = weights  # the session reads them: they live as long as it does
        return screen

    def drift(self, n: int) -> float:
        """The share of rows scanned exactly because they were written since the build."""
        return (int(self.stale.sum()) + n - self.n) / max(self.n, 1)

    def start(self, q: np.ndarray, memo: dict[Any, Any]) -> None:
        """Start the integer product of the unit query ``q`` in the background, for :meth:`scan`
        of the same search (``memo``) to take: it then runs while BM25 does. It reads only the
        runtime's own copy of the weights, which no write changes."""
        t, a = _quantized(q)
        if t > 0 and (_STARTED, id(self)) not in memo:
            memo[(_STARTED, id(self))] = (a, _POOL.submit(self._product, a))

    def _product(self, a: np.ndarray) -> np.ndarray:
        return self.session.run(None, {"A": a})[0][0]

    def scan(
        self, q: np.ndarray, mat: np.ndarray, inv_norm: np.ndarray, ok: np.ndarray, memo: dict[Any, Any] | None = None
    ) -> Scan:
        """For the unit query ``q`` over the rows where ``ok``: a function of ``L`` giving the
        rows that may be among the ``L`` best and their float32 cosines as the full scan gives
        them (``(mat[rows] @ q) * inv_norm[rows]``). One integer product per query (the one
        :meth:`start` began for this search's ``memo``, if any); each ``L`` (a deeper pass asks
        again) costs one partition of the bounds."""
        t, a = _quantized(q)
        if t == 0.0:
            rows = np.flatnonzero(ok)
            return lambda _limit: (rows, (mat[rows] @ q) * inv_norm[rows])
        started: tuple[np.ndarray, Future[np.ndarray]] | None = (
            memo.pop((_STARTED, id(self)), None) if memo is not None else None
        )
        y = started[1].result() if started is not None and np.array_equal(started[0], a) else self._product(a)
        p = a[0].astype(np.float64) - 128
        q64 = q.astype(np.float64)
        f_norm, q_norm = float(np.linalg.norm(q64 - t * p)), float(np.linalg.norm(q64))
        screened = ok[: self.n] & ~self.stale
        # float32 throughout: the products' rounding (under 1e-6 here) is within ROUNDING.
        approx = y.astype(np.float32) * (self.scale * np.float32(t))
        bound = self.qnorm * np.float32(f_norm) + (self.enorm * np.float32(q_norm) + np.float32(ROUNDING))
        lower, upper = approx - bound, approx + bound
        lower[~screened] = -np.inf
        upper[~screened] = -np.inf
        tail = np.concatenate([np.flatnonzero(ok[: self.n] & self.stale), self.n + np.flatnonzero(ok[self.n :])])
        tail_scores = (mat[tail] @ q) * inv_norm[tail]

        def rows_for(limit: int) -> tuple[np.ndarray, np.ndarray]:
            tau = _limit_th(np.concatenate([lower, tail_scores]), limit)
            # The rows at or above tau are limit rows at least as good as it: a row whose upper
            # bound is below it is not among the best.
            picked = np.flatnonzero(upper >= tau if tau > -np.inf else screened)
            scores = (mat[picked] @ q) * inv_norm[picked]
            return np.concatenate([picked, tail]), np.concatenate([scores, tail_scores])

        return rows_for


def _quantized(q: np.ndarray) -> tuple[float, np.ndarray]:
    """The query's scale ``t`` and its integers ``p`` as the runtime reads them (``p + 128``, one
    row of uint8)."""
    t = float(np.abs(q).max()) / QUERY_MAX
    if t == 0.0:
        return t, np.zeros((1, len(q)), dtype=np.uint8)
    p = np.clip(np.rint(q / t), -QUERY_MAX, QUERY_MAX)
    return t, (p + 128).astype(np.uint8)[None, :]


def _limit_th(values: np.ndarray, limit: int, stride: int = 8) -> float:
    """The ``limit``-th largest of ``values`` (-inf when there are fewer). Partitioning every value
    costs more than the integer product saved; the ``limit``-th largest of every ``stride``-th
    value is no larger, so the values at or above it hold the answer, and only they are
    partitioned."""
    if len(values) < limit:
        return -np.inf
    sample = values[::stride]
    if len(sample) >= limit:
        floor = -np.partition(-sample, limit - 1)[limit - 1]
        values = values[values >= floor]
    return float(-np.partition(-values, limit - 1)[limit - 1])


def _session(q: np.ndarray) -> tuple[Any, np.ndarray]:
    """An ONNX Runtime session computing ``(p + 128 - 128) @ q.T`` for a uint8 query ``p + 128``,
    and the weights it reads, which must outlive it. They are handed over as an external
    initializer in memory: written into the model instead, the runtime kept copies of them (at
    50,000 x 384: 104 MB for the session against 48 MB, most of it the runtime's packed copy)."""
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    rows, dim = q.shape
    weights = np.ascontiguousarray(q.T)
    placeholder = TensorProto(name="B", data_type=TensorProto.INT8, dims=[dim, rows], data_location=TensorProto.EXTERNAL)
    placeholder.external_data.add(key="location", value="nbmemory-screen-weights-in-memory")
    zero = numpy_helper.from_array(np.array(128, dtype=np.uint8), "zero")
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", ["A", "B", "zero"], ["Y"])],
        "nbmemory_screen",
        [helper.make_tensor_value_info("A", TensorProto.UINT8, [1, dim])],
        [helper.make_tensor_value_info("Y", TensorProto.INT32, [1, rows])],
        initializer=[placeholder, zero],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    options = ort.SessionOptions()
    # One thread: as fast as two here (memory-bound), and the other core stays with DuckDB.
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.add_external_initializers(["B"], [ort.OrtValue.ortvalue_from_numpy(weights)])
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]), weights


def _exact(session: Any, weights: np.ndarray, probes: int = 8, seed: int = 0) -> bool:
    """Whether the session's integer products equal numpy's for probes at the extremes (every
    query byte 1 or 255, signed as the first rows' weights to make the sums as large as they get)
    and random ones, over up to the first 512 rows (``weights``: dimensions x rows)."""
    rng = np.random.default_rng(seed)
    head = weights[:, :512].T.astype(np.int64)
    queries: list[np.ndarray] = [np.where(row >= 0, QUERY_MAX, -QUERY_MAX) for row in head[:probes]]
    queries += list(rng.integers(-QUERY_MAX, QUERY_MAX + 1, size=(probes, weights.shape[0])))
    for p in queries:
        got = session.run(None, {"A": (p + 128).astype(np.uint8)[None, :]})[0][0][: len(head)]
        if not np.array_equal(got.astype(np.int64), head @ p):
            return False
    return True
