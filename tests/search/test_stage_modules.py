"""Each search stage in its own module: both fusions fill the one fusion role and the pipeline
picks one by ``PipelineConfig.fusion``; the stages never reach back into the pipeline."""

from __future__ import annotations

import pytest

from nbmemory import Memory
from nbmemory.search.base import Fusion, Retrieved
from nbmemory.search.config import PipelineConfig
from nbmemory.search.convex import ConvexFusion
from nbmemory.search.noanswer import NoAnswer
from nbmemory.search.pipeline import SearchPipeline
from nbmemory.search.rrf import RRFFusion
from nbmemory.search.trace import Trace
from tests import import_graph


@pytest.mark.parametrize(
    ("config", "kind"),
    [
        (PipelineConfig(), ConvexFusion),
        (PipelineConfig(fusion="rrf"), RRFFusion),
        # Convex fusion weighs a cosine against a keyword share: one retriever alone is ranked by RRF.
        (PipelineConfig(retrievers=("bm25",)), RRFFusion),
        (PipelineConfig(retrievers=("vector",)), RRFFusion),
    ],
)
def test_the_pipeline_picks_one_fusion_and_its_stage_bears_its_name(
    fake_mem: Memory, config: PipelineConfig, kind: type
) -> None:
    fake_mem.remember("the staging database is db-stg-12")
    fake_mem.remember("kafka lag pages the on-call engineer")
    pipeline = SearchPipeline(fake_mem.db, fake_mem.embedder, config)
    assert isinstance(pipeline.fusion, kind) and isinstance(pipeline.fusion, Fusion)
    result = fake_mem.search("staging database", k=2, config=config)
    assert [s.name for s in result.trace.stages if s.name in ("convex", "rrf")] == [pipeline.fusion.name]


def test_the_no_answer_stage_needs_lexical_evidence_and_the_vector_side(fake_mem: Memory) -> None:
    item = fake_mem.remember("the staging database is db-stg-12")
    stage = NoAnswer(fake_mem.db, fake_mem.embedder)
    trace = Trace("staging")
    # Without BM25 there is no lexical evidence: no flag, and no stage to show.
    assert stage("staging", [(item.id, 1.0)], {"vector": Retrieved([(item.id, 0.9)])}, None, trace) == (
        False,
        "",
    )
    assert trace.stages == []
    result = fake_mem.search("staging database", k=1)
    reject = result.trace.stage("reject")
    # The fake model has no thresholds: the stage says so and flags nothing.
    assert reject is not None and reject.notes == {
        "rejected": False,
        "why": "no thresholds derived for this model",
    }
    assert not result.rejected


def test_the_pipelines_public_names_stay_importable_from_it() -> None:
    from nbmemory.search import pipeline, tiers

    for name in pipeline.__all__:
        assert getattr(pipeline, name) is not None, name
    # The weak-tail levels live with the rule that reads them.
    assert (pipeline.WEAK_LEXICAL, pipeline.WEAK_SHARE) == (tiers.WEAK_LEXICAL, tiers.WEAK_SHARE)


def test_the_search_stages_never_import_the_pipeline() -> None:
    # pipeline.py lists the stages; each lives in its own module and stands without it.
    edges = import_graph.graph()
    assert "nbmemory.search.pipeline" in edges["nbmemory.memory"]
    stages = {m for m in edges if m.startswith("nbmemory.search.") and m != "nbmemory.search.pipeline"}
    assert {"nbmemory.search.noanswer", "nbmemory.search.tiers", "nbmemory.search.group"} <= stages
    assert sorted(m for m in stages if "nbmemory.search.pipeline" in edges[m]) == []


def test_mmr_over_no_candidates_finds_nothing(fake_mem: Memory) -> None:
    fake_mem.remember("the staging database is db-stg-12")
    # A filter that matches nothing leaves MMR no candidates (it raised ValueError on an empty array).
    result = fake_mem.search("staging database", k=3, path="nomatch/*", config=PipelineConfig(mmr=True))
    assert result.hits == []
    stage = result.trace.stage("mmr")
    assert stage is not None and stage.output == []
