"""Nsight Compute path: CSV loader (both unit styles), bound rule, compute CLI, ncu argv."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.__main__ import main
from analysis.commands import compute
from analysis.common.errors import InputError
from analysis.diagnosis.roofline import classify
from analysis.load import ncu_csv
from tests.conftest import DATA, simulated_tools
from workflows import ncu, tools

NCU = DATA / "ncu"
NUMERIC = ["duration_ns", "dram_read_bytes", "dram_write_bytes", "sm_sol_pct", "mem_sol_pct",
           "block_size", "grid_size", "registers_per_thread", "waves_per_sm",
           "achieved_occupancy_pct", "theoretical_occupancy_pct", "dram_bytes_per_s"]


def _cell(path: Path, row: int, column: str) -> tuple[str, str]:
    """(value, unit) of one cell, read with the csv module alone."""
    rows = list(csv.reader(path.open()))
    i = rows[0].index(column)
    return rows[row + 2][i], rows[1][i]


@pytest.mark.parametrize("workload", ["matmul_relu", "gelu"])
def test_unit_styles_agree(workload: str) -> None:
    default = ncu_csv.load(NCU / f"{workload}_raw.csv").kernels
    base = ncu_csv.load(NCU / f"{workload}_raw_base.csv").kernels
    assert list(default["name"]) == list(base["name"])
    np.testing.assert_allclose(default[NUMERIC].to_numpy(float), base[NUMERIC].to_numpy(float),
                               rtol=2e-3)


def test_values_match_the_csv_read_independently() -> None:
    data = ncu_csv.load(NCU / "matmul_relu_raw.csv").kernels
    value, unit = _cell(NCU / "matmul_relu_raw.csv", 0, "gpu__time_duration.sum")
    assert unit == "us" and data["duration_ns"][0] == pytest.approx(float(value) * 1e3)
    value, unit = _cell(NCU / "matmul_relu_raw.csv", 4, "dram__bytes_read.sum")
    assert unit == "Mbyte" and data["dram_read_bytes"][4] == pytest.approx(float(value) * 1e6)
    value, unit = _cell(NCU / "matmul_relu_raw_base.csv", 1, "dram__bytes.sum.per_second")
    assert unit == "byte/s"
    assert data["dram_bytes_per_s"][1] == pytest.approx(float(value.replace(",", "")), 1e-5)


def test_ranges_kernels_and_launch_order() -> None:
    k = ncu_csv.load(NCU / "matmul_relu_raw_base.csv").kernels
    assert list(k["range"]) == ["matmul_relu/naive"] * 2 + ["matmul_relu/compiled"] * 2 + [
        "matmul_relu/triton"]
    assert set(k["domain"]) == {"profkit"} and list(k["id"]) == [0, 1, 2, 3, 4]
    assert k["name"][3] == "triton_poi_fused_relu_0" and k["name"][0].startswith("nvjet_sm90")
    assert "launch_clamp_scalar(at::TensorIteratorBase &, c10::Scalar" in k["name"][1]
    gelu = ncu_csv.load(NCU / "gelu_raw.csv").kernels
    assert (gelu["range"] == "gelu/naive").sum() == 9 and len(gelu) == 12


@pytest.mark.parametrize("unit, factor, base", [
    ("us", 1e3, "ns"), ("msecond", 1e6, "ns"), ("ns", 1, "ns"), ("Mbyte", 1e6, "byte"),
    ("Kbyte", 1e3, "byte"), ("Gbyte/s", 1e9, "byte/s"), ("Tbyte/s", 1e12, "byte/s"),
    ("byte/ns", 1e9, "byte/s"), ("%/Kbyte", 1e-3, "%/byte"), ("Ghz", 1e9, "hz"), ("%", 1, "%"),
    ("register/thread", 1, "register/thread"), ("", 1, "")])
def test_unit_scale(unit: str, factor: float, base: str) -> None:
    got_base, got = ncu_csv.unit_scale(unit)
    assert got_base == base and got == pytest.approx(factor)


@given(st.floats(0, 1e15, allow_nan=False))
def test_parse_number_round_trips_grouped_digits(x: float) -> None:
    assert ncu_csv.parse_number(f"{x:,.2f}") == pytest.approx(round(x, 2), rel=1e-12, abs=1e-9)


def test_parse_nvtx_forms() -> None:
    cell = ('1480  "profkit:matmul_relu:none:none:RGB:0xff:REGISTERED:matmul_relu"  '
            '"profkit:naive:none:none:RGB:0xff:REGISTERED:naive" ')
    assert ncu_csv.parse_nvtx(cell) == ("matmul_relu/naive", "profkit")
    single = '"<default domain>:matmul_relu/naive:none:none:RGB:0xff:REGISTERED:matmul_relu/naive"'
    assert ncu_csv.parse_nvtx(single) == ("matmul_relu/naive", None)
    colon = '"d:a:b:none:none:none:none:ASCII:a:b"'
    assert ncu_csv.parse_nvtx(colon) == ("a:b", "d")
    assert ncu_csv.parse_nvtx("") == ("", None)


def test_bound_rule() -> None:
    import pandas as pd
    sm = pd.Series([90.3, 39.0, 70.0, 20.0, 61.0])
    mem = pd.Series([69.9, 56.6, 85.0, 10.0, 59.0])
    assert list(classify(sm, mem)) == ["compute", "latency", "memory", "latency", "compute"]


def test_compute_cli_on_real_csv(tmp_path: Path) -> None:
    assert main(["compute", str(NCU / "matmul_relu_raw.csv"), "--meta",
                 str(NCU / "matmul_relu_meta.json"), "-o", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "compute.json").read_text())
    assert doc["schema"] == "compute/1" and len(doc["kernels"]) == 5
    bounds = [k["bound"] for k in doc["kernels"]]
    assert bounds[0] == "compute" and bounds[4] == "compute"
    per_range = {r["range"]: r for r in doc["ranges"]}
    assert per_range["matmul_relu/naive"]["kernels_per_iter"] == 2
    assert per_range["matmul_relu/triton"]["kernels_per_iter"] == 1
    assert doc["ceilings"]["dram_bytes_per_s"] == pytest.approx(4.81e12, rel=0.01)
    assert (tmp_path / "roofline.png").stat().st_size > 1000
    assert "![roofline](roofline.png)" in (tmp_path / "compute.md").read_text()


@pytest.mark.parametrize("content, expect", [
    (b"==PROF== Connected\n==ERROR== something failed\n", "not an ncu raw CSV"),
    (b"", "not an ncu raw CSV"),
    (b"\x00\x01\x02" * 50, "binary"),
    (b'"ID","Kernel Name","gpu__time_duration.sum"\n"","","us"\n', "no profiled kernel"),
])
def test_bad_csv_inputs(tmp_path: Path, content: bytes, expect: str) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_bytes(content)
    with pytest.raises(InputError, match=expect):
        ncu_csv.load(bad)
    assert main(["compute", str(bad), "-o", str(tmp_path / "out")]) == 2


def _without(tmp_path: Path, column: str) -> Path:
    rows = list(csv.reader((NCU / "gelu_raw.csv").open()))
    i = rows[0].index(column)
    cut = tmp_path / "cut.csv"
    with cut.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows([r[:i] + r[i + 1:] for r in rows])
    return cut


def test_only_a_missing_duration_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="gpu__time_duration.sum"):
        ncu_csv.load(_without(tmp_path, "gpu__time_duration.sum"))
    data = ncu_csv.load(_without(tmp_path, "dram__bytes_read.sum"))
    assert "dram__bytes_read.sum" in data.missing
    assert data.kernels["dram_read_bytes"].isna().all()


def test_default_section_set_csv_renders(tmp_path: Path) -> None:
    """ncu's default set (what `ncu -o x python train.py` collects) has no dram__bytes_*:
    every launch still reports, the gaps say how to fill them."""
    src = NCU / "user_train_default_raw.csv"
    assert main(["compute", str(src), "-o", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "compute.json").read_text())
    assert len(doc["kernels"]) == 40
    k = doc["kernels"][0]
    assert k["duration_ns"] > 0 and k["sm_sol_pct"] is not None
    assert k["dram_read_bytes"] is None and k["bound"] in ("memory", "compute", "latency")
    note = next(n for n in doc["notes"] if n.startswith("not collected"))
    assert "dram__bytes_read.sum" in note and "--metrics dram__bytes_read.sum" in note
    md = (tmp_path / "compute.md").read_text()
    assert "## Kernels" in md and "–" in md
    assert len((tmp_path / "launches.csv").read_text().splitlines()) == 41


def test_profile_argv_filter_sections_metrics() -> None:
    argv = ncu.profile_argv("ncu", "runs/x/profile", ncu.nvtx_filter("matmul_relu", "triton"),
                            ["python", "-m", "workflows.runner"], launch_count=10)
    assert argv[:6] == ["ncu", "--clock-control", "none", "--nvtx", "--nvtx-include",
                        "profkit@matmul_relu/triton/"]
    for section in ("SpeedOfLight", "Occupancy", "LaunchStats", "MemoryWorkloadAnalysis",
                    "SpeedOfLight_RooflineChart"):
        assert section in argv
    assert "dram__bytes_read.sum,dram__bytes_write.sum,launch__waves_per_multiprocessor" in argv
    assert argv[argv.index("--launch-count") + 1] == "10"
    assert argv[-3:] == ["python", "-m", "workflows.runner"]
    assert ncu.nvtx_filter("gelu") == "profkit@gelu/"
    assert ncu.import_csv_argv("ncu", "a.ncu-rep", base_units=True)[-2:] == ["--print-units",
                                                                             "base"]


def test_permission_and_empty_filter_errors(tmp_path: Path) -> None:
    with pytest.raises(tools.ToolError, match="NVreg_RestrictProfilingToAdminUsers") as err:
        ncu.check_output("==ERROR== ERR_NVGPUCTRPERM - no permission", "f", tmp_path / "m")
    assert err.value.exit_code == 3
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"ranges": {"naive": "gelu/naive"}}))
    with pytest.raises(tools.ToolError, match="profkit@gelu/x/.*gelu/naive") as err:
        ncu.check_output("==WARNING== No kernels were profiled.", "profkit@gelu/x/", meta)
    assert err.value.exit_code == 2


def test_ncu_capture_with_mocked_tool(monkeypatch, fake_tools, tmp_path: Path) -> None:
    fake_tools.handler = simulated_tools
    calls = fake_tools.calls
    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/opt/ncu"))
    monkeypatch.setattr(ncu, "gpu_present", lambda: True)
    assert ncu.main(["gelu", "--variant", "triton", "--runs", str(tmp_path)]) == 0
    pre, prof, imp = calls
    # first the plain run that autotunes, then ncu reading its cached choices
    assert pre[1:4] == ["-m", "workflows.runner", "gelu"] and pre[-2:] == ["--variants", "triton"]
    assert pre[pre.index("--out") + 1].endswith("pretune")
    assert fake_tools.envs[0]["TRITON_CACHE_AUTOTUNING"] == "1"
    assert fake_tools.envs[1]["TRITON_CACHE_AUTOTUNING"] == "1"
    assert prof[0] == "/opt/ncu"
    assert prof[prof.index("--nvtx-include") + 1] == "profkit@gelu/triton/"
    assert prof[-2:] == ["--variants", "triton"] and "--import" in imp
    assert (tmp_path / "gelu" / "latest-ncu" / "ncu_raw.csv").read_text() == '"ID"\n'


def test_ncu_capture_without_pretune(monkeypatch, fake_tools, tmp_path: Path) -> None:
    fake_tools.handler = simulated_tools
    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/opt/ncu"))
    monkeypatch.setattr(ncu, "gpu_present", lambda: True)
    assert ncu.main(["gelu", "--no-pretune", "--runs", str(tmp_path)]) == 0
    assert [c[0] for c in fake_tools.calls] == ["/opt/ncu", "/opt/ncu"]
    assert fake_tools.envs[0] is None


def test_ncu_missing_exits_3(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr("analysis.common.tools.NCU_PATTERNS", ())
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    assert ncu.main(["gelu", "--runs", str(tmp_path)]) == 3
    assert "ncu not found" in capsys.readouterr().err


def test_ncu_rep_without_ncu_exits_3(tmp_path: Path, monkeypatch, capsys) -> None:
    rep = tmp_path / "profile.ncu-rep"
    rep.write_bytes(b"\x00" * 16)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("NCU", raising=False)
    monkeypatch.setattr("analysis.common.tools.NCU_PATTERNS", ())
    assert main(["compute", str(rep), "-o", str(tmp_path / "out")]) == 3
    assert "needs ncu" in capsys.readouterr().err


def test_reordered_columns_give_same_kernels(tmp_path: Path) -> None:
    rows = list(csv.reader((NCU / "matmul_relu_raw.csv").open()))
    order = list(reversed(range(len(rows[0]))))
    shuffled = tmp_path / "reordered.csv"
    with shuffled.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows([[r[i] for i in order] for r in rows])
    a = ncu_csv.load(NCU / "matmul_relu_raw.csv").kernels
    b = ncu_csv.load(shuffled).kernels
    assert a.drop(columns=["domain"]).equals(b.drop(columns=["domain"]))


def test_mixed_units_in_one_file(tmp_path: Path) -> None:
    """One duration in us and one size in Kbyte: each column is scaled by its own unit."""
    rows = list(csv.reader((NCU / "matmul_relu_raw_base.csv").open()))
    t = rows[0].index("gpu__time_duration.sum")
    b = rows[0].index("dram__bytes_read.sum")
    rows[1][t], rows[1][b] = "us", "Kbyte"
    for r in rows[2:]:
        r[t] = f"{float(r[t].replace(',', '')) / 1e3:.6f}"
        r[b] = f"{float(r[b].replace(',', '')) / 1e3:.6f}"
    mixed = tmp_path / "mixed.csv"
    with mixed.open("w", newline="") as fh:
        csv.writer(fh, quoting=csv.QUOTE_ALL).writerows(rows)
    want = ncu_csv.load(NCU / "matmul_relu_raw_base.csv").kernels
    got = ncu_csv.load(mixed).kernels
    np.testing.assert_allclose(got["duration_ns"], want["duration_ns"], rtol=1e-9)
    np.testing.assert_allclose(got["dram_read_bytes"], want["dram_read_bytes"], rtol=1e-9)


def test_ncu_permission_error_from_the_tool_exits_3(monkeypatch, fake_tools, tmp_path: Path,
                                                    capsys) -> None:
    denied = (1, "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access "
                 "NVIDIA GPU Performance Counters\n")
    fake_tools.handler = lambda argv: denied if argv[0] == "/opt/ncu" else (0, "")
    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/opt/ncu"))
    monkeypatch.setattr(ncu, "gpu_present", lambda: True)
    assert ncu.main(["gelu", "--runs", str(tmp_path)]) == 3
    err = capsys.readouterr().err
    assert "NVreg_RestrictProfilingToAdminUsers=0" in err


def test_ncu_filter_that_profiled_nothing_exits_2(monkeypatch, fake_tools, tmp_path: Path,
                                                  capsys) -> None:
    fake_tools.handler = lambda argv: (0, "==WARNING== No kernels were profiled.\n")
    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/opt/ncu"))
    monkeypatch.setattr(ncu, "gpu_present", lambda: True)
    assert ncu.main(["gelu", "--variant", "nope", "--runs", str(tmp_path)]) == 2
    assert "profkit@gelu/nope/" in capsys.readouterr().err


def test_ncu_on_any_command(monkeypatch, fake_tools, tmp_path: Path) -> None:
    fake_tools.handler = simulated_tools
    monkeypatch.setattr(ncu, "find_ncu", lambda: Path("/opt/ncu"))
    monkeypatch.setattr(ncu, "gpu_present", lambda: True)
    assert ncu.main(["--name", "train", "--runs", str(tmp_path), "--", "python", "t.py"]) == 0
    (prof, _imp) = [c for c in fake_tools.calls if c[0] != "git"]   # no pretune
    assert "--nvtx-include" not in prof and prof[prof.index("--launch-count") + 1] == "100"
    assert prof[-2:] == ["python", "t.py"]
    meta = json.loads((tmp_path / "train" / "latest-ncu" / "meta.json").read_text())
    assert "first 100 kernel launches" in meta["notes"][0]
    fake_tools.calls.clear()
    assert ncu.main(["--name", "train", "--nvtx-include", "step/fwd/", "--runs",
                     str(tmp_path), "--", "python", "t.py"]) == 0
    prof = fake_tools.calls[0]
    assert prof[prof.index("--nvtx-include") + 1] == "step/fwd/"
    assert "--launch-count" not in prof


def test_peaks_for_every_gpu_and_dtype_the_tool_meets() -> None:
    from analysis.common.settings import DATASHEET_FLOPS
    from analysis.diagnosis import roofline

    for gpu in ("NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H100 NVL",
                "NVIDIA H200", "NVIDIA H200 NVL"):
        for dtype in ("fp8", "torch.float16", "bf16", "tf32", "float32"):
            flops, bw = roofline.datasheet(gpu, dtype)
            assert flops and bw, (gpu, dtype)
        peaks = DATASHEET_FLOPS[gpu]               # tensor cores: fp8 2x fp16 2x tf32
        assert peaks["float8"] == pytest.approx(2 * peaks["float16"], rel=0.01)
        assert peaks["float16"] == pytest.approx(2 * peaks["tfloat32"], rel=0.01)
    assert roofline.datasheet("NVIDIA H200", "float16")[0] == 989.4e12
    assert roofline.datasheet("NVIDIA A100", "float16") == (None, None)


def test_a_commands_dtype_comes_from_its_gemm_kernels() -> None:
    from analysis.diagnosis import roofline

    names = pd.Series(["nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
                       "sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", "vectorized_elementwise_kernel",
                       "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8"])
    assert roofline.gemm_dtype(names, pd.Series([5.0, 9.0, 100.0, 1.0])) == "bfloat16"
    assert roofline.gemm_dtype(names, pd.Series([50.0, 9.0, 100.0, 1.0])) == "float16"
    assert roofline.gemm_dtype(names[2:3], pd.Series([1.0])) is None
    doc = compute.build(ncu_csv.load(NCU / "fp32_gemm_raw.csv"), None)
    assert doc.ceilings.flops_per_s == 66.9e12 and "float32" in doc.ceilings.flops_source
    assert not [n for n in doc.notes if "no peak FLOP/s" in n]


@pytest.mark.parametrize(("command", "pids", "alone"), [
    (["python3", "train.py"], {1}, True), (["./train.py", "--steps", "3"], {1}, True),
    (["python", "-m", "mypkg.train"], {1}, True), (["python3", "train.py"], {1, 2}, False),
    (["python", "-m", "torch.distributed.run", "--nproc-per-node=1", "t.py"], {1}, False),
    (["torchrun", "t.py"], {1}, False), (["bash", "run.sh"], {1}, False), ([], {1}, False)])
def test_ncu_follows_the_launched_process_alone_for_a_python_program(
        command: list[str], pids: set[int], alone: bool) -> None:
    """A Python program whose own process launched every kernel: ncu follows it alone, so
    its DataLoader workers run as they do without ncu; a launcher's children need all."""
    from analysis.commands.picks import Run, own_process

    assert own_process(command, pids) is alone
    argv = Run(32, ["k"], own_process=alone).argv()
    assert (argv[-2:] == ["--target-processes", "application-only"]) is alone


