"""Markdown escaping (checked with a CommonMark+tables parser) and the TORCH_LOGS parser."""

from __future__ import annotations

from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from analysis.load import torch_logs
from analysis.render.markdown import esc, render_systems, table
from tests.conftest import DATA
from tests.shared_docs import analyzed

NASTY = "void cutlass::Kernel<Gemm<half_t, 128>|*ptr&, `x`>(Params)"


def _tables(md: str) -> list[list[list[str]]]:
    """Each table as rows of cell texts, parsed the GitHub way (tables on)."""
    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    out, rows, cells, inside = [], [], None, False
    for t in tokens:
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            cells = []
        elif t.type in ("th_open", "td_open"):
            inside = True
        elif t.type == "inline" and inside:
            cells.append(t.content)
        elif t.type in ("th_close", "td_close"):
            inside = False
        elif t.type == "tr_close":
            rows.append(cells)
        elif t.type == "table_close":
            out.append(rows)
    return out


def _rendered_text(md: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(md)


def test_cxx_names_survive_in_tables() -> None:
    md = "\n".join(table(["kernel", "n"], [[esc(NASTY), "1"]]))
    (rows,) = _tables(md)
    assert [len(r) for r in rows] == [2, 2]
    html = _rendered_text(md)
    assert "cutlass::Kernel&lt;Gemm&lt;half_t, 128&gt;|*ptr&amp;, `x`&gt;(Params)" in html


def test_real_report_tables_are_consistent() -> None:
    doc = analyzed("edge/trace")
    doc.ranges[0].kernels[0].name = NASTY
    md = render_systems(doc)
    tables = _tables(md)
    assert len(tables) >= 3
    for rows in tables:
        assert len({len(r) for r in rows}) == 1
    assert "Kernel (Gemm)" in _rendered_text(md)          # its label; whole in the JSON


def test_torch_logs_modern_and_old_forms() -> None:
    text = """V1129 10:00:00 symbolic_convert.py:1] [0/0] [__graph_breaks] Graph break in user code at /w/model.py:12
Graph Break Reason: Data-dependent branching
  Explanation: ...
Graph break (user stack suppressed due to duplicate graph break) in user code at /w/model.py:12
Graph Break Reason: Data-dependent branching
V1129 [0/1] [__recompiles] Recompiling function forward in /w/model.py:30
    triggered by the following guard failure(s):
    - 0/0: tensor 'x' size mismatch at index 0. expected 8, actual 16
[2023-03-31 05:57:41,605] torch._dynamo.symbolic_convert: [WARNING] Graph break: call_function print from user code at   File "/w/old.py", line 7, in f
"""
    df = torch_logs.parse(text)
    assert df["kind"].tolist() == ["graph_break", "recompile", "graph_break"]
    assert df.iloc[0][["file", "line", "reason"]].tolist() == ["/w/model.py", 12,
                                                              "Data-dependent branching"]
    assert df.iloc[1]["function"] == "forward" and "size mismatch" in df.iloc[1]["reason"]
    assert df.iloc[2][["file", "line"]].tolist() == ["/w/old.py", 7]


def test_torch_logs_errors(tmp_path: Path) -> None:
    from analysis.common.errors import InputError
    with pytest.raises(InputError, match="no such"):
        torch_logs.load(tmp_path / "none.txt")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\x00\x01" * 10)
    with pytest.raises(InputError, match="binary"):
        torch_logs.load(binary)
    assert torch_logs.load(DATA / "gelu" / "torch_logs.txt").empty


def test_torch_logs_real_file_with_log_prefixes() -> None:
    """TORCH_LOGS_OUT output of torch 2.13 (CPU, dynamo eager backend): prefixed lines."""
    df = torch_logs.load(DATA / "torch_logs" / "graph_breaks_recompiles_cpu.txt")
    breaks = df[df["kind"] == "graph_break"]
    assert breaks[["line", "reason"]].values.tolist() == [
        [7, "Data-dependent branching"], [9, "Failed to trace builtin operator"]]
    rec = df[df["kind"] == "recompile"]
    assert len(rec) == 6 and rec.iloc[0]["function"] == "f"
    assert rec.iloc[0]["reason"] == "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 9"
