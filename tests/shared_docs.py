"""The systems documents of the committed exports, built once per test run.

`analyzed(name)` is shared by every xdist worker of a run: the first worker to ask builds
the document under a file lock and keeps its pickle in the run's folder (conftest.py
makes it and hands it to the workers); the others read it.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from filelock import FileLock

DATA = Path(__file__).parent / "data"
ROOT: dict = {}
"""path: the run's folder; own: whether this process made it (and removes it)."""
_MEMO: dict[str, Path] = {}
SCORED_APART = "battery_gen"
"""Committed captures the whole-capture tests leave out: the generated battery's
1.2M-event exports (35 s each to analyze here) are scored by battery_gen/score.py."""


def committed_exports(reference: bool = True) -> list[str]:
    """The committed exports as `folder/trace` names (their .sqlite.xz unpacked by the
    tests), the reference folders' among them with `reference`."""
    names = (p.relative_to(DATA) for p in DATA.rglob("*.sqlite.xz"))
    return sorted(str(n).removesuffix(".sqlite.xz") for n in names
                  if SCORED_APART not in n.parts and (reference or "reference" not in n.parts))


def _built(name: str) -> Path:
    """Where the pickled document of an export lies (its trace's beside it, suffix
    .trace), built once per run (`shared`)."""
    if name not in _MEMO:
        _MEMO[name] = shared("analyzed-" + name.replace("/", "__"),
                             lambda folder: _analyze(name, folder))
    return _MEMO[name]


SOURCES = DATA / "tools" / "twins"
"""Where the sampled twins' programs lie: their captures ran them from there (files are
recorded as ./name.py), so their documents are built there to show the code text."""


def _analyze(name: str, folder: Path) -> Path:
    """The export's document and trace pickled into `folder`; the document's path."""
    from analysis.commands import systems
    from analysis.load import nsys_sqlite

    here = Path.cwd()
    try:
        if name.startswith("twins/") and name.split("/")[1].endswith("_sampled"):
            os.chdir(SOURCES)
        measured = systems.measure(nsys_sqlite.load(DATA / f"{name}.sqlite"))
    finally:
        os.chdir(here)
    doc = systems.judge(measured)
    f = folder / "doc.pickle"
    f.write_bytes(pickle.dumps(doc))
    f.with_suffix(".trace").write_bytes(pickle.dumps(measured.trace))
    return f


def analyzed(name: str):
    """The systems document of the committed export `name` (its path under tests/data,
    no suffix), built with no meta.json or logs. Each call returns a fresh copy, so a
    test may change it."""
    return pickle.loads(_built(name).read_bytes())


def analyzed_trace(name: str):
    """The attributed trace that document was built from (a fresh copy)."""
    return pickle.loads(_built(name).with_suffix(".trace").read_bytes())


def shared(name: str, build):
    """`build()`'s result, made once per test run whatever the number of workers (the
    first to ask builds it under a file lock and pickles it in the run's folder, passed
    as `build`'s only argument; the others read it). For session fixtures that every
    worker would otherwise make again."""
    f = ROOT["path"] / f"{name}.shared"
    with FileLock(str(f) + ".lock"):
        if not f.exists():
            folder = ROOT["path"] / f"{name}.files"
            folder.mkdir(exist_ok=True)
            f.write_bytes(pickle.dumps(build(folder)))
        return pickle.loads(f.read_bytes())