def test_a_run_of_the_process_alone_that_profiled_nothing_runs_over_every_process(
        fake_tools, tmp_path: Path, capsys) -> None:
    fake_tools.handler = lambda argv: (0, "==WARNING== No kernels were profiled.\n"
                                       if "application-only" in argv else "==PROF== ok\n")
    args = argparse.Namespace(clock_control="none", launch_count=None)
    picked = ["--kernel-id", "::regex:^(k)$:3", "--launch-count", "1", "--kill", "yes",
              "--target-processes", "application-only"]
    out = ncu._profile("/opt/ncu", tmp_path / "profile", None, ["python3", "t.py"], args,
                       picked, None)
    assert out == "==PROF== ok\n" and len(fake_tools.calls) == 2
    assert "--target-processes" not in fake_tools.calls[1]
    assert fake_tools.calls[1][fake_tools.calls[1].index("--kill") + 1] == "yes"
    assert "again over every process" in capsys.readouterr().err


def test_a_kernel_whose_launches_split_between_two_bounds_says_the_same_one_every_run(
) -> None:
    """The kernels table gives each kernel its launches' most frequent bound; between two
    as frequent, the same one whatever the launches' order (the first of a set of
    strings moved with the process's hash seed)."""
    from analysis.documents.types import Ceilings, ComputeDoc, ComputeSource, KernelLaunch
    from analysis.render.compute_md import kernels_section

    for order in (("memory", "compute"), ("compute", "memory")):
        doc = ComputeDoc(source=ComputeSource("x", None), ranges=[], ceilings=Ceilings(),
                         thresholds={"latency_pct": 60.0},
                         kernels=[KernelLaunch("r", "k", duration_ns=1000, bound=b)
                                  for b in order])
        row = next(line for line in kernels_section(doc) if line.startswith("| k "))
        assert "| memory |" in row and "| compute |" not in row, order
