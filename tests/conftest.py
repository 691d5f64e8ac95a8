"""Shared test setup: data paths, and Triton's CPU interpreter when there is no GPU."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import settings

DATA = Path(__file__).parent / "data"

# Property tests run beside each other on every core (pytest-xdist): a per-example time
# limit would measure the machine's load, not the code.
settings.register_profile("parallel", deadline=None)
settings.load_profile("parallel")

# Text columns as Python strings, as the command line keeps them (__main__.run_and_exit);
# with pyarrow installed pandas 3 would make Arrow arrays of them, a fifth of the suite's
# time. test_string_storage.py checks that both storages give the same documents.
import pandas as pd  # noqa: E402

pd.set_option("mode.string_storage", "python")

# The committed captures are xz-compressed; tests read the plain SQLite files beside them.
from analysis.documents.io import unpack_xz  # noqa: E402

unpack_xz(DATA)

from tests import shared_docs  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    """The folder where `analyzed` keeps documents: made by the controller, handed to
    each xdist worker (pytest_configure_node), removed when the run ends."""
    import tempfile

    given = getattr(config, "workerinput", {}).get("analyzed_root")
    shared_docs.ROOT["path"] = Path(given or tempfile.mkdtemp(prefix="nsight-workflows-"))
    shared_docs.ROOT["own"] = not given


def pytest_unconfigure(config: pytest.Config) -> None:
    import shutil

    if shared_docs.ROOT.get("own"):
        shutil.rmtree(shared_docs.ROOT["path"], ignore_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    node.workerinput["analyzed_root"] = str(shared_docs.ROOT["path"])


@pytest.fixture(autouse=True, scope="module")
def _exports_closed():
    """The exports a test module opened (one shared connection each) closed after it."""
    yield
    from analysis.load.export import close_all

    close_all()


@pytest.fixture(scope="session")
def demo() -> list[Path]:
    """Every committed capture rendered as `make demo` does, once per test run (two
    modules read it; shared_docs.shared)."""
    from analysis.commands.demo import render_all

    return shared_docs.shared("demo", lambda folder: render_all(DATA, folder))


def _cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


HAS_CUDA = _cuda_available()
if not HAS_CUDA:
    # Must be set before triton is imported anywhere: kernels then run on the CPU.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--battery", action="store_true",
                     help="also run the tests marked battery (the generated battery's "
                     "captures, a minute each: make test-battery)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    later = pytest.mark.skip(reason="the generated battery: make test-battery")
    for item in items:
        if "gpu" in item.keywords and not HAS_CUDA:
            item.add_marker(skip)
        if "battery" in item.keywords and not config.getoption("--battery"):
            item.add_marker(later)


@pytest.fixture(scope="session")
def data() -> Path:
    return DATA


class FakeTools:
    """Stands in for subprocess.run and subprocess.Popen: handler(argv) -> (code, stdout)."""

    def __init__(self, handler):
        self.handler = handler
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str] | None] = []

    def run(self, argv, **kw):
        import subprocess

        self.calls.append(list(argv))
        self.envs.append(kw.get("env"))
        code, out = self.handler(list(argv))
        return subprocess.CompletedProcess(argv, code, stdout=out, stderr="")

    def popen(self, argv, **kw):
        self.calls.append(list(argv))
        self.envs.append(kw.get("env"))
        code, out = self.handler(list(argv))
        return _FakeProc(code, out)


class _FakeProc:
    def __init__(self, code: int, out: str):
        import io

        self.returncode, self.stdout = code, io.StringIO(out)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.fixture
def fake_tools(monkeypatch):
    """Install a FakeTools whose handler the test sets: fake_tools.handler = ..."""
    import subprocess

    tools = FakeTools(lambda argv: (0, ""))
    monkeypatch.setattr(subprocess, "run", tools.run)
    monkeypatch.setattr(subprocess, "Popen", tools.popen)
    return tools


def systems_json(path: Path, meta: dict | None = None, events=None) -> dict:
    """The systems/2 document of an export in its JSON form (what users read)."""
    from analysis.commands import systems
    from analysis.documents.types import to_dict
    from analysis.load import nsys_sqlite

    return to_dict(systems.build(nsys_sqlite.load(path), meta, events))


def simulated_tools(argv: list[str]) -> tuple[int, str]:
    """Stands in for nsys, ncu and the runner they start: writes the files each would."""
    ranks = [int(a.split("=")[1]) for a in argv if a.startswith("--nproc-per-node=")]
    nproc = ranks[0] if ranks else 0
    if "--out" in argv and any(a.endswith("workflows.runner") for a in argv):
        out = Path(argv[argv.index("--out") + 1])
        for folder in [out / f"rank{k}" for k in range(nproc)] or [out]:
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "meta.json").write_text('{"ranges": {}}')
    outputs = [a[len("--output="):] for a in argv if a.startswith("--output=")]
    if "profile" in argv and outputs:
        for k in range(max(nproc, 1)):
            Path(outputs[0].replace("%q{RANK}", str(k)) + ".nsys-rep").write_bytes(b"x")
    if len(argv) > 1 and argv[1] == "export" and outputs:
        Path(outputs[0]).write_bytes(b"x")
    if "--import" in argv:
        return 0, '"ID"\n'
    return 0, "==PROF== Report: profile.ncu-rep\n"
