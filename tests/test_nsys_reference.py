"""systems/2 numbers equal NVIDIA's own `nsys stats` on every committed real export."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.commands.nsys_stats import (
    kern_sum,
    kern_summary,
    mem_sums,
    nvtx_sum,
    ours_kern,
    ours_kern_summary,
    ours_mem,
    ours_proj,
    ours_wall,
    proj_sum,
)
from tests.conftest import DATA
from tests.shared_docs import analyzed

EXPORTS = ["gelu/trace", "matmul_relu/trace", "edge/trace", "edge/graphs_default",
           "graph_break/trace", "launch_bound/trace", "add_relu/trace",
           "softmax/trace", "row_sum/trace", "layernorm/trace", "attention/trace",
           "reference/gelu_first/trace", "reference/matmul_relu_first/trace",
           "emit_nvtx_200/trace", "emit_shapes/trace", "train_step_user/trace",
           "serve_recompiles/trace",
           "train_step/trace", "autotune/trace", "ddp_single/trace", "ddp_straggler/rank0", "ddp_straggler/rank1", "ddp_balanced/rank0",
           "ddp_balanced/rank1", "steps/emit_markers/trace", "steps/emit_nccl/trace",
           "steps/emit_nccl_fast/trace"] + [
               f"battery/{p}_{twin}/trace" for p in (
                   "input_starved", "pageable_copy", "item_sync", "launch_bound",
                   "dynamic_shapes", "fp32_gemm", "compile_warmup") for twin in (
                   "planted", "fixed")] + ["battery/dynamic_shapes_sampled/trace"] + sorted(
                   f"twins/{p.parent.name}/trace" for p in (DATA / "twins").glob(
                       "*/trace.sqlite.xz"))
VERSIONS = ["2023.4", "2025.3"]


@pytest.fixture(scope="session", params=EXPORTS)
def export_doc(request: pytest.FixtureRequest) -> tuple[str, dict]:
    return request.param, analyzed(request.param)


def _stats(export: str, version: str, report: str):
    """NVIDIA's CSV for this export and nsys version; skip where that version never ran."""
    scenario, name = export.rsplit("/", 1)
    path = DATA / scenario / "nsys_stats" / f"{name}_{version}_{report}.csv"
    if not path.exists() and path.with_suffix(".csv.xz").exists():
        path = path.with_suffix(".csv.xz")          # big references are kept compressed
    if not path.exists() and version != "2023.4":
        pytest.skip(f"no nsys {version} output recorded for {export}")
    return path


@pytest.mark.parametrize("version", VERSIONS)
def test_kernels_per_range_equal_nvtx_kern_sum(export_doc, version: str) -> None:
    export, doc = export_doc
    ref = kern_sum(_stats(export, version, "nvtx_kern_sum_base"))
    assert len(ref) > 0
    pd.testing.assert_frame_equal(ours_kern(doc), ref, check_dtype=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_gpu_span_equals_nvtx_gpu_proj_sum(export_doc, version: str) -> None:
    export, doc = export_doc
    ref = proj_sum(_stats(export, version, "nvtx_gpu_proj_sum"))
    pd.testing.assert_frame_equal(ours_proj(doc), ref, check_dtype=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_wall_time_per_range_equals_nvtx_sum(export_doc, version: str) -> None:
    export, doc = export_doc
    ref = nvtx_sum(_stats(export, version, "nvtx_sum"))
    pd.testing.assert_frame_equal(ours_wall(doc), ref, check_dtype=False)


@pytest.mark.parametrize("version", VERSIONS)
def test_copies_equal_cuda_gpu_mem_time_and_size_sums(export_doc, version: str) -> None:
    export, doc = export_doc
    time_csv = _stats(export, version, "cuda_gpu_mem_time_sum")
    ref = mem_sums(time_csv, _stats(export, version, "cuda_gpu_mem_size_sum"))
    pd.testing.assert_frame_equal(ours_mem(doc), ref, check_dtype=False, check_names=False)


def test_kernel_count_and_time_are_sums_of_kernel_rows(export_doc) -> None:
    _, doc = export_doc
    for e in doc.ranges:
        assert e.kernel_count == sum(k.count for k in e.kernels)
        assert e.kernel_time_ns == sum(k.total_ns for k in e.kernels)
        assert 0 <= e.gpu_idle_ns <= e.gpu_span_ns


def test_mismatches_reports_a_changed_number() -> None:
    """The bench's check: every number of the six reports, and a changed one is named."""
    from analysis.commands.nsys_stats import REPORTS, mismatches
    doc = analyzed("gelu/trace")
    base = DATA / "gelu" / "nsys_stats" / "trace_2023.4"
    assert mismatches(doc, base) == []
    doc.ranges[1].kernels[0].count += 1
    doc.ranges[1].gpu_span_ns -= 5
    doc.ranges[0].wall_ns += 1
    doc.kernel_summary[0].max_ns += 1
    doc.copies[0].count += 1
    found = mismatches(doc, base)
    assert len(found) == 5
    assert {f.split()[0] for f in found} == set(REPORTS) - {"cuda_gpu_mem_size_sum"}
    assert len(mismatches(doc, base, REPORTS[:2])) == 2


@pytest.mark.parametrize("version", VERSIONS)
def test_kernel_summary_equals_cuda_gpu_kern_sum(export_doc, version: str) -> None:
    """The whole-trace kernel table equals `nsys stats --report cuda_gpu_kern_sum:base`."""
    export, doc = export_doc
    ref = pd.read_csv(_stats(export, version, "cuda_gpu_kern_sum_base"))
    if version != "2023.4" and not len(ref):
        pytest.skip("no kernels")
    ref = kern_summary(_stats(export, version, "cuda_gpu_kern_sum_base"))
    pd.testing.assert_frame_equal(ours_kern_summary(doc), ref.sort_index(), check_dtype=False)
    assert [k.total_ns for k in doc.kernel_summary] == sorted(
        (k.total_ns for k in doc.kernel_summary), reverse=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_processes_apart_equal_nvtx_kern_sum_per_pid(export_doc, version: str) -> None:
    """Ranges of different processes are separate entries: per (PID, range, kernel) the
    numbers equal nsys stats' PID-split rows (ddp_single holds two ranks' processes)."""
    from analysis.commands.nsys_stats import kern_sum_by_pid, ours_kern_by_pid
    export, doc = export_doc
    ref = kern_sum_by_pid(_stats(export, version, "nvtx_kern_sum_base"))
    pd.testing.assert_frame_equal(ours_kern_by_pid(doc), ref, check_dtype=False)
    if export == "ddp_single/trace":
        steps = [e for e in doc.ranges if e.name == "ddp_run/ddp_step"]
        assert sorted(e.pid for e in steps) == sorted(set(ref.index.get_level_values(0)))
        assert sorted(d for e in steps for d in e.devices) == [0, 1]
