"""Loader for Nsight Compute raw CSV exports (`ncu --import X.ncu-rep --csv --page raw`).

`load(path) -> NcuData`. The raw page has one header row, one row of units, then one row
per profiled kernel launch. Every metric is normalized to base units whichever way the
file was exported (default units such as `us`, `Mbyte`, `Gbyte/s`, or
`--print-units base`): times in ns, sizes in bytes, rates in bytes/s (or hz), percentages
as they are; thousands separators are removed.

`NcuData.kernels` columns (one row per launch, in launch order):
  id, gpu (device name), range (NVTX push/pop path outer->inner joined by "/", "" when
  none), domain (None for the default domain), name (kernel name as ncu prints it), duration_ns,
  dram_read_bytes, dram_write_bytes, dram_bytes_per_s, dram_throughput_pct, sm_sol_pct,
  mem_sol_pct, achieved_occupancy_pct, theoretical_occupancy_pct, registers_per_thread,
  block_size, grid_size, waves_per_sm, tensor_pipe_pct, dram_peak_Bps (peak DRAM bytes
  per cycle x DRAM clock), sm_count, limit_registers, limit_shared_mem, limit_warps,
  limit_blocks (occupancy limits, blocks per SM)
`NcuData.metrics` holds every metric column in base units; `units` their base units;
`missing` the optional metrics the file lacks (those columns are NaN; the report marks
them not collected and names the flags that collect them, `collect_flags`). Only the
duration is required: Nsight Compute's default section set, for one, has no
`dram__bytes_*`.
"""

from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..common.errors import InputError

NVTX_PUSHPOP = "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg"
DEFAULT_DOMAIN = "<default domain>"

REQUIRED = {
    "duration_ns": ["gpu__time_duration.sum"],
}
OPTIONAL = {
    "dram_read_bytes": ["dram__bytes_read.sum"],
    "dram_write_bytes": ["dram__bytes_write.sum"],
    "sm_sol_pct": ["sm__throughput.avg.pct_of_peak_sustained_elapsed"],
    "mem_sol_pct": ["gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"],
    "block_size": ["launch__block_size"],
    "grid_size": ["launch__grid_size"],
    "dram_bytes_per_s": ["dram__bytes.sum.per_second"],
    "dram_throughput_pct": ["gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed",
                            "dram__throughput.avg.pct_of_peak_sustained_elapsed"],
    "achieved_occupancy_pct": ["sm__warps_active.avg.pct_of_peak_sustained_active"],
    "theoretical_occupancy_pct": ["sm__maximum_warps_per_active_cycle_pct"],
    "registers_per_thread": ["launch__registers_per_thread"],
    "waves_per_sm": ["launch__waves_per_multiprocessor"],
    "tensor_pipe_pct": ["sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"],
    "dram_peak_bytes_per_cycle": ["dram__bytes.sum.peak_sustained"],
    "dram_cycles_per_s": ["dram__cycles_elapsed.avg.per_second"],
    "sm_count": ["device__attribute_multiprocessor_count"],
    "limit_registers": ["launch__occupancy_limit_registers"],
    "limit_shared_mem": ["launch__occupancy_limit_shared_mem"],
    "limit_warps": ["launch__occupancy_limit_warps"],
    "limit_blocks": ["launch__occupancy_limit_blocks"],
}
COLLECTED_BY = {
    "dram__bytes_read.sum": "--metrics dram__bytes_read.sum,dram__bytes_write.sum",
    "dram__bytes_write.sum": "--metrics dram__bytes_read.sum,dram__bytes_write.sum",
    "dram__bytes.sum.per_second": "--section MemoryWorkloadAnalysis",
    "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed":
        "--section ComputeWorkloadAnalysis",
    "dram__bytes.sum.peak_sustained": "--section SpeedOfLight_RooflineChart",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "--section SpeedOfLight",
    "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "--section SpeedOfLight",
    "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": "--section SpeedOfLight",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "--section Occupancy",
    "sm__maximum_warps_per_active_cycle_pct": "--section Occupancy",
    "launch__occupancy_limit_registers": "--section Occupancy",
    "launch__occupancy_limit_shared_mem": "--section Occupancy",
    "launch__occupancy_limit_warps": "--section Occupancy",
    "launch__occupancy_limit_blocks": "--section Occupancy",
    "launch__waves_per_multiprocessor": "--metrics launch__waves_per_multiprocessor",
}
"""The ncu flag that collects each optional metric (default: the LaunchStats section)."""


def collect_flags(missing: list[str]) -> list[str]:
    """The distinct `--section` / `--metrics` flags that would collect `missing` metrics."""
    return list(dict.fromkeys(COLLECTED_BY.get(m, "--section LaunchStats") for m in missing))


# numerator unit -> (base unit, factor); denominator unit -> (base unit, factor)
_NUM = {**{u: ("ns", f) for u, f in [("ns", 1), ("nsecond", 1), ("us", 1e3), ("usecond", 1e3),
                                      ("ms", 1e6), ("msecond", 1e6), ("s", 1e9),
                                      ("second", 1e9)]},
        **{u: ("byte", f) for u, f in [("byte", 1), ("Kbyte", 1e3), ("Mbyte", 1e6),
                                        ("Gbyte", 1e9), ("Tbyte", 1e12), ("Pbyte", 1e15)]},
        **{u: ("hz", f) for u, f in [("hz", 1), ("Khz", 1e3), ("Mhz", 1e6), ("Ghz", 1e9)]}}
