#!/bin/bash
# Captures tests/data/queue_ab/ on the H200 test machine (through the device tool, from the
# repository root, after `source .gpu-kit/env.sh`): tools/queue_ab.py, a loop whose host
# fills the launch queue beside the same loop with its GEMM on TF32, in one process, with
# its truth (truth.json: per loop, the time from before its first step to after the
# synchronize that closes it, per step). Writes $OUT/queue.tar.xz.
set -u
R=${CAPTURE_DIR:-/tmp/capture_queue}; rm -rf "$R"; mkdir -p "$R"/queue_ab
T=tests/data/tools
bash $T/machine_env.sh > "$R/queue_ab/env.txt" 2>&1
nsys profile --trace=cuda,nvtx,osrt --sample=none --cpuctxsw=none --force-overwrite=true \
  --output="$R/queue_ab/trace" python3 $T/queue_ab.py --out "$R/queue_ab/truth.json" "$@" \
  > "$R/queue_ab/capture_log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/queue_ab/raw.sqlite" \
  "$R/queue_ab/trace.nsys-rep" >> "$R/queue_ab/capture_log.txt" 2>&1
python3 -m analysis scrub "$R/queue_ab/raw.sqlite" "$R/queue_ab/trace.sqlite" \
  >> "$R/queue_ab/capture_log.txt" 2>&1
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/queue.tar.xz" queue_ab/trace.sqlite queue_ab/truth.json \
  queue_ab/capture_log.txt queue_ab/env.txt
ls -la "$OUT"; tail -4 "$R/queue_ab/capture_log.txt"; cat "$R/queue_ab/truth.json"
