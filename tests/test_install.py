"""An installed copy claims only import names of its own and works with the core
dependencies alone (pandas, sqlite-utils): no torch, no matplotlib, no `workflows`."""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import tomllib

from tests.conftest import DATA

ROOT = Path(__file__).resolve().parents[1]


def _run(argv: list, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True,
                          timeout=600, **kw)


@pytest.fixture(scope="session")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment: a stand-in package owning `kernels`, the core
    dependencies, then this toolkit's wheel (installed by this interpreter's pip, without
    byte-compiling: 11 s instead of 39 s on the 2-core machine)."""
    tmp = tmp_path_factory.mktemp("install")
    env = tmp / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", env]).returncode == 0
    py = env / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", py]   # no pip inside: 9 s saved
    core = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    deps = _run([*pip, "install", "-q", "--no-compile", *core])
    if deps.returncode != 0:
        pytest.skip(f"no package index reachable for the core dependencies: {deps.stderr[-300:]}")
    site = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                .stdout.strip())
    (site / "kernels").mkdir()
    (site / "kernels" / "__init__.py").write_text('OWNER = "the kernel hub stand-in"\n')
    wheel = _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                  "--no-build-isolation", "-w", tmp / "dist", ROOT])
    assert wheel.returncode == 0, wheel.stderr[-2000:]
    (whl,) = (tmp / "dist").glob("nsight_workflows-*.whl")
    inst = _run([*pip, "install", "-q", "--no-compile", "--no-deps", whl])
    assert inst.returncode == 0, inst.stderr[-2000:]
    return env


def test_installed_copy_shadows_no_other_package(fresh: Path, tmp_path: Path) -> None:
    py = fresh / "bin" / "python"
    probe = ("import importlib.util as u, kernels, nsight_workflows.analysis as a; "
             "print(kernels.OWNER); print(a.__name__); "
             "print([n for n in ('analysis', 'workflows') if u.find_spec(n)])")
    out = _run([py, "-c", probe], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["the kernel hub stand-in", "nsight_workflows.analysis",
                                       "[]"]


def test_console_command_with_core_dependencies_only(fresh: Path, tmp_path: Path) -> None:
    cmd = fresh / "bin" / "nsight-workflows"
    assert _run([cmd, "--help"]).returncode == 0
    out = _run([cmd, "systems", DATA / "gelu" / "trace.sqlite", "--meta",
                DATA / "gelu" / "meta.json", "-o", tmp_path / "r"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "matplotlib is not installed" in out.stderr            # plots skipped, said
    doc = json.loads((tmp_path / "r" / "systems.json").read_text())
    assert [e["kernel_count"] for e in doc["ranges"]][:2] == [240, 180]
    schema = Path(_run([fresh / "bin" / "python", "-c",
                        "import nsight_workflows.analysis.documents.schemas as s; "
                        "print(s.path_of('systems'))"]).stdout.strip())
    assert schema.is_file()                                      # schemas ship with it
    drivers = _run([cmd, "nsys", "--help"])                      # the registry reads
    assert drivers.returncode == 0 and "COMMAND" in drivers.stdout  # without torch


def test_python_m_analysis_in_the_checkout_with_core_dependencies_only(fresh: Path) -> None:
    out = _run([fresh / "bin" / "python", "-m", "analysis", "--help"], cwd=ROOT)
    assert out.returncode == 0 and "systems" in out.stdout, out.stderr
    assert sysconfig.get_paths()  # the test's own interpreter is untouched


FAKE_NSYS = '''import shutil, sys
from pathlib import Path
argv = sys.argv[1:]
out = [a.split("=", 1)[1] for a in argv if a.startswith("--output=")]
if argv[0] == "profile":
    Path(out[0] + ".nsys-rep").write_bytes(b"report")
elif argv[0] == "export":
    shutil.copy({trace!r}, out[0])
'''
FAKE_NCU = '''import sys
from pathlib import Path
argv = sys.argv[1:]
if "--import" in argv:
    print(Path({csv!r}).read_text(), end="")
else:
    base = argv[argv.index("--export") + 1]
    Path(base + ".ncu-rep").write_bytes(b"report")
    print("==PROF== Connected\\n==PROF== Report: " + base + ".ncu-rep")
'''


def _fake_tools(folder: Path) -> dict[str, str]:
    """nsys, ncu and nvidia-smi stand-ins on PATH: nsys `exports` a committed capture,
    ncu `imports` a committed raw CSV; the program itself never runs."""
    folder.mkdir()
    scripts = {"nsys": FAKE_NSYS.format(trace=str(DATA / "gelu" / "trace.sqlite")),
               "ncu": FAKE_NCU.format(csv=str(DATA / "ncu" / "gelu_raw.csv")),
               "nvidia-smi": 'print("GPU 0: NVIDIA H200 (stand-in)")\n'}
    for name, text in scripts.items():
        (folder / name).write_text(f"#!{sys.executable}\n{text}")
        (folder / name).chmod(0o755)
    return {"PATH": f"{folder}:/usr/bin:/bin", "NSYS": str(folder / "nsys"),
            "NCU": str(folder / "ncu")}


def test_profile_command_runs_every_step_from_the_installed_package(fresh: Path,
                                                                    tmp_path: Path) -> None:
    """`nsight-workflows profile -- CMD` from a pip install, with nsys and ncu mocked:
    Systems, the report, the plan, Compute, its report and the page, whose path it prints."""
    env = _fake_tools(tmp_path / "bin")
    cmd = fresh / "bin" / "nsight-workflows"
    out = _run([cmd, "profile", "--", "python", "train.py", "--steps", "5"], cwd=tmp_path,
               env=env)
    assert out.returncode == 0, out.stderr[-3000:]
    steps = [line.split("] ", 1)[1].split()[:2] for line in out.stderr.splitlines()
             if line.startswith("[nsight-workflows profile] ")]
    assert [s[0] if s[0] != "analysis" else s[1] for s in steps] == [
        "nsys", "systems", "picks", "ncu", "compute", "page"]
    report = tmp_path / "reports" / "train"
    assert out.stdout.strip().splitlines()[-1] == "page: reports/train/README.md"
    for name in ("systems.json", "compute.json", "README.md"):
        assert (report / name).is_file(), name
    meta = json.loads((tmp_path / "runs" / "train" / "latest" / "meta.json").read_text())
    assert meta["command"] == ["python", "train.py", "--steps", "5"]
    timeline = _run([cmd, "systems", "--name", "t", "--", "python", "x.py"], cwd=tmp_path,
                    env=env)
    assert timeline.returncode == 0, timeline.stderr[-3000:]
    assert (tmp_path / "reports" / "t" / "README.md").is_file()
    assert not (tmp_path / "runs" / "t" / "latest-ncu").exists()
