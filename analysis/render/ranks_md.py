"""Markdown of the cross-rank report (ranks/1): ranks side by side, then findings."""

from __future__ import annotations

from ..documents import RanksDoc
from .markdown import findings_section, pct, reflow, table, us


def render_ranks(doc: RanksDoc, folders: dict[int, str]) -> str:
    """ranks.md: per rank its step, compute, communication and busy time."""
    body = [[f"[rank {r.rank}]({folders[r.rank]}/README.md)" if r.rank in folders
             else f"rank {r.rank}", str(r.steps), us(r.step_ns), us(r.compute_kernel_ns),
             us(r.nccl_kernel_ns), us(r.exposed_comm_ns), pct(r.busy_pct),
             us(r.nccl_kernel_total_ns)] for r in doc.ranks]
    lines = ["# Ranks side by side", "",
             "Per step (means over each rank's step range instances): wall time, compute "
             "kernels and NCCL kernels that started inside the steps, exposed "
             "communication (NCCL kernel time with no compute kernel beside it on the "
             "GPU), and the share of the step any GPU operation of the process ran. "
             f"Step time skew across ranks: {us(doc.skew_ns)}.", ""]
    lines += table(["rank", "steps", "step", "compute kernels", "NCCL kernels",
                    "exposed comm", "GPU busy", "NCCL, whole export"], body, "lrrrrrrr")
    lines += [""] + findings_section(doc.findings, "ranks.json")
    return "\n".join(reflow(lines)).rstrip() + "\n"
