"""common/forks.py: beside(fn) gives fn()'s value whether it forks or not, raises fn()'s
error in the parent, and survives a child that dies."""

from __future__ import annotations

import os

import numpy as np
import pytest

from analysis.common import forks

needs_fork = pytest.mark.skipif(not forks.can_fork(), reason="no fork or one core")


def _frame_sum(values: np.ndarray) -> float:
    return float(values.sum())


@needs_fork
def test_value_from_the_child_over_the_parents_memory():
    values = np.arange(1_000_000, dtype=np.float64)
    with forks.beside(lambda: (_frame_sum(values), os.getpid())) as job:
        assert job.pid != 0
        total, pid = job.result()
    assert total == _frame_sum(values)
    assert pid != os.getpid()                 # computed in the child
    assert job.pid == 0                       # reaped


@needs_fork
def test_child_writes_files_of_its_own(tmp_path):
    def write() -> int:
        (tmp_path / "a.txt").write_text("from the child")
        return 7
    with forks.beside(write) as job:
        assert job.result() == 7
    assert (tmp_path / "a.txt").read_text() == "from the child"


def test_error_raised_in_the_parent():
    def fail() -> int:
        raise ValueError("bad input")
    with forks.beside(fail) as job, pytest.raises(ValueError, match="bad input"):
        job.result()


@needs_fork
def test_child_that_dies_is_computed_again_here():
    parent = os.getpid()

    def die_in_child() -> int:
        if os.getpid() != parent:
            os._exit(3)
        return 11
    with forks.beside(die_in_child) as job:
        assert job.pid != 0
        assert job.result() == 11


def test_off_by_setting_computes_in_the_parent(monkeypatch):
    monkeypatch.setenv("ANALYSIS_FORKS", "0")
    assert not forks.can_fork()
    with forks.beside(os.getpid) as job:
        assert job.pid == 0
        assert job.result() == os.getpid()


def test_no_fork_while_another_thread_runs():
    import threading
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        assert not forks.can_fork()
    finally:
        stop.set()
        other.join()


@needs_fork
def test_close_without_result_reaps_the_child():
    job = forks.beside(lambda: b"x" * 1_000_000)
    pid = job.pid
    job.close()
    assert job.pid == 0 and job.fd == -1
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, 0)


def test_result_computed_once():
    calls = []
    with forks.beside(lambda: calls.append(1) or len(calls)) as job:
        first = job.result()
        assert job.result() == first
