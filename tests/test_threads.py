"""Kernels other threads launched while a range was open (backward on the autograd
thread): listed per thread and kernel name in the range's entry, tagged with the thread
in its kernel table, summing to the thread's totals; never a finding."""

from __future__ import annotations

from pathlib import Path

from analysis.commands import systems
from analysis.load import nsys_sqlite
from analysis.render.markdown import kernels_section
from analysis.trace import runners

DATA = Path(__file__).parent / "data"


def _doc(name: str):
    path = DATA / name / "trace.sqlite"
    export = nsys_sqlite.load(path, ops=False)
    trace = runners.attribute_file(path, export, (), jobs=1)
    return systems.build(export, None, None, trace=trace)


def test_other_threads_kernels_by_name_sum_to_their_totals() -> None:
    doc = _doc("train_step")
    threads = [t for e in doc.ranges for t in e.other_threads]
    assert threads and all(t.kernels for t in threads)
    for t in threads:
        assert sum(k.count for k in t.kernels) == t.kernel_count
        assert sum(k.total_ns for k in t.kernels) == t.kernel_time_ns
        assert all(k.min_ns <= k.avg_ns <= k.max_ns for k in t.kernels)
        assert [k.total_ns for k in t.kernels] == sorted((k.total_ns for k in t.kernels),
                                                         reverse=True)
    assert not [f for f in doc.findings if f.rule == "other_thread_kernels"]


def test_the_range_kernel_table_tags_other_threads_kernels() -> None:
    doc = _doc("train_step")
    page = "\n".join(kernels_section(doc))
    backward = [line for line in page.splitlines() if r"| pt\_autograd\_0 |" in line]
    own = [line for line in page.splitlines() if "| own |" in line]
    assert backward and own
