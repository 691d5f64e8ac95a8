"""Tool drivers: argv lists, tool discovery and failures, with subprocess mocked."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import simulated_tools
from workflows import nsys, tools
from workflows import workloads as registry


def test_profile_argv_traces_cuda_nvtx_osrt_graph_nodes_without_sampling() -> None:
    argv = nsys.profile_argv("/x/nsys", Path("runs/gelu/t/trace"), ["python", "-m", "w"])
    assert argv[:2] == ["/x/nsys", "profile"]
    assert "--trace=cuda,nvtx,osrt" in argv and "--cuda-graph-trace=node" in argv
    assert "--sample=none" in argv and "--cpuctxsw=none" in argv
    assert "--output=runs/gelu/t/trace" in argv and argv[-3:] == ["python", "-m", "w"]


def test_profile_argv_with_cpu_samples() -> None:
    argv = nsys.profile_argv("nsys", "t", ["python", "x.py"], sample="cpu")
    assert "--sample=process-tree" in argv and "--python-sampling=true" in argv
    assert "--python-sampling-frequency=2000" in argv
    assert "--sample=none" not in argv and argv[-2:] == ["python", "x.py"]
    assert "--sample cpu" in subprocess.run(
        ["make", "-n", "systems", "SCRIPT=python x.py", "NAME=x", "SAMPLE=cpu"],
        capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1]).stdout


def test_export_argv_writes_sqlite_elsewhere() -> None:
    argv = nsys.export_argv("nsys", "a.nsys-rep", "/tmp/b.sqlite")
    assert argv == ["nsys", "export", "--type=sqlite", "--force-overwrite=true",
                    "--output=/tmp/b.sqlite", "a.nsys-rep"]
    sampled = nsys.export_argv("nsys", "a.nsys-rep", "/tmp/b.sqlite", python_samples=True)
    assert "--include-json=true" in sampled and sampled[-1] == "a.nsys-rep"


def test_runner_command_names_workload_size_iters(tmp_path: Path) -> None:
    cmd = nsys.runner_command("gelu", "small", 5, tmp_path)
    assert cmd[1:] == ["-m", "workflows.runner", "gelu", "--size", "small", "--iters", "5",
                       "--out", str(tmp_path)]


def test_find_tool_order(tmp_path: Path) -> None:
    exe = tmp_path / "nsys"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    assert nsys.find_nsys({"NSYS": str(exe), "PATH": ""}) == exe
    assert nsys.find_nsys({"PATH": str(tmp_path)}) == exe
    with pytest.raises(tools.ToolError) as err:
        nsys.find_nsys({"NSYS": str(tmp_path / "nope"), "PATH": ""})
    assert err.value.exit_code == 3


def test_find_tool_missing_says_where_it_looked(monkeypatch) -> None:
    monkeypatch.setattr("analysis.common.tools.NSYS_PATTERNS", ("/nonexistent/*/nsys",))
    with pytest.raises(tools.ToolError, match="nsys not found.*NSYS.*PATH") as err:
        nsys.find_nsys({"PATH": ""})
    assert err.value.exit_code == 3


@pytest.mark.parametrize("stream", [False, True])
def test_failed_tool_is_not_swallowed(fake_tools, stream: bool) -> None:
    fake_tools.handler = lambda argv: (7, "boom\n")
    with pytest.raises(tools.ToolError, match="(?s)exit 7.*boom"):
        tools.run_tool(["nsys", "profile"], "nsys profile", stream=stream)


def test_streamed_output_is_echoed_and_returned(fake_tools, capsys) -> None:
    fake_tools.handler = lambda argv: (0, "==PROF== pass 1\n==PROF== pass 2\n")
    out = tools.run_tool(["ncu"], "ncu profile", stream=True)
    assert out.count("==PROF==") == 2
    assert "[ncu profile] ==PROF== pass 2" in capsys.readouterr().err


def _mocked(monkeypatch, fake_tools) -> None:
    fake_tools.handler = simulated_tools
    monkeypatch.setattr(nsys, "find_nsys", lambda: Path("/opt/nsys"))
    monkeypatch.setattr(nsys, "gpu_present", lambda: True)


def test_capture_runs_profile_then_export(monkeypatch, fake_tools, tmp_path: Path) -> None:
    _mocked(monkeypatch, fake_tools)
    assert nsys.main(["gelu", "--size", "small", "--iters", "3", "--runs", str(tmp_path)]) == 0
    assert [a[1] for a in fake_tools.calls] == ["profile", "export"]
    latest = tmp_path / "gelu" / "latest"
    assert latest.is_symlink() and (latest / "trace.sqlite").is_file()
    assert oct((latest / "meta.json").stat().st_mode)[-3:] != "600"


def test_sampled_capture_exports_the_python_stacks(monkeypatch, fake_tools,
                                                    tmp_path: Path) -> None:
    """SAMPLE=cpu: profiled with Python sampling, exported with the samples' stacks."""
    _mocked(monkeypatch, fake_tools)
    assert nsys.main(["gelu", "--sample", "cpu", "--runs", str(tmp_path)]) == 0
    profile, export = fake_tools.calls
    assert "--python-sampling=true" in profile and "--include-json=true" in export


