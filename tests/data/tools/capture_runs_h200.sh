#!/bin/bash
# Captures tests/data/loops_ab/ on the H200 test machine (through the device tool, from the
# repository root, after `source .gpu-kit/env.sh`): tools/runs_ab.py, loops whose cost as
# they run differs from their host ranges' (a checkpoint every eighth step, a fill the next
# op overwrites), each beside its fix in one process, with its truth (truth.json: per loop,
# the time from before its first step to after the synchronize that closes it, per step).
# Writes $OUT/runs.tar.xz.
set -u
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R"/loops_ab
T=tests/data/tools
bash $T/machine_env.sh > "$R/loops_ab/env.txt" 2>&1
nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true \
  --output="$R/loops_ab/trace" python3 $T/runs_ab.py --out "$R/loops_ab/truth.json" "$@" \
  > "$R/loops_ab/capture_log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/loops_ab/raw.sqlite" \
  "$R/loops_ab/trace.nsys-rep" >> "$R/loops_ab/capture_log.txt" 2>&1
python3 -m analysis scrub "$R/loops_ab/raw.sqlite" "$R/loops_ab/trace.sqlite" \
  >> "$R/loops_ab/capture_log.txt" 2>&1
python3 -m analysis systems "$R/loops_ab/trace.sqlite" -o "$R/loops_ab/report" --quiet \
  >> "$R/loops_ab/capture_log.txt" 2>&1
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/runs.tar.xz" loops_ab/trace.sqlite loops_ab/truth.json \
  loops_ab/capture_log.txt loops_ab/env.txt loops_ab/report
ls -la "$OUT"; tail -5 "$R/loops_ab/capture_log.txt"; cat "$R/loops_ab/truth.json"
grep -A12 "## Loops" "$R/loops_ab/report/systems.md" | head -30
