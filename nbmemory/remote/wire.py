"""JSON on the wire between a client and the owner: results to plain data and back.

No pickle: a message is JSON, and only the facade's methods can be called.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from nbmemory import errors
from nbmemory.api import API_METHODS
from nbmemory.ingest.indexer import IndexReport
from nbmemory.items import Hit, Item
from nbmemory.search.pipeline import SearchResult
from nbmemory.search.trace import Stage, Trace

# Methods a client may call on the owner's Memory: the declared operations, and ping.
METHODS = frozenset({*API_METHODS, "ping"})
_DATES = ("created_at", "updated_at", "deleted_at")


def _default(value: Any) -> Any:
    # The one JSON encoder of the front ends, tagging what _hook rebuilds on the other side.
    from nbmemory.frontend import to_jsonable

    return to_jsonable(value, tagged=True)


def _hook(obj: dict[str, Any]) -> Any:
    if "__dt__" in obj:
        return datetime.fromisoformat(obj["__dt__"])
    kind = obj.pop("__type__", None)
    if kind is None:
        return obj
    if kind == "Hit":
        obj["ranks"] = {k: int(v) for k, v in obj["ranks"].items()}
        return Hit(**obj)
    if kind == "Item":
        return Item(**obj)
    if kind == "Stage":
        obj["scores"] = {int(k): v for k, v in obj["scores"].items()}
        obj["detail"] = {int(k): v for k, v in obj["detail"].items()}
        obj["dropped"] = {int(k): v for k, v in obj.get("dropped", {}).items()}
        return Stage(**obj)
    if kind == "Trace":
        return Trace(**obj)
    if kind == "SearchResult":
        return SearchResult(**obj)
    if kind == "PipelineConfig":
        from nbmemory.search.pipeline import PipelineConfig

        obj["retrievers"] = tuple(obj["retrievers"])
        return PipelineConfig(**obj)
    if kind == "IndexReport":
        obj["skipped"] = [tuple(x) for x in obj["skipped"]]
        return IndexReport(**obj)
    if kind == "ModelVersion":
        from nbmemory.tune.versions import ModelVersion

        return ModelVersion(**obj)
    if kind in ("Check", "DoctorReport"):
        from nbmemory.store import doctor

        return getattr(doctor, kind)(**obj)
    return obj


def dumps(message: Any) -> bytes:
    # surrogatepass: a lone surrogate (bytes of argv that are not UTF-8) must reach the owner,
    # whose Memory rejects it with a clear ConfigError, instead of failing to encode here.
    return json.dumps(message, default=_default, ensure_ascii=False).encode("utf-8", "surrogatepass")


def loads(data: bytes) -> Any:
    return json.loads(data.decode("utf-8", "surrogatepass"), object_hook=_hook)


def error_payload(exc: BaseException) -> dict[str, str]:
    return {"type": type(exc).__name__, "message": str(exc)}


def raise_error(payload: dict[str, str]) -> None:
    """Re-raise the owner's error in the client as the same nbmemory error class."""
    cls = getattr(errors, payload.get("type", ""), None)
    if isinstance(cls, type) and issubclass(cls, errors.NbMemoryError) and cls is not errors.BadFileError:
        raise cls(payload["message"])
    raise errors.NbMemoryError(f"{payload.get('type')}: {payload.get('message')}")
