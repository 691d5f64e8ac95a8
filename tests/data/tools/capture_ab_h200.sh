#!/bin/bash
# Captures one in-process A/B program into tests/data/<NAME>/ on the H200 test machine
# (through the device tool, from the repository root, after `source .gpu-kit/env.sh`):
# the program under Nsight Systems (CUDA, NVTX, OS runtime; SAMPLE=1: CPU and Python
# samples too), exported, scrubbed, with its truth (truth.json: per loop, the time from
# before its first step to after the synchronize that closes it, per step) and its systems
# report. Writes $OUT/<NAME>.tar.xz.
#   bash tests/data/tools/capture_ab_h200.sh NAME PROGRAM.py [program arguments]
set -u
NAME=$1 PROGRAM=$2; shift 2
R=${CAPTURE_DIR:-/tmp/capture_$NAME}; rm -rf "$R"; mkdir -p "$R/$NAME"
D=$R/$NAME T=tests/data/tools
FLAGS="--trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none"
[ "${SAMPLE:-0}" = 1 ] && FLAGS="--trace=cuda,nvtx,osrt --sample=process-tree --python-sampling=true --cpuctxsw=none"
bash $T/machine_env.sh > "$D/env.txt" 2>&1
nsys profile $FLAGS --force-overwrite=true --output="$D/trace" \
  python3 "$T/$PROGRAM" --out "$D/truth.json" "$@" > "$D/capture_log.txt" 2>&1
nsys export --type=sqlite --include-json=true --force-overwrite=true \
  --output="$D/raw.sqlite" "$D/trace.nsys-rep" >> "$D/capture_log.txt" 2>&1
python3 -m analysis scrub "$D/raw.sqlite" "$D/trace.sqlite" >> "$D/capture_log.txt" 2>&1
[ "${SAMPLE:-0}" = 1 ] && python3 $T/trim_sampled.py "$D/trace.sqlite" >> "$D/capture_log.txt" 2>&1
python3 -m analysis systems "$D/trace.sqlite" -o "$D/report" --quiet >> "$D/capture_log.txt" 2>&1
cd "$R" && XZ_OPT=${XZ_OPT:--9T16} tar cJf "$OUT/$NAME.tar.xz" "$NAME/trace.sqlite" "$NAME/truth.json" \
  "$NAME/capture_log.txt" "$NAME/env.txt" "$NAME/report"
ls -la "$OUT"; tail -5 "$D/capture_log.txt"; cat "$D/truth.json"
grep -A12 "## Loops" "$D/report/systems.md" | head -30
