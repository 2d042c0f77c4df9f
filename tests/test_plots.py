"""Chart functions return alt.Chart specs with the expected data and encodings."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import altair as alt
import numpy as np
import polars as pl
import pytest

from nbmemory import ConfigError, Memory, PipelineConfig
from nbmemory.jupyter.plots import (
    candidate_frame,
    contribution,
    contribution_frame,
    distance_relevance,
    rank_scatter,
    score_distributions,
)
from nbmemory.search.result import SearchResult
from nbmemory.search.trace import Stage, Trace


def hand_made_result() -> SearchResult:
    """A trace computed by hand: bm25 returns 1, 2, 3; vector returns 3, 4; RRF k=60 keeps 3, 1, 4."""
    trace = Trace("token rotation")
    trace.add(Stage("bm25", [1, 2, 3], {1: 9.0, 2: 7.5, 3: 2.0}))
    trace.add(Stage("vector", [3, 4], {3: 0.81, 4: 0.64}))
    fused = {3: 1 / 63 + 1 / 61, 1: 1 / 61, 4: 1 / 62}
    parts = {3: {"bm25": 1 / 63, "vector": 1 / 61}, 1: {"bm25": 1 / 61}, 4: {"vector": 1 / 62}}
    notes = {"k": 60, "weights": {"bm25": 1.0, "vector": 1.0}}
    trace.add(Stage("rrf", [3, 1, 4], fused, notes=notes, parts=parts))
    return SearchResult("token rotation", [], trace)


def spec(chart: alt.Chart) -> dict:
    data = chart.to_dict()
    values = next(iter(data["datasets"].values()))
    return {"spec": data, "values": values}


def test_candidate_frame_joins_both_retrievers() -> None:
    frame = candidate_frame(hand_made_result())
    rows = {r["id"]: r for r in frame.iter_rows(named=True)}
    assert set(rows) == {1, 2, 3, 4}
    assert (rows[3]["bm25_rank"], rows[3]["vector_rank"], rows[3]["fused_rank"]) == (3, 1, 1)
    assert (rows[2]["vector_rank"], rows[2]["in_top_k"], rows[2]["found_by"]) == (None, False, "bm25 only")
    assert rows[4]["found_by"] == "vector only" and rows[3]["found_by"] == "both"


def test_rank_scatter_encodings_and_missing_ranks_past_the_depth() -> None:
    chart = rank_scatter(hand_made_result())
    assert isinstance(chart, alt.Chart)
    out = spec(chart)
    enc = out["spec"]["encoding"]
    assert (enc["x"]["field"], enc["x"]["type"]) == ("bm25_rank", "quantitative")
    assert (enc["y"]["field"], enc["y"]["type"]) == ("vector_rank", "quantitative")
    assert enc["color"]["field"] == "found_by" and enc["shape"]["field"] == "in_top_k"
    by_id = {v["id"]: v for v in out["values"]}
    # Depth is 3, so an item a retriever missed is drawn at rank 4.
    assert by_id[4]["bm25_rank"] == 4 and by_id[2]["vector_rank"] == 4
    assert by_id[1]["in_top_k"] == "fused top-k" and by_id[2]["in_top_k"] == "not in top-k"


def test_score_distributions_bins_each_retriever_on_its_own_scale() -> None:
    chart = score_distributions(hand_made_result(), bins=2)
    assert isinstance(chart, alt.Chart)
    out = spec(chart)
    enc = out["spec"]["encoding"]
    assert (enc["x"]["field"], enc["x2"]["field"], enc["y"]["field"]) == (
        "bin_start",
        "bin_end",
        "candidates",
    )
    assert enc["color"]["field"] == "in_top_k" and enc["column"]["field"] == "retriever"
    assert out["spec"]["resolve"]["scale"]["x"] == "independent"
    bars = sorted(
        (v["retriever"], round(v["bin_start"], 3), round(v["bin_end"], 3), v["in_top_k"], v["candidates"])
        for v in out["values"]
    )
    # bm25 scores 2.0 (top-k), 7.5, 9.0 (top-k) in bins [2, 5.5) and [5.5, 9];
    # vector scores 0.64 and 0.81 (both top-k) in [0.64, 0.725) and [0.725, 0.81].
    assert bars == [
        ("bm25", 2.0, 5.5, True, 1),
        ("bm25", 5.5, 9.0, False, 1),
        ("bm25", 5.5, 9.0, True, 1),
        ("vector", 0.64, 0.725, True, 1),
        ("vector", 0.725, 0.81, True, 1),
    ]


def test_contribution_draws_the_parts_the_trace_records() -> None:
    chart = contribution(hand_made_result())
    assert isinstance(chart, alt.Chart)
    out = spec(chart)
    enc = out["spec"]["encoding"]
    assert (enc["x"]["field"], enc["x2"]["field"]) == ("start", "end")
    assert enc["y"]["field"] == "item" and enc["y"]["sort"] == ["1. #3", "2. #1", "3. #4"]
    assert enc["color"]["field"] == "part"
    terms = {(v["id"], v["part"]): v["contribution"] for v in out["values"]}
    assert terms == pytest.approx(
        {(3, "BM25"): 1 / 63, (3, "vector"): 1 / 61, (1, "BM25"): 1 / 61, (4, "vector"): 1 / 62}
    )
    # Laid end to end, each bar ends at the item's score.
    ends = {v["id"]: v["end"] for v in out["values"]}
    assert ends == pytest.approx({3: 1 / 63 + 1 / 61, 1: 1 / 61, 4: 1 / 62})


def test_contribution_reads_the_parts_not_the_weights() -> None:
    result = hand_made_result()
    result.trace.stage("rrf").notes["weights"] = {"bm25": 2.0, "vector": 0.5}  # type: ignore[union-attr]
    terms = {(v["id"], v["part"]): v["contribution"] for v in spec(contribution(result))["values"]}
    assert terms[(1, "BM25")] == pytest.approx(1 / 61) and terms[(4, "vector")] == pytest.approx(1 / 62)


def test_a_part_that_lowers_the_score_comes_last_and_the_bar_ends_at_the_score() -> None:
    result = hand_made_result()
    mmr = Stage("mmr", [1, 3], {1: 0.7, 3: 0.2})
    mmr.parts = {1: {"mmr relevance": 0.7, "mmr redundancy": 0.0}, 3: {"mmr redundancy": -0.3, "mmr relevance": 0.5}}
    result.trace.add(mmr)
    rows = contribution_frame(result).filter(pl.col("id") == 3).to_dicts()
    assert [r["part"] for r in rows] == ["MMR relevance", "MMR redundancy"]
    assert rows[-1]["end"] == pytest.approx(0.2) == rows[-1]["score"]
    # A part that added nothing is not drawn.
    assert contribution_frame(result).filter(pl.col("id") == 1)["part"].to_list() == ["MMR relevance"]


def test_contribution_without_parts_draws_the_score_whole() -> None:
    result = hand_made_result()
    result.trace.stage("rrf").parts = {}  # type: ignore[union-attr]
    frame = contribution_frame(result)
    assert frame["part"].unique().to_list() == ["score (not broken down)"]
    assert frame["end"].to_list() == pytest.approx([1 / 63 + 1 / 61, 1 / 61, 1 / 62])


def test_distance_relevance_bins_and_probabilities() -> None:
    frame = pl.DataFrame(
        {"distance": [0.05, 0.1, 0.15, 0.55, 0.6, 0.95, 1.0], "relevant": [1, 1, 0, 1, 0, 0, 0]}
    )
    chart = distance_relevance(frame, bins=2)
    assert isinstance(chart, alt.Chart)
    out = spec(chart)
    enc = out["spec"]["encoding"]
    assert (enc["x"]["field"], enc["y"]["field"]) == ("distance", "p_relevant")
    assert enc["y"]["scale"]["domain"] == [0, 1]
    curve = sorted((round(v["distance"], 4), round(v["p_relevant"], 4), v["n"]) for v in out["values"])
    # Bins [0.05, 0.525) and [0.525, 1.0]: 2 of 3 relevant, then 1 of 4.
    assert curve == [(0.2875, 0.6667, 3), (0.7625, 0.25, 4)]


def test_distance_relevance_needs_its_columns() -> None:
    with pytest.raises(ConfigError, match="missing: relevant"):
        distance_relevance(pl.DataFrame({"distance": [0.1]}))
    with pytest.raises(ConfigError, match="bins"):
        distance_relevance(pl.DataFrame({"distance": [0.1], "relevant": [True]}), bins=0)


def test_charts_from_a_real_search_render_offline(fake_mem: Memory) -> None:
    vl_convert = pytest.importorskip("vl_convert")
    fake_mem.remember_many([f"note {i} about vpn deploys and token {i % 7}" for i in range(60)])
    result = fake_mem.search("token rotation vpn", k=8)
    for make in (rank_scatter, score_distributions, contribution):
        chart = make(result)
        assert chart.to_dict()["title"]["subtitle"] == "query: token rotation vpn"
        assert vl_convert.vegalite_to_svg(chart.to_dict()).lstrip().startswith("<svg")
    rng = np.random.default_rng(0)
    distance = rng.uniform(0, 1, 200)
    judged = pl.DataFrame({"distance": distance, "relevant": rng.uniform(0, 1, 200) > distance})
    assert vl_convert.vegalite_to_svg(distance_relevance(judged).to_dict()).lstrip().startswith("<svg")


def test_single_retriever_result_still_plots(fake_mem: Memory) -> None:
    fake_mem.remember_many(["token rotation note", "vpn note"])
    result = fake_mem.search("token rotation", config=PipelineConfig(retrievers=("bm25",)))
    frame = candidate_frame(result)
    assert frame["vector_rank"].null_count() == frame.height
    assert rank_scatter(result).to_dict()["encoding"]["x"]["field"] == "bm25_rank"


def test_a_trace_without_retriever_stages_is_refused() -> None:
    with pytest.raises(ConfigError, match="no bm25 or vector stage"):
        rank_scatter(SearchResult("q", [], Trace("q")))


def test_contribution_labels_name_the_hit(fake_mem: Memory, tmp_path: Path) -> None:
    (tmp_path / "ops.md").write_text(
        "# Ops\n\n## Tokens\n\nRotate the token every quarter.\n", encoding="utf-8"
    )
    fake_mem.index(tmp_path / "ops.md")
    item = fake_mem.remember("token rotation reminder")
    result = fake_mem.search("token rotation", k=2)
    labels = contribution(result).to_dict()["encoding"]["y"]["sort"]
    assert [label.split(".")[0] for label in labels] == ["1", "2"]
    assert any(label.endswith(f"remembered #{item.id}") for label in labels)
    assert any("ops.md:" in label for label in labels)


# Where a page would fetch from: ES module imports, dynamic imports, script/link sources, fetch().
FETCHED = re.compile(
    r"""(?:\bfrom\s*|\bimport\s*\(?\s*|\bsrc\s*=\s*|\bhref\s*=\s*|\bfetch\(\s*)["'`]?(https?://[^"'`\s)]+)"""
)
CDNS = ("esm.sh", "jsdelivr", "unpkg", "cdnjs", "skypack")


def test_charts_render_as_an_offline_jupyter_chart(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[alt.JupyterChart] = []

    class Recorded(alt.JupyterChart):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    # The renderer looks JupyterChart up in altair at each display.
    monkeypatch.setattr(alt, "JupyterChart", Recorded)
    assert alt.renderers.active == "jupyter" and alt.renderers.options["offline"] is True
    for chart in (rank_scatter(hand_made_result()), contribution(hand_made_result())):
        bundle, _ = chart._repr_mimebundle_()
        view = bundle["application/vnd.jupyter.widget-view+json"]
        assert view["model_id"] == made[-1].model_id
        state = made[-1].get_state()
        assert isinstance(state, dict) and len(state["_esm"]) > 100_000, "vega is not bundled"
        # Everything the frontend gets: the bundle and the widget's state (its JavaScript included).
        shipped = json.dumps(bundle) + json.dumps(state, default=str)
        assert FETCHED.findall(shipped) == [] and not [c for c in CDNS if c in shipped]
        # Drawn with marks: the spec the widget hands vega-embed has a mark, an encoding and data.
        spec = state["spec"]
        assert spec["mark"]["type"] in {"point", "bar"} and spec["encoding"] and spec["datasets"]


def test_the_url_check_sees_a_cdn_import() -> None:
    # The check above must be able to fail: altair's own online JupyterChart imports from esm.sh.
    from altair.jupyter.jupyter_chart import load_js_src

    assert FETCHED.findall(load_js_src())[0].startswith("https://esm.sh/vega-embed")


def test_interactive_charts_zoom_and_select() -> None:
    params = rank_scatter(hand_made_result()).to_dict()["params"]
    assert {"bind": "scales"} in [{"bind": p.get("bind")} for p in params]
    assert any(p.get("bind") == "legend" for p in params)
    assert any(p.get("bind") == "legend" for p in contribution(hand_made_result()).to_dict()["params"])


def test_a_renderer_the_user_chose_is_left_alone() -> None:
    from nbmemory.jupyter.plots import use_offline_charts

    before = alt.renderers.active, dict(alt.renderers.options)
    alt.renderers.enable("svg")
    try:
        use_offline_charts()
        assert alt.renderers.active == "svg"
        # Static pictures for export stay available.
        assert (
            rank_scatter(hand_made_result())._repr_mimebundle_()["image/svg+xml"].lstrip().startswith("<svg")
        )
    finally:
        alt.renderers.enable(before[0], **before[1])


def test_contribution_labels_count_cells_from_one(fake_mem: Memory, tmp_path: Path) -> None:
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# Intro"),
        nbformat.v4.new_code_cell("rotate_token(every='30d')"),
    ]
    nbformat.write(nb, tmp_path / "ops.ipynb")
    fake_mem.index(tmp_path)
    items = spec(contribution(fake_mem.search("rotate_token every", k=2)))["values"]
    places = {v["item"].split(". ", 1)[1].rsplit(" #", 1)[0] for v in items}
    # The notebook with its folder, its cells counted from 1.
    assert f"{tmp_path.name}/ops.ipynb, cell 2" in places


def test_contribution_bars_end_at_the_scores_in_rank_order(fake_mem: Memory) -> None:
    fake_mem.remember_many([f"note {i} about vpn deploys and token {i % 7}" for i in range(40)])
    for config in (PipelineConfig(), PipelineConfig(recency=True), PipelineConfig(fusion="rrf")):
        result = fake_mem.search("token rotation vpn", k=8, config=config)
        frame = contribution_frame(result)
        ends = frame.group_by("rank", maintain_order=True).agg(pl.col("end").last(), pl.col("id").first())
        assert ends["id"].to_list() == result.ids
        assert ends["end"].to_list() == pytest.approx([h.score for h in result.hits], abs=1e-9)
        assert ends["end"].to_list() == sorted(ends["end"].to_list(), reverse=True)


def test_a_part_keeps_its_colour_from_chart_to_chart() -> None:
    def colours(result: SearchResult) -> dict[str, str]:
        scale = contribution(result).to_dict()["encoding"]["color"]["scale"]
        return dict(zip(scale["domain"], scale["range"], strict=True))

    plain = hand_made_result()
    leaning = hand_made_result()
    leaning.trace.stage("rrf").parts[3] = {"bm25": 0.01, "identifier": 0.005, "vector": 1 / 61}  # type: ignore[union-attr]
    assert colours(plain)["BM25"] == colours(leaning)["BM25"] != colours(leaning)["identifier lean (to BM25)"]
    assert set(colours(leaning)) == {"BM25", "identifier lean (to BM25)", "vector"}
