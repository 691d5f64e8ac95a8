#!/bin/bash
# Captures tests/data/runs/ab/ on the H200 test machine (through the device tool, from the
# repository root, after `source .gpu-kit/env.sh`): tools/runs_ab.py, loops whose cost as
# they run differs from their host ranges' (a checkpoint every eighth step, a fill the next
# op overwrites), each beside its fix in one process, with its truth (truth.json: per loop,
# the time from before its first step to after the synchronize that closes it, per step).
# Writes $OUT/runs.tar.xz.
set -u
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R"/runs/ab
T=tests/data/tools
bash $T/machine_env.sh > "$R/runs/ab/env.txt" 2>&1
nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true \
  --output="$R/runs/ab/trace" python3 $T/runs_ab.py --out "$R/runs/ab/truth.json" "$@" \
  > "$R/runs/ab/capture_log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/runs/ab/raw.sqlite" \
  "$R/runs/ab/trace.nsys-rep" >> "$R/runs/ab/capture_log.txt" 2>&1
python3 -m analysis scrub "$R/runs/ab/raw.sqlite" "$R/runs/ab/trace.sqlite" \
  >> "$R/runs/ab/capture_log.txt" 2>&1
python3 -m analysis systems "$R/runs/ab/trace.sqlite" -o "$R/runs/ab/report" --quiet \
  >> "$R/runs/ab/capture_log.txt" 2>&1
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/runs.tar.xz" runs/ab/trace.sqlite runs/ab/truth.json \
  runs/ab/capture_log.txt runs/ab/env.txt runs/ab/report
ls -la "$OUT"; tail -5 "$R/runs/ab/capture_log.txt"; cat "$R/runs/ab/truth.json"
grep -A12 "## Loops" "$R/runs/ab/report/systems.md" | head -30
