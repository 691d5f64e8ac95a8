"""The battery (tests/data/battery): on each program with one planted cause, the first
finding names that cause, and its predicted saving is what the fixed twin realized."""

from __future__ import annotations

import pytest

from analysis import calibration
from tests.conftest import DATA

FIRST = {"input_starved": ("input_starved", "train_step/load"),
         "pageable_copy": ("pageable_copy", "step"),
         "item_sync": ("sync_in_loop", "step"),
         "launch_bound": ("launch_bound", "step"),
         "dynamic_shapes": ("kernel_loads_per_call", "decode"),
         "fp32_gemm": ("fp32_gemm", "step"),
         "compile_warmup": ("first_calls", "step [warm-up]")}


@pytest.fixture(scope="module")
def rows() -> dict[str, calibration.Row]:
    return {r.program: r for r in calibration.run(DATA / "battery")}


@pytest.mark.parametrize("program", list(calibration.PROGRAMS))
def test_first_finding_names_the_planted_cause(rows, program: str) -> None:
    r = rows[program]
    assert (r.rule, r.range) == FIRST[program]


@pytest.mark.parametrize("program", list(calibration.PROGRAMS))
def test_predicted_saving_is_what_the_fix_realized(rows, program: str) -> None:
    r = rows[program]
    assert r.realized_ns > 0 and calibration.RATIO[0] <= r.ratio <= calibration.RATIO[1], r


def test_the_committed_page_is_the_calibration(rows) -> None:
    page = (DATA.parent.parent / "reports" / "diagnosis.md").read_text()
    assert page == calibration.render(list(rows.values()), DATA.parent.parent.joinpath(
        "tests", "data", "battery").relative_to(DATA.parent.parent))


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
