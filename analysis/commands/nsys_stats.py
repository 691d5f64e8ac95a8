"""Read NVIDIA's `nsys stats` CSVs and line them up with our systems/2 entries.

Used by the tests and by analysis.commands.bench to check that both give the same numbers.

`nsys stats` names a range by its own text ("profkit:naive"; the default domain is
"default_domain" in 2023.4 and ":default_domain" in 2025.3) and merges same-named ranges
wherever they nest, so our entries are summed by (domain, leaf name) before comparing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ..common.names import APART_TAGS, DETECTED
from ..documents.types import SystemsDoc

REPORTS = ("nvtx_kern_sum:base", "nvtx_gpu_proj_sum", "nvtx_sum", "cuda_gpu_kern_sum:base",
           "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum")
"""The `nsys stats` reports whose numbers a systems/2 document gives: kernels per range,
GPU span per range, wall time per range, the whole-trace kernel table, memory copies."""


def csv_of(base: Path | str, report: str) -> Path:
    """The CSV `nsys stats --report REPORT --format csv --output BASE` writes."""
    return Path(f"{base}_{report.replace(':', '_')}.csv")


def label(domain: str | None, path: str) -> str:
    """`nsys stats`' name of a range entry (its instances that compiled, set apart by the
    analysis, are the same range there)."""
    leaf = path.split("/")[-1]
    for part in APART_TAGS:
        leaf = leaf.removesuffix(part)
    return f"{domain}:{leaf}" if domain else leaf


def kern_sum(csv: Path) -> pd.DataFrame:
    """nvtx_kern_sum:base rows in ranges, summed over PID/TID, keyed (range, kernel)."""
    df = pd.read_csv(csv).dropna(subset=["NVTX Range"])
    df["NVTX Range"] = df["NVTX Range"].str.lstrip(":")
    return df.groupby(["NVTX Range", "Kernel Name"]).agg(
        count=("Kern Inst", "sum"), total_ns=("Total Time (ns)", "sum"),
        min_ns=("Min (ns)", "min"), max_ns=("Max (ns)", "max")).sort_index()


def proj_sum(csv: Path) -> pd.DataFrame:
    """nvtx_gpu_proj_sum keyed by range name: total projected time and instances."""
    df = pd.read_csv(csv)
    df["Range"] = df["Range"].str.lstrip(":")
    return df.groupby("Range").agg(gpu_span_ns=("Total Proj Time (ns)", "sum"),
                                   instances=("Range Instances", "sum")).sort_index()


def nvtx_sum(csv: Path) -> pd.DataFrame:
    """nvtx_sum keyed by range name: total wall time and instances (push/pop and start/end
    ranges alike)."""
    df = pd.read_csv(csv)
    df["Range"] = df["Range"].str.lstrip(":")
    return df.groupby("Range").agg(wall_ns=("Total Time (ns)", "sum"),
                                   wall_instances=("Instances", "sum")).sort_index()


def nvtx_entries(doc: SystemsDoc) -> list:
    """The document's entries of NVTX ranges: every one but the detected steps a script
    without ranges is given (loops/detected.py), which nsys stats does not know."""
    return [e for e in doc.ranges
            if not (e.domain is None and e.name.rsplit("/", 1)[-1] == DETECTED)]


def ours_wall(doc: SystemsDoc) -> pd.DataFrame:
    rows = [(label(e.domain, e.name), e.wall_ns, e.wall_instances)
            for e in nvtx_entries(doc)]
    df = pd.DataFrame(rows, columns=["Range", "wall_ns", "wall_instances"])
    return df.groupby("Range").agg(wall_ns=("wall_ns", "sum"),
                                   wall_instances=("wall_instances", "sum")).sort_index()


def mem_sums(time_csv: Path, size_csv: Path) -> pd.DataFrame:
    """cuda_gpu_mem_time_sum and cuda_gpu_mem_size_sum keyed by operation: count, total
    time, total MB (as printed: 3 decimals)."""
    if not time_csv.stat().st_size:           # a trace without copies: nsys writes nothing
        return pd.DataFrame({"count": [], "total_ns": [], "total_mb": []},
                            index=pd.Index([], name="Operation"))
    t = pd.read_csv(time_csv).set_index("Operation")
    m = pd.read_csv(size_csv).set_index("Operation")
    return pd.DataFrame({"count": t["Count"], "total_ns": t["Total Time (ns)"],
                         "total_mb": m["Total (MB)"].round(3)}).sort_index()


def ours_mem(doc: SystemsDoc) -> pd.DataFrame:
    rows = [(c.name, c.count, c.total_ns, c.bytes) for c in doc.copies]
    df = pd.DataFrame(rows, columns=["Operation", "count", "total_ns", "bytes"])
    out = df.groupby("Operation").agg(count=("count", "sum"), total_ns=("total_ns", "sum"),
                                      total_mb=("bytes", "sum"))
    out["total_mb"] = (out["total_mb"] + 500) // 1000 / 1000     # half up, as nsys prints
    return out.sort_index()


def _inside_namesake(path: str) -> bool:
    """Whether a range path's leaf runs inside an enclosing range of the same name
    (`step/step`): nvtx_kern_sum counts such a kernel once per range name (its `Kern
    Inst`), but adds its time once per range instance around it (`Total Time`)."""
    parts = [label(None, p) for p in path.split("/")]
    return parts[-1] in parts[:-1]


def _kern_rows(doc: SystemsDoc, pid: bool) -> pd.DataFrame:
    """Per range entry and kernel: its label, the kernel, count (0 for an entry inside a
    namesake: its kernels are counted in the outer one), total, min, max."""
    rows = [((e.pid,) if pid else ()) + (label(e.domain, e.name), k.name,
                                         0 if _inside_namesake(e.name) else k.count,
                                         k.total_ns, k.min_ns, k.max_ns)
            for e in nvtx_entries(doc) for k in e.kernels]
    keys = (["PID"] if pid else []) + ["NVTX Range", "Kernel Name"]
    df = pd.DataFrame(rows, columns=keys + ["count", "total_ns", "min_ns", "max_ns"])
    return df.groupby(keys).agg(
        count=("count", "sum"), total_ns=("total_ns", "sum"), min_ns=("min_ns", "min"),
        max_ns=("max_ns", "max")).sort_index()


def ours_kern(doc: SystemsDoc) -> pd.DataFrame:
    return _kern_rows(doc, pid=False)


def ours_proj(doc: SystemsDoc) -> pd.DataFrame:
    rows = [(label(e.domain, e.name), e.gpu_span_ns, e.instances)
            for e in nvtx_entries(doc) if e.instances]   # those with GPU work, as nsys
    df = pd.DataFrame(rows, columns=["Range", "gpu_span_ns", "instances"])
    return df.groupby("Range").agg(gpu_span_ns=("gpu_span_ns", "sum"),
                                   instances=("instances", "sum")).sort_index()


def kern_summary(csv: Path) -> pd.DataFrame:
    """cuda_gpu_kern_sum:base keyed by kernel name: count, total, min, max ns."""
    ref = pd.read_csv(csv)
    return ref.groupby("Name").agg(count=("Instances", "sum"),
                                   total_ns=("Total Time (ns)", "sum"),
                                   min_ns=("Min (ns)", "min"), max_ns=("Max (ns)", "max"))


def ours_kern_summary(doc: SystemsDoc) -> pd.DataFrame:
    return pd.DataFrame([(k.name, k.count, k.total_ns, k.min_ns, k.max_ns)
                         for k in doc.kernel_summary],
                        columns=["Name", "count", "total_ns", "min_ns", "max_ns"]
                        ).set_index("Name").sort_index()


def mismatches(doc: SystemsDoc, base: Path | str, reports: tuple[str, ...] = REPORTS
               ) -> list[str]:
    """Differences between a systems/2 document and the `reports` (of REPORTS) nsys stats
    wrote with `--output BASE` (empty: the same numbers)."""
    pairs = {"nvtx_kern_sum:base": lambda: (ours_kern(doc), kern_sum(csv_of(base, r))),
             "nvtx_gpu_proj_sum": lambda: (ours_proj(doc), proj_sum(csv_of(base, r))),
             "nvtx_sum": lambda: (ours_wall(doc), nvtx_sum(csv_of(base, r))),
             "cuda_gpu_kern_sum:base": lambda: (ours_kern_summary(doc),
                                                kern_summary(csv_of(base, r))),
             "cuda_gpu_mem_time_sum": lambda: (ours_mem(doc), mem_sums(
                 csv_of(base, r), csv_of(base, "cuda_gpu_mem_size_sum")))}
    out = []
    for r in reports:
        if r not in pairs:            # cuda_gpu_mem_size_sum: read with the time report
            continue
        ours, ref = pairs[r]()
        joined = ours.merge(ref, how="outer", left_index=True, right_index=True,
                            suffixes=("_ours", "_nsys"))
        for col in ref.columns:
            bad = joined[joined[f"{col}_ours"] != joined[f"{col}_nsys"]]
            out += [f"{r} {idx} {col}: ours {row[f'{col}_ours']} nsys {row[f'{col}_nsys']}"
                    for idx, row in bad.iterrows()]
    return out


def kern_sum_by_pid(csv: Path) -> pd.DataFrame:
    """nvtx_kern_sum:base rows in ranges keyed (PID, range, kernel): processes apart."""
    df = pd.read_csv(csv).dropna(subset=["NVTX Range"])
    df["NVTX Range"] = df["NVTX Range"].str.lstrip(":")
    return df.groupby(["PID", "NVTX Range", "Kernel Name"]).agg(
        count=("Kern Inst", "sum"), total_ns=("Total Time (ns)", "sum"),
        min_ns=("Min (ns)", "min"), max_ns=("Max (ns)", "max")).sort_index()


def ours_kern_by_pid(doc: SystemsDoc) -> pd.DataFrame:
    return _kern_rows(doc, pid=True)
