"""Waits for the GIL, and the other threads that hold a step, named.

CPython hands the GIL from thread to thread: a thread that wants it waits in
`pthread_cond_timedwait` (take_gil, the switch interval at a time) while the holder runs
the interpreter. Nsight Systems' Python sampling samples the main thread only, so the
holder is seen in the CPU samples (`--sample=process-tree`): a sample of another thread of
the process whose leaf frame is in the interpreter (python3.x, libpython3.x). An OS wait
of GIL_WAITS on the step's range thread during which (give or take SAMPLE_SLACK_NS) such
a sample falls is a GIL wait:
its node is filed under "gil" on the critical path (replay.CATEGORIES), and the thread
that ran the interpreter most during it is its holder. Without CPU samples the waits stay
OS calls.

Other threads on a critical path are named by what the export calls them (ThreadNames:
PyTorch's autograd thread is `pt_autograd_0`), else by their thread id, and by the user's
line that started them where the Python samples show it (thread_starts). Nsight Systems'
Python samples hold the stacks of the thread that runs the script only, so another
thread's own line is not in the export; the line of its `threading.Thread.start` is: the
main thread's sample inside `start` (which waits for the new thread to run) nearest
before the thread's first CPU sample.
"""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pandas as pd

from ..load.nsys_pysamples import PySamples
from ..load.nsys_sqlite import PID_MASK
from ..trace.pylines import shown, user_frame
from .graph import Graph

GIL_WAITS = ("pthread_cond_timedwait", "pthread_cond_clockwait")
"""The OS calls CPython's take_gil waits in."""
INTERPRETER = re.compile(r"^(lib)?python\d")
"""A CPU sample's leaf module that is the Python interpreter."""
SAMPLE_SLACK_NS = 2_000_000
"""How far before or after a wait an interpreter sample of another thread still counts:
a sample every millisecond or so (nsys's CPU sampling) misses many a short handoff."""


def interpreter_samples(samples: pd.DataFrame) -> pd.DataFrame:
    """The CPU samples (load/nsys_samples.py) that ran the interpreter, by time:
    global_tid, time_ns."""
    if samples is None or not len(samples):
        return pd.DataFrame({"global_tid": pd.Series(dtype="int64"),
                             "time_ns": pd.Series(dtype="int64")})
    mine = samples[samples["module"].astype(str).str.match(INTERPRETER.pattern).to_numpy()]
    return mine[["global_tid", "time_ns"]].astype("int64").sort_values(
        "time_ns", kind="stable").reset_index(drop=True)


def mark_gil(g: Graph, running: pd.DataFrame) -> None:
    """File the range thread's GIL waits under "gil" (see the module doc); each one's
    holder in g.cache["gil_holder"] (node -> global tid)."""
    if not len(running) or not len(g.osrt):
        return
    names = g.osrt["name"].astype(str).to_numpy()
    waits = np.flatnonzero(np.isin(names, GIL_WAITS)) + len(g.calls) + len(g.ops)
    waits = waits[g.thread[waits] == g.tid]
    if not len(waits):
        return
    pid = g.tid & int(PID_MASK)
    tids = running["global_tid"].to_numpy()
    times = running["time_ns"].to_numpy()
    other = ((tids & int(PID_MASK)) == pid) & (tids != g.tid)
    tids, times = tids[other], times[other]
    a = np.searchsorted(times, g.start[waits] - SAMPLE_SLACK_NS, side="left")
    b = np.searchsorted(times, g.end[waits] + SAMPLE_SLACK_NS, side="right")
    holders = g.cache.setdefault("gil_holder", {})
    for node, i, j in zip(waits.tolist(), a.tolist(), b.tolist(), strict=True):
        if j > i:
            g.label[node] = "gil"
            holders[node] = Counter(tids[i:j].tolist()).most_common(1)[0][0]


START_WINDOW_NS = 50_000_000
"""How long before a thread's first CPU sample the sample of the `Thread.start` that made
it may fall (the start waits for the new thread to run: a few ms on the H200 capture)."""


def thread_starts(py: PySamples, samples: pd.DataFrame | None, tids: set[int],
                  cwd: str | None = None) -> dict[int, str]:
    """global tid -> `file:line in function`, the user's line that started the thread
    (see the module doc), for those of `tids` the samples show it for."""
    if not len(py) or samples is None or not len(samples) or not tids:
        return {}
    starting = np.array([any(f[1] == "start" and f[0].endswith("threading.py")
                             for f in stack) for stack in py.stacks], dtype=bool)
    s = py.samples
    at = starting[s["stack"].to_numpy(dtype="int64")]
    times = s["time_ns"].to_numpy(dtype="int64")[at]
    stacks = s["stack"].to_numpy(dtype="int64")[at]
    pids = s["global_tid"].to_numpy(dtype="int64")[at] & int(PID_MASK)
    first = samples.groupby("global_tid")["time_ns"].min()
    out = {}
    for tid in sorted(tids):
        if tid not in first.index:
            continue
        t0 = int(first[tid])
        mine = np.flatnonzero((pids == (tid & int(PID_MASK))) & (times <= t0)
                              & (times >= t0 - START_WINDOW_NS))
        if not len(mine):
            continue
        stack = py.stacks[int(stacks[mine[np.argmax(times[mine])]])]
        user = user_frame(stack)
        if user is not None:
            file, function, line = stack[user]
            out[tid] = f"{shown(file, cwd)}:{line} in {function}"
    return out


def thread_label(tid: int, names: dict[int, str], starts: dict[int, str] | None = None
                 ) -> str:
    """A thread as a page names it: its name in the export, else its thread id; where it
    was started (thread_starts) when known."""
    name = names.get(int(tid))
    started = (starts or {}).get(int(tid))
    said = f"thread {int(tid) & 0xFFFFFF}" + (f", started at {started}" if started else "")
    return f"{name} ({said})" if name else said
