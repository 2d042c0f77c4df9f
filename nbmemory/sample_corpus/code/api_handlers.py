"""HTTP handlers for the internal search API (FastAPI).

Endpoints:
    GET  /healthz          liveness
    GET  /readyz           readiness; fails if the index is older than 36 h (design review 2026-03-03)
    GET  /search           hybrid search, BM25 + dense fused with RRF
    POST /feedback         click / add-to-cart feedback for eval sets
"""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime, timedelta
from typing import Annotated, Literal

from fastapi import APIRouter, Depends, FastAPI, HTTPException, Query, Request, Response
from pydantic import BaseModel, Field
from rate_limiter import KeyedRateLimiter
from text_normalise import extract_skus

MAX_INDEX_AGE = timedelta(hours=36)
limiter = KeyedRateLimiter(rate=20, capacity=40)
router = APIRouter()


class Hit(BaseModel):
    doc_id: str
    title: str
    score: float
    matched_by: list[Literal["bm25", "dense"]] = Field(
        description="which retrievers returned this doc in their top-k (debug only)"
    )


class SearchResponse(BaseModel):
    query: str
    took_ms: float
    hits: list[Hit]


class Feedback(BaseModel):
    query: str
    doc_id: str
    event: Literal["click", "add_to_cart"]
    session_id: str


def rrf_fuse(rankings: dict[str, list[str]], k: int = 60, top: int = 50) -> list[tuple[str, float, list[str]]]:
    """Reciprocal rank fusion.

    Args:
        rankings: retriever name → ranked doc ids (best first).
        k: RRF constant (Cormack et al. 2009 default 60).
        top: how many fused results to keep.

    Returns:
        ``(doc_id, fused_score, [retrievers that found it])`` sorted by score.
    """
    scores: dict[str, float] = {}
    found: dict[str, list[str]] = {}
    for name, ranked in rankings.items():
        for rank, doc_id in enumerate(ranked, start=1):
            scores[doc_id] = scores.get(doc_id, 0.0) + 1.0 / (k + rank)
            found.setdefault(doc_id, []).append(name)
    ordered = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[:top]
    return [(doc_id, score, found[doc_id]) for doc_id, score in ordered]


def get_index(request: Request):
    """Dependency: the currently loaded search index (swapped atomically on rebuild)."""
    return request.app.state.index


def client_key(request: Request) -> str:
    token = request.headers.get("x-client-id") or (request.client.host if request.client else "anon")
    return hashlib.sha256(token.encode()).hexdigest()[:16]


@router.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz")
def readyz(index=Depends(get_index)) -> dict[str, str]:
    age = datetime.now(UTC) - index.built_at
    if age > MAX_INDEX_AGE:
        raise HTTPException(status_code=503, detail=f"index is {age} old (max {MAX_INDEX_AGE})")
    return {"status": "ready", "index_built_at": index.built_at.isoformat()}


@router.get("/search", response_model=SearchResponse)
def search(
    response: Response,
    q: Annotated[str, Query(min_length=1, max_length=200)],
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
    key: str = Depends(client_key),
    index=Depends(get_index),
) -> SearchResponse:
    """Hybrid search. SKU-looking queries short-circuit to an exact lookup."""
    if not limiter.allow(key):
        response.headers["Retry-After"] = f"{limiter.retry_after(key):.0f}"
        raise HTTPException(status_code=429, detail="rate limited")

    t0 = time.perf_counter()
    skus = extract_skus(q)
    if skus and index.has_sku(skus[0]):
        fused = [(f"sku-{skus[0]}", 1.0, ["bm25"])]
    else:
        fused = rrf_fuse({"bm25": index.bm25(q, 100), "dense": index.dense(q, 100)})[:limit]
    hits = [Hit(doc_id=d, title=index.title(d), score=round(s, 5), matched_by=m) for d, s, m in fused]
    return SearchResponse(query=q, took_ms=round((time.perf_counter() - t0) * 1000, 2), hits=hits)


@router.post("/feedback", status_code=202)
def feedback(fb: Feedback, request: Request) -> dict[str, str]:
    request.app.state.feedback_queue.put_nowait(fb.model_dump())
    return {"status": "queued"}


def create_app(index) -> FastAPI:
    """App factory; ``index`` is anything with ``bm25``, ``dense``, ``title``, ``has_sku``, ``built_at``."""
    app = FastAPI(title="fh-search", version="1.0.0")
    app.state.index = index
    app.include_router(router)
    return app
