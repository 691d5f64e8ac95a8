#!/bin/bash
# Paired timings of `python -m analysis systems` against NVIDIA's `nsys stats` (2025.3, the
# one users have) on the H200 test machine's host CPU, on the same files: the NVTX-heavy
# emit_nvtx capture replayed 1, 3 and 5 times (analysis.commands.bench, $REPEAT pairs per size,
# medians; memory from one more sampled run of each; COPIES="1 3" REPEAT=3 to fit a
# shorter call; STEM names the output files). Run through the device tool from the
# repository root after `source .gpu-kit/env.sh`; writes $OUT/analysis_nvtx_heavy_h200.*
# and $OUT/machine.txt. The machine has no network: put orjson and psutil wheels for its
# Python 3.12 into .gpu-kit/wheels first (`pip download orjson psutil --python-version 3.12
# --only-binary=:all: --platform manylinux2014_x86_64 -d .gpu-kit/wheels`), or the analysis
# writes JSON with the standard library (slower) and memory is the largest process's only.
set -u
python3 -c "from analysis.documents.io import unpack_xz; from pathlib import Path; unpack_xz(Path('tests/data/emit_nvtx_200'))"
python3 -m compileall -q analysis > /dev/null      # bytecode cached, as on any second run
python3 -m analysis.commands.bench --base tests/data/emit_nvtx_200/trace.sqlite --copies ${COPIES:-1 3 5} \
  --repeat "${REPEAT:-5}" --nsys "$(command -v nsys)" --stem "${STEM:-analysis_nvtx_heavy_h200}" \
  -o "$OUT" > "$OUT/bench.txt" 2>&1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  python3 -c "import sys, pandas, orjson; print(sys.version.split()[0], pandas.__version__, orjson.__version__)"
  lscpu | grep "Model name"; nproc; } > "$OUT/machine.txt"
