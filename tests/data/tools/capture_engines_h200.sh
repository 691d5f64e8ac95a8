#!/bin/bash
# SKIP_TWINS=1 leaves the twins out; TWINS=... names them (default: both).
# Captures the loop-as-it-runs data on the H200 test machine (through the device tool, from
# the repository root, after `source .gpu-kit/env.sh`):
# - twins (capture_twins_h200.sh): copy_engine (a blocking copy on the compute stream
#   against a prefetch on a side stream) and gil_thread (a Python thread holding the GIL,
#   sampled) -> $OUT/twins_engines.tar.xz;
# - loader_train.py, a script with no NVTX range whose DataLoader workers hold the step:
#   `nsight-workflows profile --sample cpu` with 2 workers (Systems, the Compute plan,
#   Nsight Compute, each step timed), and the fixed twin (8 workers) through Systems alone;
#   each export scrubbed and trimmed, with the script's truth -> $OUT/loader.tar.xz.
set -u
T=tests/data/tools
R=${CAPTURE_DIR:-/tmp/engines}; rm -rf "$R"; mkdir -p "$R"/loader_planted "$R"/loader_fixed
[ "${SKIP_TWINS:-0}" = 1 ] || \
  CAPTURE_DIR=$R/twins bash $T/capture_twins_h200.sh twins_engines.tar.xz ${TWINS:-copy_engine gil_thread:sampled}
bash $T/machine_env.sh > "$R/env.txt" 2>&1
ncu --version >> "$R/env.txt" 2>&1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
/usr/bin/time -f "loader profile wall %e s" timeout 280 python3 -m nsight_workflows profile \
  --sample cpu --name loader --runs "$R/runs" --reports "$R/reports" -- \
  python3 $T/loader_train.py --workers 2 --steps 40 --out "$R/loader_planted/truth.json" \
  > "$R/loader_planted/profile_log.txt" 2>&1
tail -25 "$R/loader_planted/profile_log.txt"
/usr/bin/time -f "loader_fixed systems wall %e s" python3 -m nsight_workflows systems \
  --sample cpu --name loader_fixed --runs "$R/runs" --reports "$R/reports" -- \
  python3 $T/loader_train.py --workers 8 --steps 40 --out "$R/loader_fixed/truth.json" \
  > "$R/loader_fixed/profile_log.txt" 2>&1
tail -5 "$R/loader_fixed/profile_log.txt"
for s in planted fixed; do
  n=loader; [ $s = fixed ] && n=loader_fixed
  src=$(ls -d "$R"/runs/$n/*/ | grep -v latest | head -1)
  ls -la "$src"
  python3 -m analysis scrub "$src/trace.sqlite" "$R/loader_$s/trace.sqlite" >> "$R/loader_$s/log.txt" 2>&1
  python3 $T/trim_sampled.py "$R/loader_$s/trace.sqlite" >> "$R/loader_$s/log.txt" 2>&1
  cp "$src"/meta.json "$src"/*.log "$src"/*.txt "$R/loader_$s/" 2>/dev/null
  ls -la "$R/loader_$s"
done
cp -r "$R/reports" "$R/loader_planted/reports" 2>/dev/null
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/loader.tar.xz" env.txt loader_planted loader_fixed
ls -la "$OUT"
