"""Model versions of one memory: kept next to the file, recorded in the ``model_versions`` table.

A tuned model lives in ``<folder of the memory file>/models/<file stem>/<version>/`` (``v1``,
``v2``, ...). The table records every version with its gate scores and a status:

``base``
    The model the memory used before its first tuning (a name such as ``all-MiniLM-L6-v2``).
``adopted``
    A tuned model that passed the gate (its folder is kept).
``refused``
    A tuned model the gate refused: its row and scores are kept, its weights are deleted.

Exactly one row is ``active``: the model the memory opens with (see
:meth:`nbmemory.Memory.use_model`). The active row only applies while the memory is opened with
the model it was tuned from (the configured ``model``); opening it with another model re-embeds
with that one, as before.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from nbmemory.config import models_dir as models_dir  # where tuned models live, for tune and live
from nbmemory.errors import ConfigError, NotFoundError
from nbmemory.store import tuning_rows
from nbmemory.store.db import Database, utcnow

STATUSES = ("base", "adopted", "refused")


@dataclass
class ModelVersion:
    """One row of ``model_versions``.

    ``model`` is what the embedder loads (a name or a folder); ``base_model`` the configured model
    it descends from; ``in_use`` whether the store's vectors are this model's right now.
    """

    version: str
    model: str
    base_model: str | None
    fingerprint: str | None
    status: str
    active: bool
    created_at: datetime | None
    scores: dict[str, Any] = field(default_factory=dict)
    note: str | None = None
    in_use: bool = False

    @property
    def path(self) -> Path | None:
        """The model folder, for a tuned version."""
        return Path(self.model) if self.status != "base" else None


def _row(db: Database, r: tuple[Any, ...]) -> ModelVersion:
    scores = json.loads(r[7]) if r[7] else {}
    in_use = r[3] is not None and r[3] == db.get_meta("model_fingerprint")
    return ModelVersion(r[0], r[1], r[2], r[3], r[4], bool(r[5]), r[6], scores, r[8], in_use)


def list_versions(db: Database) -> list[ModelVersion]:
    """Every version, oldest first."""
    if not db.table_exists("model_versions"):
        return []
    return [_row(db, r) for r in tuning_rows.version_rows(db)]


def get(db: Database, version: str) -> ModelVersion:
    """One version by name; :class:`NotFoundError` names the ones that exist."""
    found = [v for v in list_versions(db) if v.version == version]
    if not found:
        names = ", ".join(v.version for v in list_versions(db)) or "none yet: run `nbmemory tune`"
        raise NotFoundError(f"no model version {version!r}; versions: {names}")
    return found[0]


def active(db: Database) -> ModelVersion | None:
    """The version the memory opens with, if one was chosen."""
    return next((v for v in list_versions(db) if v.active), None)


def next_version(db: Database) -> str:
    """``v1``, ``v2``, ...: one past the highest tuned version recorded."""
    numbers = [int(v.version[1:]) for v in list_versions(db) if v.version[1:].isdigit()]
    return f"v{max(numbers, default=0) + 1}"


def record(
    db: Database,
    version: str,
    model: str,
    *,
    status: str,
    base_model: str | None = None,
    fingerprint: str | None = None,
    scores: dict[str, Any] | None = None,
    note: str | None = None,
) -> None:
    """Insert or update a version row (inside the caller's transaction, if any)."""
    if status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}, got {status!r}")
    tuning_rows.upsert_version(
        db, [version, model, base_model, fingerprint, status, utcnow(), json.dumps(scores or {}), note]
    )


def ensure_base(db: Database, model: str, fingerprint: str) -> None:
    """Record the model in use as the ``base`` version (once), active unless another is."""
    if any(v.status == "base" for v in list_versions(db)):
        return
    record(db, "base", model, status="base", base_model=model, fingerprint=fingerprint)
    if active(db) is None:
        set_active(db, "base")


def set_active(db: Database, version: str) -> None:
    """Make ``version`` the one the memory opens with (inside the caller's transaction)."""
    tuning_rows.set_active_version(db, version)


def discard_weights(path: Path) -> None:
    """Delete a refused model's folder (its row and scores stay)."""
    shutil.rmtree(path, ignore_errors=True)


def with_base(db: Database) -> list[ModelVersion]:
    """Every version; before the first tuning, the model whose vectors the store holds is
    recorded as the ``base`` version first."""
    stored = db.get_meta("model_fingerprint")
    name = db.get_meta("model_name")
    if stored is not None and name is not None and not list_versions(db):
        with db.transaction():
            ensure_base(db, name, stored)
    return list_versions(db)


def usable(db: Database, version: str) -> ModelVersion:
    """A version that can be switched to; a refused one (its weights deleted) raises."""
    with_base(db)
    chosen = get(db, version)
    if chosen.status == "refused":
        raise ConfigError(
            f"model version {version} was refused by the gate ({chosen.note}) and its weights "
            "were deleted: pick another with `nbmemory models`"
        )
    return chosen