_DEN = {**{u: ("s", f) for u, f in [("s", 1), ("second", 1), ("ms", 1e-3), ("msecond", 1e-3),
                                     ("us", 1e-6), ("usecond", 1e-6), ("ns", 1e-9),
                                     ("nsecond", 1e-9)]},
        **{u: ("byte", f) for u, f in [("byte", 1), ("Kbyte", 1e3), ("Mbyte", 1e6),
                                        ("Gbyte", 1e9)]}}
_RANGE = re.compile(r"^(?P<domain>.*?):(?P<name>.*):[^:]*:[^:]*:[^:]*:[^:]*:[^:]*:(?P=name)$")


@dataclass
class NcuData:
    path: Path
    kernels: pd.DataFrame
    metrics: pd.DataFrame
    units: dict[str, str]
    missing: list[str] = field(default_factory=list)


def unit_scale(unit: str) -> tuple[str, float]:
    """(base unit, factor) for an ncu unit string: value_in_base = value * factor."""
    unit = unit.strip()
    if "/" in unit:
        num, den = unit.split("/", 1)
    else:
        num, den = unit, ""
    n_base, n_f = _NUM.get(num, (num, 1.0))
    d_base, d_f = _DEN.get(den, (den, 1.0)) if den else ("", 1.0)
    return (f"{n_base}/{d_base}" if den else n_base), n_f / d_f


def parse_number(text: str) -> float:
    """A metric cell as float: thousands separators dropped; 'n/a' and the like -> NaN."""
    s = text.strip().replace(",", "")
    try:
        return float(s)
    except ValueError:
        return float("nan")


def parse_nvtx(cell: str) -> tuple[str, str | None]:
    """(path, domain) from the push/pop NVTX column: `TID "d:a:..." "d:b:..."` -> a/b."""
    names, domain = [], None
    for token in re.findall(r'"([^"]*)"', cell or ""):
        m = _RANGE.match(token)
        dom, name = (m["domain"], m["name"]) if m else (token.split(":")[0],
                                                         ":".join(token.split(":")[1:2]))
        names.append(name)
        domain = None if dom in ("", DEFAULT_DOMAIN) else dom
    return "/".join(names), domain


def _read_rows(path: Path) -> list[list[str]]:
    if not path.is_file():
        raise InputError(f"{path}: no such file" if not path.exists() else
                         f"{path}: is a directory, not an ncu CSV export")
    data = path.read_bytes()
    if b"\x00" in data[:4096]:
        raise InputError(f"{path}: binary data; export the report with "
                         "`ncu --import X.ncu-rep --csv --page raw`")
    text = data.decode("utf-8", errors="replace")
    lines = [ln for ln in text.splitlines() if not ln.startswith("==")]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows or "ID" not in rows[0] or "Kernel Name" not in rows[0]:
        raise InputError(f"{path}: not an ncu raw CSV (no 'ID' and 'Kernel Name' header); "
                         "export with `ncu --import X.ncu-rep --csv --page raw`")
    if len(rows) < 3:
        raise InputError(f"{path}: the export holds no profiled kernel (header only)")
    return rows


def _pick(metrics: pd.DataFrame, names: list[str]) -> pd.Series | None:
    for name in names:
        if name in metrics:
            return metrics[name]
    return None


def load(path: str | Path) -> NcuData:
    """Read one raw CSV; InputError naming the file when it cannot be used."""
    path = Path(path)
    rows = _read_rows(path)
    header, units, body = rows[0], rows[1], [r for r in rows[2:] if len(r) == len(rows[0])]
    if not body:
        raise InputError(f"{path}: no complete kernel rows (truncated export?)")
    frame = pd.DataFrame(body, columns=header)
    metric_cols = [c for c in header if "__" in c]
    base_units, values = {}, {}
    for col, unit in zip(header, units, strict=True):
        if col in metric_cols:
            base, factor = unit_scale(unit)
            base_units[col] = base
            values[col] = frame[col].map(parse_number) * factor
    metrics = pd.DataFrame(values)
    missing_req = [n[0] for n in REQUIRED.values() if _pick(metrics, n) is None]
    if missing_req:
        raise InputError(f"{path}: no kernel duration ({', '.join(missing_req)}); profile "
                         "with ncu's default sections or --section SpeedOfLight")
    kernels = pd.DataFrame({"id": frame["ID"].map(parse_number).astype("int64"),
                            "name": frame["Kernel Name"]})
    nvtx = frame[NVTX_PUSHPOP] if NVTX_PUSHPOP in frame else pd.Series([""] * len(frame))
    parsed = [parse_nvtx(c) for c in nvtx]
    gpu_col = "device__attribute_display_name"
    kernels["gpu"] = frame[gpu_col] if gpu_col in frame else None
    kernels["range"] = [p for p, _ in parsed]
    kernels["domain"] = [d for _, d in parsed]
    missing = []
    for col, names in {**REQUIRED, **OPTIONAL}.items():
        series = _pick(metrics, names)
        if series is None:
            missing.append(names[0])
        kernels[col] = series.to_numpy() if series is not None else np.nan
    kernels["dram_peak_Bps"] = kernels.pop("dram_peak_bytes_per_cycle") * kernels.pop(
        "dram_cycles_per_s")
    return NcuData(path=path, kernels=kernels, metrics=metrics, units=base_units,
                   missing=missing)
