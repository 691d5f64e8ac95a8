"""The notebook API gives the same numbers as the command line's documents."""

from __future__ import annotations

from analysis import api
from tests.conftest import DATA, systems_json


def test_frames_match_the_document() -> None:
    cap = DATA / "matmul_relu"
    doc = api.systems_report(cap / "trace.sqlite", meta=cap / "meta.json",
                             torch_logs_path=cap / "torch_logs.txt")
    ranges, kernels = api.ranges_frame(doc), api.kernels_frame(doc)
    want = systems_json(cap / "trace.sqlite")
    assert ranges["kernel_count"].tolist() == [e["kernel_count"] for e in want["ranges"]]
    per_range = kernels.groupby("range")["count"].sum()
    assert all(per_range[e["name"]] == e["kernel_count"] for e in want["ranges"])
    assert "fusion_failure" in api.findings_frame(doc)["rule"].tolist()
    trace = api.open_trace(cap / "trace.sqlite")
    per_key = trace.kernels.groupby("key")["count"].sum()
    assert sorted(per_key.tolist()) == sorted(e["kernel_count"] for e in want["ranges"]
                                              if e["kernel_count"])


def test_compute_frames() -> None:
    doc = api.compute_report(DATA / "ncu" / "gelu_raw.csv", DATA / "ncu" / "gelu_meta.json")
    launches = api.launches_frame(doc)
    assert len(launches) == len(doc.kernels) and "dram_read_bytes" in launches
    assert set(api.findings_frame(doc).columns) >= {"rule", "severity", "range"}
