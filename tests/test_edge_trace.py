"""Attribution rules on the real `edge` export (tests/data/tools/edge_program.py)."""

from __future__ import annotations

import pytest

from analysis.documents.types import to_dict
from tests.shared_docs import analyzed


@pytest.fixture(scope="session")
def edge() -> dict:
    return {e["name"]: e for e in to_dict(analyzed("edge/trace"))["ranges"]}


@pytest.fixture(scope="session")
def edge_doc() -> dict:
    return to_dict(analyzed("edge/graphs_default"))


def test_nested_paths_and_counts_in_every_enclosing_range(edge: dict) -> None:
    assert edge["edge/outer/inner"]["kernel_count"] == 2      # sin, add
    assert edge["edge/outer"]["kernel_count"] == 4            # mul + inner's 2 + cos
    assert edge["edge"]["kernel_count"] > edge["edge/outer"]["kernel_count"]


def test_repeated_range_counts_instances(edge: dict) -> None:
    """Three instances: the first, slow and loading modules, is set apart as a first call
    (its own entry); the two steady ones stay."""
    parts = [edge["edge/repeat"], edge["edge/repeat [warm-up]"]]
    assert [p["instances"] for p in parts] == [2, 1]
    assert sum(p["kernel_count"] for p in parts) == 3


def test_other_thread_kernels_stay_in_that_threads_range(edge: dict) -> None:
    assert edge["worker"]["kernel_count"] == 2                # sigmoid, abs on the worker
    assert edge["edge/wait"]["kernel_count"] == 1             # only the main thread's neg


def test_start_end_range_is_reported(edge: dict) -> None:
    assert edge["startend"]["kernel_count"] == 2


def test_copies_and_sets_count_in_span_not_in_kernels(edge: dict) -> None:
    copies = edge["edge/copies"]
    assert copies["kernel_count"] == 1                        # randn's fill runs on the CPU
    assert copies["gpu_span_ns"] > copies["kernel_time_ns"]


def test_graph_replays_traced_per_node(edge: dict) -> None:
    assert edge["edge/graph"]["kernel_count"] == 4            # 2 replays x (sin, cos)


def test_default_domain_has_no_domain(edge: dict) -> None:
    assert edge["default_domain"]["domain"] is None
    assert edge["edge"]["domain"] == "profkit"


def test_untraced_graph_replays_are_said(edge_doc: dict) -> None:
    graph = next(e for e in edge_doc["ranges"] if e["name"] == "edge/graph")
    assert graph["kernel_count"] == 0 and graph["wall_instances"] > 0
    assert any("cuda-graph-trace=node" in n and "edge/graph" in n for n in edge_doc["notes"])


def test_kernels_outside_ranges_are_said(edge_doc: dict) -> None:
    assert any("outside every NVTX range" in n for n in edge_doc["notes"])