def test_capture_without_report_blames_importer(monkeypatch, fake_tools,
                                               tmp_path: Path) -> None:
    _mocked(monkeypatch, fake_tools)
    fake_tools.handler = lambda argv: (0, "")           # nsys wrote no report
    with pytest.raises(tools.ToolError, match="libdw") as err:
        nsys.capture(nsys.parse_target(_parser(), ["gelu", "--runs", str(tmp_path)]))
    assert err.value.exit_code == 3


def _parser():
    import argparse
    p = argparse.ArgumentParser()
    nsys._arguments(p)
    return p


def test_failed_run_leaves_latest_on_the_last_complete_one(monkeypatch, fake_tools,
                                                         tmp_path: Path, capsys) -> None:
    _mocked(monkeypatch, fake_tools)
    assert nsys.main(["gelu", "--runs", str(tmp_path)]) == 0
    good = (tmp_path / "gelu" / "latest").resolve()
    fake_tools.handler = lambda argv: (1, "nsys: something broke")
    assert nsys.main(["gelu", "--runs", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert "marked FAILED" in err and "still points at the last complete run" in err
    assert (tmp_path / "gelu" / "latest").resolve() == good
    runs = sorted(p for p in (tmp_path / "gelu").iterdir() if not p.is_symlink())
    assert len(runs) == 2 and (runs[-1] / "FAILED").is_file()     # same second: -2 suffix


def test_any_command_is_profiled_as_given(monkeypatch, fake_tools, tmp_path: Path) -> None:
    _mocked(monkeypatch, fake_tools)
    assert nsys.main(["--name", "train", "--runs", str(tmp_path), "--", "python",
                      "train.py", "--steps", "5"]) == 0
    prof = fake_tools.calls[0]
    assert prof[-4:] == ["python", "train.py", "--steps", "5"]
    assert fake_tools.envs[0]["TORCH_LOGS_OUT"].endswith("torch_logs.txt")
    meta = json.loads((tmp_path / "train" / "latest" / "meta.json").read_text())
    assert meta["workload"] == "train" and meta["command"][-1] == "5"
    with pytest.raises(SystemExit):
        nsys.main(["--runs", str(tmp_path), "--", "python", "x.py"])      # needs --name
    with pytest.raises(SystemExit):
        nsys.main(["nope"])                                            # unknown workload


def test_capture_without_gpu_exits_3(monkeypatch, tmp_path: Path, capsys) -> None:
    monkeypatch.setattr(nsys, "find_nsys", lambda: Path("/opt/nsys"))
    monkeypatch.setattr(nsys, "gpu_present", lambda: False)
    assert nsys.main(["gelu", "--runs", str(tmp_path)]) == 3
    assert "no NVIDIA GPU" in capsys.readouterr().err


def test_registry_cost_models() -> None:
    gelu = registry.get("gelu")
    cost = gelu.cost(gelu.shapes("default"), gelu.dtype)
    assert cost.min_bytes == 2 * 8192 * 8192 * 4 and cost.ideal_kernels == 1
    mm = registry.get("matmul_relu")
    cost = mm.cost(mm.shapes("default"), mm.dtype)
    assert cost.flops == 2 * 4096**3 and cost.min_bytes == 3 * 4096 * 4096 * 2
    with pytest.raises(KeyError, match="known: ") as err:
        registry.get("nope")
    assert all(name in str(err.value) for name in registry.REGISTRY)     # says what exists


def test_torch_logs_are_routed_to_the_run_folder(tmp_path: Path) -> None:
    """The runner's TORCH_LOGS capture, end to end on the CPU (dynamo's eager backend)."""
    pytest.importorskip("torch")
    log = tmp_path / "torch_logs.txt"
    script = f"""
from pathlib import Path
from workflows.compile_info import route_torch_logs, torch_logs
route_torch_logs(Path({str(log)!r}))
import torch
from workflows.workloads import REGISTRY
fn = torch.compile(REGISTRY["graph_break"].variants["naive"](), backend="eager")
with torch_logs(Path({str(log)!r})) as info:
    fn(torch.ones(8)); fn(torch.ones(9, 2))
print(info["recompiles"])
"""
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=Path(__file__).parents[1], timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert int(res.stdout.split()[-1]) >= 1
    from analysis.load import torch_logs
    events = torch_logs.load(log)
    breaks = events[events["kind"] == "graph_break"]
    assert breaks["reason"].tolist()[:2] == ["Data-dependent branching",
                                             "Failed to trace builtin operator"]
    assert breaks["file"].str.endswith("workflows/workloads.py").all()


def test_bench_roofline_and_render() -> None:
    from workflows import bench
    peaks = {"copy_bytes_per_s": 4e12, "fp16_gemm_flops_per_s": 700e12, "method": "m"}
    # memory-bound: 4 GB at 4 TB/s is a 1 ms floor; compute-bound: 1.4e12 FLOPs at 700 TF/s
    assert bench.floor_seconds(10**9, 4 * 10**9, 700e12, 4e12) == pytest.approx(1e-3)
    assert bench.floor_seconds(14 * 10**11, 10**6, 700e12, 4e12) == pytest.approx(2e-3)
    assert bench.floor_seconds(1, 1, None, 4e12) is None         # unknown GPU: no floor
    row = {"workload": "gelu", "dtype": "float32", "shape": "8192x8192", "bytes_per_s": 4.19e12,
           "flops_per_s": 4.7e12, "pct_of_roofline": 90.0, "rel_error": 4e-8}
    doc = {"gpu": "NVIDIA H200", "driver": "580", "torch": "2.11", "triton": "3.6",
           "ceilings": peaks, "rounds": 3, "results": [
               {**row, "variant": "triton", "time_ns": 128_000.0,
                "round_times_ns": [127_000.0, 128_000.0, 131_000.0]},
               {**row, "variant": "naive", "time_ns": 160_000.0},
               {**row, "variant": "compiled", "time_ns": 130_000.0}]}
    md = bench.render(doc)
    # datasheet: 536 MB at 4.8 TB/s = 111.7 us (87.3%); the measured 4 TB/s copy: 104.8%
    assert ("| gelu | triton | 8192x8192 | 128.0 µs | 127.0-131.0 | 111.7 µs | 4,190 | 4.7 | "
            "87.3% | 104.8% | 0.985x |") in md            # against compiled, the fastest torch
    assert "median over 3 interleaved rounds" in md


def test_bench_rounds_interleave_variants(monkeypatch) -> None:
    """Round r times every variant before round r + 1 starts (clock drift hits all alike)."""
    triton = pytest.importorskip("triton")
    from workflows import bench

    order = []
    monkeypatch.setattr(triton.testing, "do_bench",
                        lambda fn, **kw: (fn(), float(len(order)))[1])
    fns = {"a": lambda: order.append("a"), "b": lambda: order.append("b")}
    times = bench.time_interleaved(fns, (), rounds=3)
    assert order == ["a", "b"] * 3
    assert times == {"a": [1.0, 3.0, 5.0], "b": [2.0, 4.0, 6.0]}


def test_bench_selects_benchmark_workloads() -> None:
    names = [n for n, w in registry.REGISTRY.items() if w.bench]
    assert "graph_break" not in names and {"gelu", "softmax", "matmul_relu"} <= set(names)


def test_sweep_spaces_and_render() -> None:
    pytest.importorskip("triton")
    from workflows import sweep

    points = sweep.with_repeats(list(sweep.SPACES["attention_causal"]()))
    labels = [label for _, label, _ in points]
    assert labels[0] == "default dispatch" and labels[-1] == "CUDNN_ATTENTION (again)"
    for group, label, _ in points:                   # the causal split needs BLOCK_N | BLOCK_M
        if group == "triton":
            meta = dict(kv.split("=") for kv in label.split(", "))
            assert int(meta["BLOCK_M"]) % int(meta["BLOCK_N"]) == 0
    doc = {"kernel": "k", "gpu": "G", "driver": "d", "torch": "t", "triton": "3",
           "dtype": "float16", "shape": "s", "flops": 2e12, "points": [
               {"group": "torch", "label": "ref", "time_ns": 2e6},
               {"group": sweep.UNCHECKED, "label": "gemm", "time_ns": 1e6},
               {"group": "triton", "label": "a", "time_ns": 1.5e6},
               {"group": "triton", "label": "b", "error": "OutOfResources: shared memory"}]}
    md = sweep.render(doc)
    rows = [line for line in md.splitlines() if line.startswith("| ") and "µs" in line]
    assert [r.split(" | ")[1] for r in rows] == ["gemm", "a", "ref"]       # fastest first
    assert "| 1,500.0 µs | 1,333 | 0.750 |" in rows[1]   # ratio to torch, not to the GEMM
    assert "- triton b: OutOfResources: shared memory" in md


def test_unpack_xz_writes_once(tmp_path: Path) -> None:
    import lzma
    import os

    from analysis.documents.io import unpack_xz

    packed = tmp_path / "s" / "trace.sqlite.xz"
    packed.parent.mkdir()
    packed.write_bytes(lzma.compress(b"SQLite format 3\x00" + bytes(1000)))
    assert unpack_xz(tmp_path) == [tmp_path / "s" / "trace.sqlite"]
    assert (tmp_path / "s" / "trace.sqlite").read_bytes()[:6] == b"SQLite"
    assert unpack_xz(tmp_path) == []                  # up to date: left alone
    os.utime(packed, (2e9, 2e9))                      # a newer archive is unpacked again
    assert unpack_xz(tmp_path) == [tmp_path / "s" / "trace.sqlite"]


def test_every_registered_variant_builds_without_a_gpu() -> None:
    """Each variant factory resolves its imports (kernels under TRITON_INTERPRET, torch
    functions, torch.compile wrappers): a typo in a declaration fails here, not on a GPU."""
    pytest.importorskip("torch")
    pytest.importorskip("triton")
    for w in registry.WORKLOADS:
        for name, factory in [*w.variants.items(), ("reference", w.reference)]:
            assert callable(factory()), (w.name, name)
        for size in w.sizes:
            cost = w.cost(w.shapes(size), w.dtype)
            assert cost.flops > 0 and cost.min_bytes > 0 and cost.ideal_kernels >= 0
    assert set(registry.SIZES) == {"default", "small"}


def test_every_workload_is_registered_once_under_its_name() -> None:
    assert list(registry.REGISTRY) == [w.name for w in registry.WORKLOADS]
    assert all(registry.get(w.name) is w for w in registry.WORKLOADS)


def test_every_variant_has_a_role_and_the_baseline_is_declared() -> None:
    for w in registry.WORKLOADS:
        roles = w.all_roles()
        assert set(roles) == set(w.variants) and set(roles.values()) <= set(registry.ROLES)
        assert list(roles.values()).count("baseline") <= 1, w.name
    assert registry.get("train_step").all_roles() == {
        "eager": "baseline", "compiled": "compiled", "cudagraphs": "compiled"}
    assert registry.get("gelu").role("triton") == "triton"


def test_a_workload_rejects_a_role_it_cannot_have() -> None:
    gelu = registry.get("gelu")
    with pytest.raises(ValueError, match="roles must be one of"):
        dataclasses.replace(gelu, roles={"triton": "fast"})
    with pytest.raises(ValueError, match="no such variant"):
        dataclasses.replace(gelu, roles={"triton_v2": "triton"})
    mine = dataclasses.replace(gelu, variants={**gelu.variants, "triton_v2": gelu.variants[
        "triton"]}, roles={"triton_v2": "triton"})
    assert mine.role("triton_v2") == "triton" and mine.role("naive") == "baseline"


def test_train_step_runs_on_the_cpu() -> None:
    """The training step (eager) trains: its loss goes down, and fwd/bwd/opt nest."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("nvtx")
    w = registry.REGISTRY["train_step"]
    x, target = w.make_inputs(w.shapes("small"), "float32", "cpu")
    step = w.variants["eager"]()
    losses = [float(step(x, target)) for _ in range(4)]
    assert losses[-1] < losses[0] and all(np.isfinite(losses))
    assert torch.is_tensor(step(x, target))
    cost = w.cost(w.shapes("default"), w.dtype)
    assert cost.ideal_kernels == 0 and cost.flops > 6 * 8 * 1024 * 12 * 1024 ** 2


def test_sub_ranges_only_inside_the_timed_range(monkeypatch) -> None:
    """Warm-up calls run the variant's code too: their sub-ranges must not be recorded."""
    from workflows import nvtx_ranges
    pushed: list[str] = []
    monkeypatch.setattr(nvtx_ranges, "push_pop",
                        lambda: (pushed.append, lambda: pushed.append("pop")))
    with nvtx_ranges.nvtx_range("fwd"):
        pass
    assert pushed == []
    with nvtx_ranges.timed_range("eager"), nvtx_ranges.nvtx_range("fwd"):
        pass
    assert pushed == ["eager", "fwd", "pop", "pop"]
    with nvtx_ranges.nvtx_range("bwd"):
        pass
    assert pushed == ["eager", "fwd", "pop", "pop"]


def test_ranks_under_torchrun_one_export_each(monkeypatch, fake_tools, tmp_path: Path) -> None:
    """make systems WORKLOAD=ddp_step NPROC=2: torchrun starts nsys per rank, each writes
    rank<k>.nsys-rep and its runner rank<k>/meta.json; latest moves once all are there."""
    _mocked(monkeypatch, fake_tools)
    assert nsys.main(["ddp_step", "--nproc", "2", "--straggler", "1", "--runs",
                      str(tmp_path)]) == 0
    prof = fake_tools.calls[0]
    assert prof[1:5] == ["-m", "torch.distributed.run", "--nproc-per-node=2", "--no-python"]
    assert prof[5].endswith("nsys") and prof[6] == "profile"
    assert any(a.endswith("rank%q{RANK}") for a in prof)
    assert prof[-2:] == ["--straggler", "1"] and "workflows.runner" in " ".join(prof)
    assert [c[1] for c in fake_tools.calls[1:]] == ["export", "export"]
    latest = tmp_path / "ddp_step" / "latest"
    assert (latest / "rank1.sqlite").is_file() and (latest / "rank1" / "meta.json").is_file()


def test_ddp_step_trains_alone_on_the_cpu() -> None:
    pytest.importorskip("torch")
    pytest.importorskip("nvtx")
    w = registry.REGISTRY["ddp_step"]
    x, m = w.make_inputs(w.shapes("small"), w.dtype, "cpu")
    step = w.variants["ddp"]()
    losses = [float(step(x, m)) for _ in range(3)]
    assert losses[-1] < losses[0]


def test_runner_writes_per_rank_under_torchrun(monkeypatch, tmp_path: Path) -> None:
    from workflows import runner
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    assert runner.rank_out(tmp_path) == tmp_path / "rank1"
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert runner.rank_out(tmp_path) == tmp_path


def test_train_step_models_share_one_class() -> None:
    """Each train_step variant builds its own model; all are one class, so torch.compile's
    type guard holds across variants (a class made per model recompiled on the H200)."""
    torch = pytest.importorskip("torch")
    from workflows import workloads
    a, b = workloads._block(32, 4), workloads._block(32, 4)
    assert type(a) is type(b) and "<locals>" not in type(a).__qualname__
    assert a(torch.randn(2, 4, 32)).shape == (2, 4, 32)
