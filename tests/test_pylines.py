"""The user's own line from Python samples: decoded from the committed sampled twin
captures (`--include-json=true`), counted per thread as the export's rows, attributed to
the ranges of their own thread, and named by the host-side findings with the library call
and its remedy; the page lists them per loop."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path

import pytest

from analysis.commands import scrub
from analysis.diagnosis.rules.lines import BLOCKING_RULES, LINE_RULES, SYNC_CALLS, pick, remedy_for
from analysis.documents.types import PyLine
from analysis.load.nsys_pysamples import DOMAIN, load_py_samples
from analysis.render.timeline_md import host_lines_section, loop_entries
from analysis.trace import pylines
from tests.conftest import DATA
from tests.shared_docs import analyzed

TWINS = DATA / "twins"
SAMPLED = sorted(p.name for p in TWINS.iterdir() if p.name.endswith("_sampled"))


@pytest.fixture(scope="session")
def docs() -> dict:
    """The sampled captures' documents, analysed where the programs' sources are (the
    captures ran them from that folder: their files are recorded as ./name.py)."""
    return {name: analyzed(f"twins/{name}/trace") for name in SAMPLED}


def _rows_per_thread(path: Path) -> dict[int, int]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    dom = [d for (d,) in conn.execute("SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 "
                                      "AND text = ?", (DOMAIN,))]
    rows = dict(conn.execute(
        f"SELECT globalTid, count(*) FROM NVTX_EVENTS WHERE eventType = 34 AND domainId IN "
        f"({','.join(map(str, dom))}) GROUP BY globalTid").fetchall())
    conn.close()
    return rows


@pytest.mark.parametrize("name", ["input_starved_sampled", "empty_cache_sampled"])
def test_samples_per_thread_are_the_exports_rows(name: str) -> None:
    py = load_py_samples(TWINS / name / "trace.sqlite")
    got = py.samples.groupby("global_tid").size().to_dict()
    assert got == _rows_per_thread(TWINS / name / "trace.sqlite") and py.undecoded == 0
    assert all(s and all(isinstance(f[2], int) for f in s) for s in py.stacks)
    assert not any("&lt;" in f[1] or "&gt;" in f[0] for s in py.stacks for f in s)


def test_an_export_without_payloads_says_how_to_get_them() -> None:
    """A default export (no --include-json): the samples are counted, not decoded, and
    the document says how to export them; an unsampled capture's host-side findings say
    how to sample."""
    path = DATA / "battery" / "dynamic_shapes_sampled" / "trace.sqlite"
    py = load_py_samples(path)
    assert len(py) == 0 and py.undecoded == sum(_rows_per_thread(path).values()) > 0
    doc = analyzed("battery/dynamic_shapes_sampled/trace")
    assert any("--include-json=true" in n for n in doc.notes)
    assert len(load_py_samples(TWINS / "item_sync" / "trace.sqlite")) == 0
    doc = analyzed("battery/dynamic_shapes_planted/trace")
    assert "make systems SAMPLE=cpu" in doc.findings[0].message


def _line(doc, path: str):
    e = next(e for e in doc.ranges if e.name == path)
    return e, e.lines[0]


def test_starved_input_names_the_datasets_line(docs) -> None:
    """The starved loop's samples fall in the Dataset's augmentation loop, under the
    DataLoader: the user's line, then the finding names it."""
    e, top = _line(docs["input_starved_sampled"], "planted/step/load")
    assert top.file == "input_starved.py" and top.function == "__getitem__"
    assert top.pct > 50 and "np.tanh" in top.code and top.call == "np.tanh"
    f = next(f for f in docs["input_starved_sampled"].findings
             if f.rule == "input_starved" and f.range == "planted/step/load")
    assert "input_starved.py:" in f.message and "Python samples" in f.message
    assert f.suggestion.startswith("at input_starved.py:")


def test_empty_cache_line_and_remedy(docs) -> None:
    doc = docs["empty_cache_sampled"]
    f = next(f for f in doc.findings if f.rule == "alloc_in_loop"
             and f.range.startswith("planted"))
    assert "empty_cache" in f.message and "remove the call" in f.suggestion


def test_readback_line(docs) -> None:
    doc = docs["cpu_readback_sampled"]
    f = next(f for f in doc.findings if f.range and f.range.startswith("planted")
             and f.rule in ("readback_in_loop", "sync_in_loop", "pageable_copy"))
    assert ".cpu()" in f.message or "Tensor.cpu" in f.message, f.message


