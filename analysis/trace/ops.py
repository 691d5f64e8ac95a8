"""PyTorch's own op ranges (`torch.autograd.profiler.emit_nvtx`) as one row per op.

Under emit_nvtx every op opens an NVTX range named like
`aten::linear, seq = 474, op_id = 11, sizes = [[...]], input_op_ids = [...]`, and every
backward node one like `AddmmBackward0, seq = 506, op_id = 9, ...` on the autograd thread.
The `seq`, `op_id`, `sizes` and `input_op_ids` parts make almost every name unique, so
range by range the trace says little. Here the names are stripped to the op
(`aten::linear`, `AddmmBackward0`), kernels are counted per op the way ranges count them
(inclusive: a kernel counts in every enclosing op range, once per op name), and each
backward op is linked to the forward op that recorded the same `seq` (the outermost
forward op range carrying it), so a forward row also carries the GPU time its backward
cost. The `autograd::engine::evaluate_function: ...` wrappers around backward nodes are
left out (their node's own range holds the same kernels).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from ..common.emit_nvtx import OP_ID, SEQ, WRAPPER
from ..common.frames import aggregate
from ..documents.types import OpRow
from .ranges import plain_names

if TYPE_CHECKING:
    from .types import Trace

_SEQ = re.compile(re.escape(SEQ) + r"(\d+)")
_BACKWARD = re.compile(r"Backward\d*$")


def op_ranges(ranges: pd.DataFrame, named: pd.DataFrame | None = None) -> pd.DataFrame:
    """Range instances (rows of the keyed ranges) that are emit_nvtx op ranges: range, op,
    seq (or -1), backward (the op runs in backward: a backward node, or an op inside one),
    node (a backward node itself, `XBackward0`: the range the forward op's seq links to).
    `named`: the ops and seqs the loader read in SQL, row for row (NsysExport.op_names);
    else the names are read here."""
    if named is not None and len(named) == len(ranges):
        seq_of = named["seq"].to_numpy(dtype="int64")
        rows = np.flatnonzero(seq_of >= -1).tolist()      # -2: no op range, or a wrapper
        ops = named["op"].to_numpy(dtype=object)[rows].tolist()
        seqs = seq_of[rows].tolist()
    else:
        rows, ops, seqs = _read_names(plain_names(ranges["name"]))
    if not rows:
        return pd.DataFrame(columns=["range", "op", "seq", "backward", "node"])
    is_node = {o: bool(_BACKWARD.search(o)) for o in set(ops)}     # a few hundred names
    node = np.array([is_node[o] for o in ops], dtype=bool)
    paths = ranges["path"].to_numpy(dtype=object)[rows].tolist()
    inside = np.array([WRAPPER in p for p in paths], dtype=bool)
    return pd.DataFrame({"range": np.array(rows, dtype="int64"),
                         "op": pd.Series(ops, dtype=object),
                         "seq": np.array(seqs, dtype="int64"),
                         "backward": node | inside, "node": node})


def _read_names(names: list[str]) -> tuple[list[int], list[str], list[int]]:
    """The op ranges' rows, ops and seqs, read from the names in Python (where the loader
    did not read them)."""
    rows, ops, seqs = [], [], []
    for i, name in enumerate(names):              # plain string work: 100k+ names
        if OP_ID not in name:
            continue
        op = name[:name.find(",")]               # there is a comma: ", op_id = "
        if op.startswith(WRAPPER):
            continue
        m = _SEQ.search(name) if SEQ in name else None
        rows.append(i)
        ops.append(op)
        seqs.append(int(m.group(1)) if m else -1)
    return rows, ops, seqs


def _per_instance(trace: Trace, ops: pd.DataFrame) -> pd.DataFrame:
    """Kernels launched inside each op range instance (own thread, inclusive; nested
    same-name ops count a kernel once), as the attribution pass counted them."""
    per = trace.op_counts.set_index("range")[["kernel_count", "kernel_time_ns"]] \
        if len(trace.op_counts) else pd.DataFrame(columns=["kernel_count", "kernel_time_ns"])
    return ops.join(per, on="range").fillna({"kernel_count": 0, "kernel_time_ns": 0})


def _forward_of_seq(trace: Trace, ops: pd.DataFrame) -> pd.Series:
    """seq -> the forward op that recorded it (its outermost range: earliest start)."""
    fwd = ops[~ops["backward"] & (ops["seq"] >= 0)]
    starts = trace.ranges["start_ns"].to_numpy()[fwd["range"].to_numpy(dtype="int64")]
    ends = trace.ranges["end_ns"].to_numpy()[fwd["range"].to_numpy(dtype="int64")]
    fwd = fwd.assign(start=starts, neg_end=-ends).sort_values(["seq", "start", "neg_end"])
    return fwd.drop_duplicates("seq").set_index("seq")["op"]


def _most_common_forward(ops: pd.DataFrame) -> pd.Series:
    """Per (op, backward): the forward op its instances link to most often (the first in
    sorted order on a tie, as Series.mode gives it), counted in one pass."""
    linked = ops[ops["forward_op"].notna()]
    counts = linked.groupby(["op", "backward", "forward_op"]).size().rename("n").reset_index()
    counts = counts.sort_values(["n", "forward_op"], ascending=[False, True], kind="stable")
    return counts.drop_duplicates(["op", "backward"]).set_index(["op", "backward"])[
        "forward_op"]


def op_table(trace: Trace) -> list[OpRow]:
    """One row per op name (forward rows first by forward + backward kernel time)."""
    ops = trace.op_ranges
    if ops.empty:
        return []
    ops = _per_instance(trace, ops)
    forward_of = _forward_of_seq(trace, ops)
    ops["forward_op"] = ops["seq"].map(forward_of).where(ops["node"], None)
    rows = aggregate(ops.groupby(["op", "backward"], sort=False), calls=("range", "size"),
                     kernel_count=("kernel_count", "sum"),
                     kernel_time_ns=("kernel_time_ns", "sum"))
    rows["forward_op"] = _most_common_forward(ops).reindex(rows.index)
    bwd = aggregate(ops[ops["node"] & ops["forward_op"].notna()].groupby("forward_op"),
                    backward_kernel_count=("kernel_count", "sum"),
                    backward_kernel_time_ns=("kernel_time_ns", "sum"))
    bwd.index = pd.MultiIndex.from_arrays([bwd.index, np.zeros(len(bwd), dtype=bool)],
                                          names=["op", "backward"])
    rows = rows.join(bwd).fillna({"backward_kernel_count": 0, "backward_kernel_time_ns": 0})
    rows["total"] = rows["kernel_time_ns"] + rows["backward_kernel_time_ns"]
    rows = rows.reset_index().sort_values(["backward", "total"], ascending=[True, False],
                                          kind="stable")
    return [OpRow(name=str(r.op), direction="backward" if r.backward else "forward",
                  calls=int(r.calls), kernel_count=int(r.kernel_count),
                  kernel_time_ns=int(r.kernel_time_ns),
                  backward_kernel_count=0 if r.backward else int(r.backward_kernel_count),
                  backward_kernel_time_ns=0 if r.backward else int(r.backward_kernel_time_ns),
                  forward_op=r.forward_op if r.backward and isinstance(r.forward_op, str)
                  else None)
            for r in rows.itertuples(index=False)]
