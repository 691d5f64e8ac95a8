#!/bin/bash
# Captures tests/data/emit_shapes/ on the H200 test machine (through the device tool, from
# the repository root, after `source .gpu-kit/env.sh`): tools/shapes_train.py, a small
# decoder trained under emit_nvtx(record_shapes=True) with a sequence length that changes
# every step, profiled as a user would, and NVIDIA's `nsys stats` (2025.3) CSVs of the same
# export. Writes $OUT/emit_shapes.tar.xz.
set -u
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R"/emit_shapes/nsys_stats
T=tests/data/tools
bash $T/machine_env.sh > "$R/emit_shapes/env.txt" 2>&1
/usr/bin/time -f "profile wall %e s" nsys profile --trace=cuda,nvtx,osrt --sample=none \
  --cpuctxsw=none --force-overwrite=true --output="$R/emit_shapes/trace" \
  python3 $T/shapes_train.py "$@" > "$R/emit_shapes/capture_log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/emit_shapes/trace.sqlite" \
  "$R/emit_shapes/trace.nsys-rep" >> "$R/emit_shapes/capture_log.txt" 2>&1
S="$R/emit_shapes/nsys_stats/trace_2025.3"
for r in nvtx_kern_sum:base nvtx_gpu_proj_sum cuda_gpu_kern_sum:base; do
  nsys stats --report "$r" --format csv --force-overwrite=true --output "$S" \
    "$R/emit_shapes/trace.sqlite" >> "$R/emit_shapes/capture_log.txt" 2>&1
done
python3 -c "import sqlite3,sys; print(sqlite3.connect(sys.argv[1]).execute('select count(*), count(distinct text) from NVTX_EVENTS').fetchone())" "$R/emit_shapes/trace.sqlite" >> "$R/emit_shapes/capture_log.txt" 2>&1
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/emit_shapes.tar.xz" emit_shapes/trace.sqlite \
  emit_shapes/capture_log.txt emit_shapes/env.txt emit_shapes/nsys_stats
ls -la "$OUT"; tail -4 "$R/emit_shapes/capture_log.txt"
