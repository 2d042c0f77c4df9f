"""The folders a user indexed (the roots the live indexer keeps current), per namespace."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from nbmemory.store.db import Database, utcnow


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def add(db: Database, folder: Path, namespace: str) -> bool:
    """Record ``folder`` as a root of ``namespace``; whether it is new.

    A folder inside a root of the same namespace is already covered and is not recorded; roots
    inside the new one are replaced by it.
    """
    path = str(folder)
    with db.transaction():
        known = [r[0] for r in db.fetchall("SELECT path FROM roots WHERE namespace = ?", [namespace])]
        if any(_inside(path, root) for root in known):
            return False
        nested = [root for root in known if _inside(root, path)]
        if nested:
            db.execute(
                "DELETE FROM roots WHERE namespace = ? AND path IN (SELECT unnest(?::VARCHAR[]))",
                [namespace, nested],
            )
        db.execute("INSERT INTO roots VALUES (?, ?, ?)", [path, namespace, utcnow()])
    return True


def listed(db: Database) -> list[dict[str, Any]]:
    """Every root: ``{path, namespace, added_at}``, by path."""
    return [
        {"path": path, "namespace": namespace, "added_at": added_at.isoformat(timespec="seconds")}
        for path, namespace, added_at in db.fetchall(
            "SELECT path, namespace, added_at FROM roots ORDER BY path, namespace"
        )
    ]


def remove(db: Database, folder: str, namespace: str | None) -> int:
    """Stop keeping ``folder`` current (in ``namespace``, or in all); how many roots went."""
    where = "path = ?" + (" AND namespace = ?" if namespace is not None else "")
    params = [folder, *([namespace] if namespace is not None else [])]
    with db.transaction():
        count = int(db.scalar(f"SELECT count(*) FROM roots WHERE {where}", params))
        db.execute(f"DELETE FROM roots WHERE {where}", params)
    return count
