"""JSON on the wire between a client and the owner: results to plain data and back.

No pickle: a message is JSON, and only the facade's methods can be called. The classes a message
names are imported when one arrives: a command-line client of a warm owner must not pay for
DuckDB and numpy (which ``nbmemory.search.pipeline`` and ``nbmemory.ingest.indexer`` import).
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Collection
from datetime import datetime
from types import SimpleNamespace
from typing import Any

from nbmemory import errors
from nbmemory.api import API_METHODS

# Methods a client may call on the owner's Memory: the declared operations, and ping.
METHODS = frozenset({*API_METHODS, "ping"})
_DATES = ("created_at", "updated_at", "deleted_at")

# The module defining each class a message can carry.
_MODULES = {
    "Hit": "nbmemory.items",
    "Item": "nbmemory.items",
    "Stage": "nbmemory.search.trace",
    "Trace": "nbmemory.search.trace",
    "SearchResult": "nbmemory.search.result",
    "PipelineConfig": "nbmemory.search.config",
    "IndexReport": "nbmemory.ingest.indexer",
    "ModelVersion": "nbmemory.tune.versions",
    "Check": "nbmemory.store.doctor",
    "DoctorReport": "nbmemory.store.doctor",
}


def _default(value: Any) -> Any:
    # The one JSON encoder of the front ends, tagging what _hook rebuilds on the other side.
    from nbmemory.options import to_jsonable

    return to_jsonable(value, tagged=True)


def _hook(obj: dict[str, Any], plain: Collection[str] = ()) -> Any:
    if "__dt__" in obj:
        return datetime.fromisoformat(obj["__dt__"])
    kind = obj.pop("__type__", None)
    if kind is None:
        return obj
    # JSON keys are strings: give back the ints and tuples the classes hold.
    if kind == "Hit":
        obj["ranks"] = {k: int(v) for k, v in obj["ranks"].items()}
    elif kind == "Stage":
        obj["scores"] = {int(k): v for k, v in obj["scores"].items()}
        obj["detail"] = {int(k): v for k, v in obj["detail"].items()}
        obj["dropped"] = {int(k): v for k, v in obj.get("dropped", {}).items()}
        obj["parts"] = {int(k): v for k, v in obj.get("parts", {}).items()}
    elif kind == "Trace":
        obj["labels"] = {int(k): v for k, v in obj.get("labels", {}).items()}
    elif kind == "PipelineConfig":
        obj["retrievers"] = tuple(obj["retrievers"])
    elif kind == "IndexReport":
        obj["skipped"] = [tuple(x) for x in obj["skipped"]]
    if kind in plain:
        return SimpleNamespace(**obj)
    module = _MODULES.get(kind)
    if module is None:
        return obj
    return getattr(importlib.import_module(module), kind)(**obj)


def dumps(message: Any) -> bytes:
    # surrogatepass: a lone surrogate (bytes of argv that are not UTF-8) must reach the owner,
    # whose Memory rejects it with a clear ConfigError, instead of failing to encode here.
    return json.dumps(message, default=_default, ensure_ascii=False).encode("utf-8", "surrogatepass")


def loads(data: bytes, plain: Collection[str] = ()) -> Any:
    """Decode a message, rebuilding the classes it names.

    Parameters
    ----------
    plain:
        Class names to give back as a :class:`types.SimpleNamespace` of their fields instead,
        without importing their module (the command line prints a ``SearchResult`` this way).
    """
    text = data.decode("utf-8", "surrogatepass")
    if not plain:
        return json.loads(text, object_hook=_hook)
    return json.loads(text, object_hook=lambda obj: _hook(obj, plain))


def error_payload(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


def raise_error(payload: dict[str, str]) -> None:
    """Re-raise the owner's error in the client as the same nbmemory error class."""
    cls = getattr(errors, payload.get("type", ""), None)
    if isinstance(cls, type) and issubclass(cls, errors.NbMemoryError) and cls is not errors.BadFileError:
        raise cls(payload["message"])
    raise errors.NbMemoryError(f"{payload.get('type')}: {payload.get('message')}")
