"""The A/B capture script (tests/data/tools/capture_ab_h200.sh) run with a stand-in for
nsys: the program's command line under `nsys profile`, the export, and what is packed
(the scrubbed export, the truth, the logs and the systems report). The H200 runs the real
one; this checks the script's own steps on the CPU machine."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.conftest import DATA

FAKE_NSYS = """#!/bin/bash
echo "nsys $*" >> "$CALLS"
if [ "$1" = export ]; then
  for a in "$@"; do case $a in --output=*) out=${a#--output=};; esac; done
  cp "$TRACE" "$out"
fi
if [ "$1" = profile ]; then             # the program writes its truth after --out
  next=0
  for a in "$@"; do
    if [ $next = 1 ]; then echo '{"cost_ns": {}}' > "$a"; next=0; fi
    [ "$a" = --out ] && next=1
  done
fi
exit 0
"""


def test_an_ab_program_is_profiled_exported_scrubbed_and_packed(tmp_path: Path) -> None:
    """SAMPLE=1: the program under nsys with CPU and Python sampling and its arguments,
    exported with the samples' stacks; the tarball holds the scrubbed export (an SQLite
    file that analyzes), the truth, both logs and the report."""
    bin_dir, out = tmp_path / "bin", tmp_path / "out"
    bin_dir.mkdir()
    out.mkdir()
    nsys = bin_dir / "nsys"
    nsys.write_text(FAKE_NSYS)
    nsys.chmod(0o755)
    path = os.pathsep.join([str(bin_dir), str(Path(sys.executable).parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path,                # python3: this environment's
           "OUT": str(out), "SAMPLE": "1", "XZ_OPT": "-0", "CALLS": str(tmp_path / "calls.txt"),
           "TRACE": str(DATA / "queue_ab" / "trace.sqlite"),
           "CAPTURE_DIR": str(tmp_path / "capture")}
    root = DATA.parent.parent
    subprocess.run(["bash", "tests/data/tools/capture_ab_h200.sh", "alloc_ab", "alloc_ab.py",
                    "--steps", "4"], cwd=root, env=env, check=True, capture_output=True)
    calls = (tmp_path / "calls.txt").read_text().splitlines()
    profile = next(c for c in calls if c.startswith("nsys profile"))
    assert "--python-sampling=true" in profile and "--trace=cuda,nvtx,osrt" in profile
    assert profile.endswith("tests/data/tools/alloc_ab.py --out "
                            f"{tmp_path}/capture/alloc_ab/truth.json --steps 4")
    assert any(c.startswith("nsys export") and "--include-json=true" in c for c in calls)
    with tarfile.open(out / "alloc_ab.tar.xz") as tar:
        names = set(tar.getnames())
    assert {"alloc_ab/trace.sqlite", "alloc_ab/truth.json", "alloc_ab/capture_log.txt",
            "alloc_ab/env.txt", "alloc_ab/report/systems.md"} <= names
