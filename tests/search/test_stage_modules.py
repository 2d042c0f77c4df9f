"""Each search stage in its own module: both fusions fill the one fusion role and the pipeline
picks one by ``PipelineConfig.fusion``; the stages never reach back into the pipeline."""

from __future__ import annotations

import pytest

from nbmemory import Memory
from nbmemory.search.base import Fusion
from nbmemory.search.config import PipelineConfig
from nbmemory.search.convex import ConvexFusion
from nbmemory.search.pipeline import SearchPipeline
from nbmemory.search.rrf import RRFFusion


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
