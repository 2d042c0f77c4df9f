"""The retriever role, the trace's steps and hydration, each on its own."""

from __future__ import annotations

import pytest

from nbmemory.embed import FakeEmbedder, SentenceTransformerEmbedder
from nbmemory.memory import Memory
from nbmemory.search.base import Query, Retriever
from nbmemory.search.bm25 import BM25Retriever
from nbmemory.search.filters import Filters
from nbmemory.search.result import hydrate
from nbmemory.search.trace import Trace
from nbmemory.search.vector import VectorRetriever

NOTES = [
    "INC-4821: billing-api returned 502 after the deploy; the load balancer kept old targets.",
    "Rotate the API token for the payments service every 90 days with vault.",
    "For quick notebook analysis I prefer polars over pandas because lazy queries are faster.",
    "The staging database of auth-gateway is on db-stg-12.internal.",
    "To restart the ingest worker, run systemctl restart ingest-worker on the host.",
]


# -- Trace.step ----------------------------------------------------------------------------------
def test_a_step_records_its_name_output_and_time_in_order() -> None:
    trace = Trace("q")
    with trace.step("first") as stage:
        stage.output = [3, 1]
        stage.notes["n"] = 2
    with trace.step("second", compare=True) as later:
        later.output = [1, 3]
    assert [s.name for s in trace.stages] == ["first", "second"]
    assert trace.stages[0] is stage and stage.output == [3, 1] and stage.notes == {"n": 2}
    assert stage.ms >= 0.0 and later.ms >= 0.0
    assert stage.compare_to is None and later.compare_to == "first"
    assert "(was 2)" in trace.explain()


def test_a_failing_step_is_recorded_with_the_error_and_the_error_propagates() -> None:
    trace = Trace("q")
    with pytest.raises(ValueError, match="bad input"), trace.step("broken"):
        raise ValueError("bad input")
    stage = trace.stage("broken")
    assert stage is not None and stage.ms >= 0.0
    assert stage.notes["error"] == "ValueError: bad input"


def test_a_discarded_step_leaves_no_stage() -> None:
    trace = Trace("q")
    with trace.step("kept"):
        pass
    with trace.step("kept") as twin:
        trace.discard(twin)
    assert len(trace.stages) == 1 and trace.stages[0] is not twin


# -- the retrievers ------------------------------------------------------------------------------
@pytest.mark.parametrize("query", ["INC-4821", "rotate the payments token", "which dataframe library"])
def test_both_retrievers_fill_the_role_and_give_the_pipelines_rankings(
    mem: Memory, real_embedder: SentenceTransformerEmbedder, query: str
) -> None:
    mem.remember_many(NOTES)
    mem.remember("Rotate the ops token monthly.", namespace="ops")
    bm25, vector = BM25Retriever(mem.db), VectorRetriever(mem.db, real_embedder)
    assert isinstance(bm25, Retriever) and isinstance(vector, Retriever)
    for filters, kwargs in ((Filters(), {}), (Filters(namespace="ops"), {"namespace": "ops"})):
        trace = mem.search(query, k=5, log=False, **kwargs).trace  # depth max(50, 3 * 5)
        lexical = bm25.retrieve(Query(query), 50, filters)
        semantic = vector.retrieve(Query(query, real_embedder), 50, filters)
        bm25_stage, vector_stage = trace.stage("bm25"), trace.stage("vector")
        assert bm25_stage is not None and vector_stage is not None
        assert lexical.ids == bm25_stage.output and lexical.terms == bm25_stage.notes["terms"]
        assert semantic.ids == vector_stage.output and semantic.ids
        assert semantic.notes["method"] == vector_stage.notes["method"]
        assert semantic.scores == pytest.approx(vector_stage.scores)


def test_a_query_without_an_embedder_has_no_vector() -> None:
    query = Query("plain words")
    assert not query.embedded
    with pytest.raises(ValueError, match="no embedding"):
        query.vector()
    embedded = Query("plain words", FakeEmbedder(dim=8))
    assert embedded.embedded and embedded.vector().shape == (8,)


# -- hydration -----------------------------------------------------------------------------------
def test_hydrate_keeps_the_given_order_reads_columns_by_name_and_skips_deleted_items(fake_mem: Memory) -> None:
    a = fake_mem.remember("alpha note", tags=["x"], importance=0.9, heading="Alpha", source="a.md")
    b = fake_mem.remember("beta note")
    gone = fake_mem.remember("gamma note")
    fake_mem.forget(gone.id)
    hits = hydrate(
        fake_mem.db,
        [(b.id, 0.5), (gone.id, 0.4), (a.id, 0.3)], "alpha", {"bm25": {a.id: 1}}, {"bm25": {a.id: 2.5}}
    )
    assert [h.id for h in hits] == [b.id, a.id]
    alpha = hits[1]
    assert (alpha.text, alpha.heading, alpha.source, alpha.tags) == ("alpha note", "Alpha", "a.md", ["x"])
    assert alpha.importance == 0.9 and alpha.score == 0.3 and alpha.updated_at is not None
    assert alpha.ranks == {"bm25": 1} and alpha.retriever_scores == {"bm25": 2.5} and hits[0].ranks == {}
