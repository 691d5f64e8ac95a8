"""The battery (tests/data/battery): on each program with one planted cause, the first
finding names that cause, and its predicted saving is what the fixed twin realized."""

from __future__ import annotations

from pathlib import Path

import pytest

from analysis.commands import calibration
from analysis.commands import calibration as twin_calibration
from tests.conftest import DATA
from tests.shared_docs import analyzed, shared

FIRST = {"input_starved": ("input_starved", "train_step/load"),
         "pageable_copy": ("pageable_copy", "step"),
         "item_sync": ("sync_in_loop", "step"),
         "launch_bound": ("unfused_elementwise", "step"),   # 200 tiny elementwise ops
         "dynamic_shapes": ("kernel_loads_per_call", "decode"),
         "fp32_gemm": ("fp32_gemm", "step"),
         "compile_warmup": ("first_calls", "step [warm-up]")}


@pytest.fixture(scope="session")
def rows() -> dict[str, calibration.Row]:
    return shared("battery-rows", lambda _: {r.program: r for r in calibration.run(
        DATA / "battery", lambda path: analyzed(str(path.relative_to(DATA).with_suffix(""))))})


@pytest.mark.parametrize("program", list(calibration.PROGRAMS))
def test_first_finding_names_the_planted_cause(rows, program: str) -> None:
    r = rows[program]
    assert (r.rule, r.range) == FIRST[program]


@pytest.mark.parametrize("program", list(calibration.PROGRAMS))
def test_predicted_saving_is_what_the_fix_realized(rows, program: str) -> None:
    r = rows[program]
    if program in calibration.ONE_TIME:       # paid once: named, not priced
        assert r.realized_ns > 0 and r.predicted_ns == 0 and "once" in r.not_priced, r
        return
    assert r.realized_ns > 0 and calibration.RATIO[0] <= r.ratio <= calibration.RATIO[1], r


TWIN_RATIOS = {"item_autograd": 0.81, "sync_timing": 1.00, "mask_sync": 1.05,
               "empty_cache": 1.02, "cpu_readback": 0.95, "foreach_adam": 1.11,
               "graph_break_item": 0.94, "kernel_gpu_bound": 0.99, "kernel_host_bound": 0.00,
               "input_starved": 0.99, "pageable_copy": 1.00, "item_sync": 0.99,
               "launch_bound": 1.04, "dynamic_shapes": 1.00, "fp32_gemm": 0.99,
               "copy_engine": 1.05, "gil_thread_sampled": 0.95}
"""Predicted / realized per twin program, as the committed page says (pinned)."""


@pytest.fixture(scope="session")
def twins() -> dict[str, twin_calibration.TwinRow]:
    return shared("twin-rows", lambda _: {r.program: r for r in
                                          twin_calibration.run_twins(DATA / "twins", _twin)})


def _twin(folder: Path):
    """A twin's document: the one other tests share, unless it has TORCH_LOGS to read."""
    if (folder / "torch_logs.txt").exists():
        return twin_calibration.twin_document(folder)
    return analyzed(str((folder / "trace").relative_to(DATA)))


@pytest.mark.parametrize("program", list(twin_calibration.TWINS))
def test_each_twin_names_its_cause_and_prices_it(twins, program: str) -> None:
    """The planted cause named by a finding on the planted loop, its replayed saving the
    pinned ratio of what the fix realized in the same process."""
    r = twins[program]
    assert r.rule == twin_calibration.TWINS[program][0] and r.range.startswith("planted")
    assert round(r.ratio, 2) == TWIN_RATIOS[program], r
    assert r.in_target or 0.5 <= r.ratio <= 1.5, r


def test_all_twins_but_two_in_the_target(twins) -> None:
    assert len(twins) == len(twin_calibration.TWINS) >= 14
    assert sum(not r.in_target for r in twins.values()) <= 2
    assert twins["kernel_host_bound"].predicted_ns < 0.05 * twins["kernel_host_bound"].step_ns


def test_the_committed_page_is_the_calibration(rows, twins) -> None:
    root = DATA.parent.parent
    page = (root / "reports" / "diagnosis.md").read_text()
    assert page == calibration.render(list(rows.values()), Path("tests/data/battery"),
                                      list(twins.values()), Path("tests/data/twins"))


def test_cpu_samples_name_the_runtime_compiler() -> None:
    """The same program captured with SAMPLE=cpu: the first finding names the hot library
    and function from the samples of the range's own thread."""
    doc = calibration.document(DATA / "battery" / "dynamic_shapes_sampled" / "trace.sqlite")
    first = doc.findings[0]
    assert (first.rule, first.range) == ("kernel_loads_per_call", "decode")
    assert "in libnvrtc.so.13 (nvrtcCompileProgram): runtime compilation" in first.message
    decode = next(e for e in doc.ranges if e.name == "decode")
    assert decode.hot[0].module == "libnvrtc.so.13" and decode.hot[0].pct > 50
    assert decode.cpu_samples >= sum(h.samples for h in decode.hot)


def test_without_samples_a_finding_says_how_to_get_them() -> None:
    doc = calibration.document(DATA / "battery" / "dynamic_shapes_planted" / "trace.sqlite")
    assert "make systems SAMPLE=cpu" in doc.findings[0].message