def test_per_parameter_adam_names_single_tensor_adam(docs) -> None:
    doc = docs["foreach_adam_sampled"]
    e = next(e for e in doc.ranges if e.name == "planted")
    assert any("_single_tensor_adam" in x.call for x in e.lines), e.lines
    f = next((f for f in doc.findings if (f.range or "").startswith("planted")
              and f.rule in LINE_RULES), None)
    assert f is not None and "foreach=True" in f.suggestion, f


def test_page_lists_the_loops_lines(docs) -> None:
    doc = docs["input_starved_sampled"]
    text = "\n".join(host_lines_section(loop_entries(doc)))
    assert "Where the host time goes" in text and "`input_starved.py:" in text


@pytest.mark.parametrize(("file", "kind"), [
    ("/opt/v/lib/python3.12/site-packages/torch/cuda/memory.py", "library"),
    ("/usr/lib/python3.12/json/decoder.py", "stdlib"), ("<frozen runpy>", "stdlib"),
    ("./train.py", "user"), ("/home/a/proj/model.py", "user"),
    ("/repo/workflows/runner.py", "toolkit"), ("/tmp/gpu-kit-site/nvtx/nvtx.py", "toolkit"),
    ("/home/a/proj/nvtx_utils.py", "user")])
def test_frame_kinds(file: str, kind: str) -> None:
    assert pylines.frame_kind(file) == kind


@pytest.mark.parametrize(("source", "call"), [
    ("loss_sum += loss.item()", "Tensor.item"), ("h = h[h > 0]", "nonzero"),
    ('s["z"] = s["x"][s["x"] > 0]', "nonzero"), ("y = x[(a > 0) & ~(b == 1)]", "nonzero"),
    ('v = batch["ids"][0]', ""),
    ("x = torch.tensor([float(v) for v in row if v > 0])", "torch.tensor"),
    ("torch.cuda.empty_cache()", "empty_cache"), ("y = model(x)", "model"),
    ("x = np.tanh(x * 1.01).astype(np.float32)", "np.tanh"), ("for _ in range(n):", ""),
    ('s["seen"] = s["y"].new_zeros(9).index_fill_(0, s["y"], True)', "s['y'].new_zeros"),
    ("v = f(x)[0].sum()", "f")])
def test_calls_named_from_source(source: str, call: str) -> None:
    assert pylines.named_call(source) == call


def test_library_call_is_the_innermost_library_frame() -> None:
    lib = "/v/lib/python3.12/site-packages/torch/"
    stack = ((lib + "optim/adam.py", "_single_tensor_adam", 400),
             (lib + "optim/adam.py", "adam", 300), (lib + "optim/optimizer.py", "wrapper", 90),
             ("./train.py", "main", 42), ("/repo/workflows/runner.py", "run", 10))
    assert pylines.site(stack) == (3, "torch.optim.adam._single_tensor_adam")
    assert pylines.module_of(lib + "cuda/__init__.py") == "torch.cuda"


def test_scrub_shortens_sampled_file_paths(tmp_path: Path) -> None:
    """A sampled capture whose user files sit under the home and working directories:
    scrubbed, its Python frames name them relative (./, ~/) and decode to the same
    stacks otherwise."""
    raw = tmp_path / "raw.sqlite"
    shutil.copy(TWINS / "empty_cache_sampled" / "trace.sqlite", raw)
    conn = sqlite3.connect(raw)
    conn.execute("UPDATE StringIds SET value = '/home/alice/proj/' || substr(value, 3) "
                 "WHERE value = './empty_cache.py'")
    conn.execute("UPDATE StringIds SET value = '/home/alice/lib/util.py' WHERE value = "
                 "'./twins.py'")
    conn.execute("UPDATE META_DATA_CAPTURE SET value = '/home/alice/proj' "
                 "WHERE name LIKE '%WORKING_DIR'")
    conn.execute("INSERT INTO StringIds (id, value) VALUES (?, ?)",
                 (10**9, "HOME=/home/alice\x00PWD=/home/alice/proj\x00"))
    conn.commit()
    conn.close()
    before = load_py_samples(raw)
    scrub.scrub(raw, tmp_path / "clean.sqlite")
    after = load_py_samples(tmp_path / "clean.sqlite")
    files = {f[0] for s in after.stacks for f in s}
    assert "./empty_cache.py" in files and "~/lib/util.py" in files
    assert not any(f.startswith("/home/alice") for f in files)
    assert after.samples.equals(before.samples) and len(after.stacks) == len(before.stacks)


