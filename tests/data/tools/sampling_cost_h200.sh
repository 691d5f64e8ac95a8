#!/bin/bash
# What CPU and Python sampling (`make systems SAMPLE=cpu`) costs the profiled program, on the
# H200 test machine, through the device tool from the repository root after
# `source .gpu-kit/env.sh`: each twin program of tests/data/tools/twins (its planted loop,
# its fix and a control interleaved in one process, medians per step on the host clock) run
# under nsys as `make systems` runs it, once without sampling and once with
# `--sample=process-tree --python-sampling=true`, the order alternating from program to
# program. Arguments: the programs. Writes $OUT/sampling_cost.txt: per run, the program,
# the mode, its median line and the profile's wall time.
set -u
T=tests/data/tools/twins
BASE="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --cpuctxsw=none --force-overwrite=true"
declare -A MODE=([none]="--sample=none" [cpu]="--sample=process-tree --python-sampling=true")
R=$(mktemp -d); i=0
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  python3 -c "import torch; print('torch', torch.__version__)"; } > "$OUT/sampling_cost.txt" 2>&1
for p in "$@"; do
  order="none cpu"; [ $((i % 2)) -eq 1 ] && order="cpu none"; i=$((i + 1))
  for m in $order; do
    ( cd $T && /usr/bin/time -f "profile wall %e s" nsys profile $BASE ${MODE[$m]} \
      --output="$R/$p-$m" python3 $p.py ) > "$R/$p-$m.log" 2>&1
    echo "$p $m | $(grep -h 'median ms per' "$R/$p-$m.log") | $(grep -h 'profile wall' "$R/$p-$m.log")" \
      | tee -a "$OUT/sampling_cost.txt"
    rm -f "$R/$p-$m.nsys-rep"
  done
done
