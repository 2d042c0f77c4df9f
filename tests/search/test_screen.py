"""The int8 screen (:mod:`nbmemory.search.screen`) keeps the vector scan exact: every row the full
float32 scan puts among the ``L`` best is a candidate, whatever the data (clusters, exact and
near duplicates, zero vectors, rows written after the build, filters), and a search through it
ranks as one without it."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from nbmemory import Memory
from nbmemory.embed import FakeEmbedder
from nbmemory.search import hot
from nbmemory.search import screen as screen_mod
from nbmemory.search.screen import Screen


def clustered(n: int, dim: int = 96, seed: int = 0) -> np.ndarray:
    """Rows around a few centres (as real embeddings are), with exact and near copies and zeros."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((8, dim))
    mat = centres[rng.integers(0, 8, n)] + 0.6 * rng.standard_normal((n, dim))
    mat[n // 2 : n // 2 + 40] = mat[:40]  # exact copies: equal scores
    mat[n // 2 + 40 : n // 2 + 80] = mat[40:80] + 1e-4 * rng.standard_normal((40, dim))
    mat[7] = 0.0  # no vector: never a candidate
    return (mat * rng.uniform(0.5, 3.0, (n, 1))).astype(np.float32)  # rows of any length


def full_scan(mat: np.ndarray, inv_norm: np.ndarray, q: np.ndarray, ok: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    rows = np.flatnonzero(ok)
    return rows, ((mat @ q) * inv_norm)[rows]


def inverse_norms(mat: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(mat, axis=1)
    return np.where(norms > 0, 1.0 / np.maximum(norms, 1e-30), 0.0).astype(np.float32)


def assert_holds_the_best(mat, inv_norm, screen, q, ok, limits) -> None:  # type: ignore[no-untyped-def]
    rows, scores = full_scan(mat, inv_norm, q, ok)
    scan = screen.scan(q, mat, inv_norm, ok)
    for limit in limits:
        got, got_scores = scan(limit)
        assert len(set(got.tolist())) == len(got)
        assert ok[got].all()
        # Every row scoring at least the limit-th best score (ties included) is a candidate ...
        cut = np.sort(scores)[::-1][min(limit, len(scores)) - 1]
        assert set(rows[scores >= cut].tolist()) <= set(got.tolist()), limit
        # ... with the full scan's float32 cosine (to its last bits: a gathered product).
        full = dict(zip(rows.tolist(), scores.tolist(), strict=True))
        assert got_scores == pytest.approx([full[r] for r in got.tolist()], abs=1e-6)


def test_the_screen_keeps_every_row_the_full_scan_ranks_among_the_best() -> None:
    mat = clustered(6000)
    inv_norm = inverse_norms(mat)
    screen = Screen.build(mat, inv_norm)
    assert screen is not None
    rng = np.random.default_rng(1)
    ok = inv_norm > 0
    for n in range(40):
        q = mat[rng.integers(0, len(mat))] + 0.5 * rng.standard_normal(mat.shape[1]).astype(np.float32)
        if n % 4 == 0:
            q = mat[n]  # a stored row itself: its copies tie with it
        q = (q / np.linalg.norm(q)).astype(np.float32)
        filtered = ok & (rng.random(len(ok)) < 0.3) if n % 3 == 0 else ok
        assert_holds_the_best(mat, inv_norm, screen, q, filtered, (1, 10, 66, 216, 5000, 10_000))
    # It reads far fewer rows again than it screens.
    got, _ = screen.scan(q, mat, inv_norm, ok)(66)
    assert len(got) < len(mat) // 4


def test_rows_written_after_the_build_are_scanned_exactly() -> None:
    mat = clustered(3000, seed=2)
    inv_norm = inverse_norms(mat)
    screen = Screen.build(mat, inv_norm)
    assert screen is not None
    rng = np.random.default_rng(3)
    # Rows changed in place (stale) and rows appended past the build.
    changed = rng.choice(3000, 200, replace=False)
    mat[changed] = clustered(200, seed=4)
    screen.stale[changed] = True
    grown = np.concatenate([mat, clustered(300, seed=5)])
    inv_norm = inverse_norms(grown)
    assert screen.drift(len(grown)) == pytest.approx(500 / 3000)
    asked = [row for pair in zip(changed[:10], range(3000, 3010), strict=True) for row in pair]
    for row in asked:
        q = grown[row] if inv_norm[row] > 0 else grown[0]  # (clustered() leaves row 7 empty)
        q = (q / np.linalg.norm(q)).astype(np.float32)
        assert_holds_the_best(grown, inv_norm, screen, q, inv_norm > 0, (1, 10, 66))


def test_a_runtime_whose_integer_products_are_wrong_gets_no_screen() -> None:
    # A kernel that saturated would give wrong sums: the build checks the runtime's products
    # against numpy's and serves the float32 scan instead. (A wrong kernel cannot be caused here:
    # the session's answers are altered.)
    mat = clustered(600)
    q = np.full((600, 96), 63, dtype=np.int8)
    q[::2, ::3] = -64
    good, weights = screen_mod._session(q)
    assert screen_mod._exact(good, weights)

    class Saturating:
        def run(self, outputs, feeds):  # type: ignore[no-untyped-def]
            y = good.run(outputs, feeds)
            return [np.clip(y[0], -32768, 32767)]

    assert not screen_mod._exact(Saturating(), weights)
    assert Screen.build(mat, inverse_norms(mat)) is not None


def search_ids(mem: Memory, queries: list[str], **filters) -> list[list[tuple[int, float]]]:  # type: ignore[no-untyped-def]
    out = []
    for query in queries:
        result = mem.search(query, k=10, log=False, **filters)
        vector = result.trace.stage("vector")
        assert vector is not None
        out.append([(h.id, h.score) for h in result.hits] + [(i, vector.scores[i]) for i in vector.output])
    return out


def test_a_memory_searched_through_the_screen_ranks_as_without_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        texts = [f"note {n} about {' '.join(f'w{(n * 7 + j) % 97}' for j in range(12))}" for n in range(1500)]
        mem.remember_many(texts)
        queries = [f"w{n} w{n + 3} w{(n * 5) % 97}" for n in range(30)]

        def served(on: bool) -> hot.HotIndex:
            monkeypatch.setattr(screen_mod, "MIN_ROWS", 0 if on else 10**9)
            hot.reset(mem.db)
            index = hot.ensure(mem.db)
            assert index is not None and (index.screen is not None) == on
            return index

        served(False)
        exact = search_ids(mem, queries)
        exact_filtered = search_ids(mem, queries[:10], tags=["none"])
        index = served(True)
        # Each search runs one integer product, begun before BM25 and taken up by the vector stage.
        screen = index.screen
        assert screen is not None
        products = []
        product = screen._product
        monkeypatch.setattr(
            screen, "_product", lambda a: products.append(threading.current_thread().name) or product(a)
        )
        assert search_ids(mem, queries) == exact
        assert len(products) == len(queries) and all(name.startswith("nbmemory-screen") for name in products)
        assert search_ids(mem, queries[:10], tags=["none"]) == exact_filtered
        # Writes after the build: new notes, one forgotten; the screen scans them exactly.
        for n in range(40):
            mem.remember(f"later note {n} w{n} w{n + 3} w{(n * 5) % 97}")
        first = exact[0][0][0]
        mem.forget(first)
        index = hot.ensure(mem.db)
        assert index is not None and index.screen is not None and index.screen.stale.any()
        after = search_ids(mem, queries)
        assert all(first not in [i for i, _ in hits] for hits in after)
        served(False)
        assert search_ids(mem, queries) == after


def test_a_screen_built_after_the_search_that_built_the_index_scans_rows_written_meanwhile_exactly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An index built inside a search gets its screen afterwards, on a thread of its own. Rows the
    # writes of that time change may have been read half written: they must be scanned exactly.
    with Memory(tmp_path / "m.duckdb", embedder=FakeEmbedder(dim=64)) as mem:
        texts = [f"note {n} about {' '.join(f'w{(n * 7 + j) % 97}' for j in range(12))}" for n in range(1500)]
        ids = mem.remember_many(texts)
        monkeypatch.setattr(screen_mod, "MIN_ROWS", 0)
        read, release = threading.Event(), threading.Event()
        build = Screen.build

        def held(mat: np.ndarray, inv_norm: np.ndarray) -> Screen | None:
            made = build(mat, inv_norm)  # the rows as they are before the writes below
            read.set()
            release.wait(60)
            return made

        monkeypatch.setattr(Screen, "build", staticmethod(held))
        hot.reset(mem.db)
        mem.search("w1 w2", log=False)  # builds the index in the search, the screen after it
        assert read.wait(60)
        rewritten = ids[100:140]
        for n, item in enumerate(rewritten):
            mem.update(item, text=f"rewritten zq{n} zr{n} zs{n}")
        mem.forget(ids[200])
        mem.remember_many([f"added zq{n} zr{n} later" for n in range(20)])
        queries = [f"zq{n} zr{n} zs{n}" for n in range(40)]
        mem.search(queries[0], log=False)  # applies the writes while the screen is built
        with mem.db.lock:
            index = hot.serving(mem.db)
        assert index is not None and index.screen is None
        release.set()
        for _ in range(600):
            if index.screen is not None:
                break
            threading.Event().wait(0.05)
        assert index.screen is not None
        rows, _ = index.rows_of(np.asarray(rewritten, dtype=np.int64))
        assert index.screen.stale[rows].all()
        screened = search_ids(mem, queries)
        monkeypatch.setattr(screen_mod, "MIN_ROWS", 10**9)
        hot.reset(mem.db)
        index = hot.ensure(mem.db)
        assert index is not None and index.screen is None
        assert search_ids(mem, queries) == screened


def test_the_float32_scan_without_the_screen_scores_a_row_the_same_among_any_rows() -> None:
    # Below the screen's rows (and under a filter) the scan sums each row with einsum, not BLAS:
    # a filter's rows alone score as they do among all, within float32 of the BLAS product.
    mat = clustered(3000)
    inv_norm = inverse_norms(mat)
    q = np.random.default_rng(1).standard_normal(mat.shape[1]).astype(np.float32)
    q /= np.linalg.norm(q)
    every = hot._cosines32(mat, inv_norm, np.arange(len(mat)), q)
    rows = np.flatnonzero(np.random.default_rng(2).random(len(mat)) < 0.2)
    assert np.array_equal(hot._cosines32(mat, inv_norm, rows, q), every[rows])
    assert np.abs(every - (mat @ q) * inv_norm).max() < 1e-6
