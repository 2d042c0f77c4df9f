"""Items related to one stored item: its nearest neighbours by vector, then the items linked to it."""

from __future__ import annotations

from nbmemory.errors import NotFoundError
from nbmemory.items import Hit, Item
from nbmemory.search.result import hydrate
from nbmemory.search.vector import nearest
from nbmemory.store import item_rows, vectors
from nbmemory.store.db import Database


def related(db: Database, item: Item, k: int, namespace: str | None) -> list[Hit]:
    """The ``k`` items nearest ``item`` by vector (in ``namespace`` when given), then those
    linked to it, as hits ranked by their cosine to it (a linked item may have none: 0)."""
    vec = vectors.get(db, [item.id]).get(item.id)
    if vec is None:
        raise NotFoundError(f"item {item.id} has no vector: run `nbmemory doctor --repair`")
    where = None if namespace is None else "c.namespace = ?"
    found, _ = nearest(db, vec, k + 1, len(vec), where, [] if namespace is None else [namespace])
    ids = [i for i, _ in found if i != item.id][:k]
    sims = {i: 1.0 - d for i, d in found}
    linked = [r["dst"] if r["src"] == item.id else r["src"] for r in item_rows.links(db, item.id)]
    ids += [i for i in linked if i not in ids]
    hits = hydrate(
        db,
        [(i, sims.get(i, 0.0)) for i in ids],
        item.text,
        {"vector": {i: r for r, i in enumerate(ids, 1)}},
        {"vector": sims},
    )
    # Linked items keep their own namespace: drop those outside the one asked for.
    return [h for h in hits if namespace is None or h.namespace == namespace]