@pytest.mark.parametrize(("call", "rule", "says"), [
    ("Tensor.item", "sync_in_loop", "keep the value on the device"),
    ("x.cuda", "pageable_copy", "non_blocking=True"),
    ("torch.cuda.synchronize", "sync_in_loop", "CUDA events"),
    ("torch.optim.adam._single_tensor_adam", "launch_bound", "foreach=True"),
    ("torch.cuda.memory.empty_cache", "alloc_in_loop", "remove the call"),
    ("torch.tensor", "input_starved", "DataLoader workers"),
    ("scaled_dot_product_attention", "kernel_loads_per_call", "SDPA backend"),
    ("torch.optim.adam._single_tensor_adam", "sync_in_loop", None),
    ("numpy._core._methods._mean", "sync_in_loop", None)])
def test_remedies_are_keyed_by_the_call_and_the_rule(call: str, rule: str, says) -> None:
    got = remedy_for(call, rule)
    assert (got is None) if says is None else (says in got), got


def test_a_sync_finding_names_only_a_line_that_syncs() -> None:
    def line(call: str, pct: float) -> PyLine:
        return PyLine(file="t.py", line=1, function="f", call=call, code="", samples=1,
                      pct=pct)
    hot, sync = line("np.tanh", 90.0), line("Tensor.item", 2.0)
    assert pick([hot, sync], LINE_RULES["sync_in_loop"]) is sync
    assert pick([hot], LINE_RULES["sync_in_loop"]) is None
    assert pick([hot, sync], LINE_RULES["host_bound"]) is hot


@pytest.mark.parametrize("name", SAMPLED)
def test_every_host_side_finding_names_the_users_line(docs, name: str) -> None:
    """On the sampled twins every host-side finding on the loops names a line of the
    user's code and leads its suggestion with it; a finding on blocking calls a line
    that blocks (the one sampled inside its calls: the harness's synchronize where it
    waits longest), any other the line its call fits (lines.pick)."""
    host = [f for f in docs[name].findings if f.rule in LINE_RULES and f.range
            and f.range.split("/")[0] in ("planted", "fixed", "control")]
    assert host
    entries = {e.name: e for e in docs[name].ranges if e.lines}
    for f in host:
        lines = entries[f.range].lines
        named = [x for x in lines if f" on {x.file}:{x.line} in {x.function}" in f.message
                 and f", in {x.call}." in f.message]
        assert "In your code: " in f.message and len(named) == 1, f
        line = named[0]
        assert line.call and f.suggestion.startswith(f"at {line.file}:{line.line}"), f
        if f.rule in BLOCKING_RULES:
            assert re.search(SYNC_CALLS, line.call), f
        else:
            assert line is pick(lines, LINE_RULES[f.rule]), f


@pytest.mark.parametrize(("name", "rule", "where", "call"), [
    ("item_sync_sampled", "sync_in_loop", "item_sync.py:47", "Tensor.item"),
    ("mask_sync_sampled", "sync_in_loop", "mask_sync.py:45", "nonzero"),
    ("pageable_copy_sampled", "pageable_copy", "pageable_copy.py:26", "Tensor.to"),
    ("sync_timing_sampled", "sync_in_loop", "sync_timing.py:44", "torch.cuda.synchronize"),
    ("dynamic_shapes_sampled", "kernel_loads_per_call", "dynamic_shapes.py:29",
     "scaled_dot_product_attention"),
    ("cpu_readback_sampled", "readback_in_loop", "cpu_readback.py:24", "Tensor.cpu"),
    ("empty_cache_sampled", "alloc_in_loop", "empty_cache.py:29",
     "torch.cuda.memory.empty_cache")])
def test_the_planted_cause_is_named_on_its_line(docs, name: str, rule: str, where: str,
                                                call: str) -> None:
    """Each sampled twin's planted loop: its finding names the line that plants the cause
    and the call in it (pinned)."""
    f = next(f for f in docs[name].findings if f.rule == rule and f.range == "planted")
    assert f"on {where} " in f.message and f"in {call}." in f.message, f.message


def test_lines_of_a_function_are_its_samples_anywhere_on_the_thread() -> None:
    """pylines.lines_of: the lines of the functions asked for, counted over the thread's
    whole capture, are line_counts' over its whole span for those lines, most first."""
    py = load_py_samples(TWINS / "item_sync_sampled" / "trace.sqlite")
    tid = int(py.samples.groupby("global_tid").size().idxmax())
    every = pylines.line_counts(py, tid, 0, 2**62, ".")
    found = pylines.lines_of(py, {tid}, {("item_sync.py", "main")}, ".")
    assert found and [n for _, n in found] == sorted((n for _, n in found), reverse=True)
    for (file, line, function, call, _), n in found:
        assert (file, function) == ("item_sync.py", "main")
        assert every[f"{file}:{line} in {function}" + (f", {call}" if call else "")] == n
