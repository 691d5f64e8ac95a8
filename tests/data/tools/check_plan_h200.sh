#!/bin/bash
# The Compute plan over a whole program on the H200 test machine (through the device tool,
# from the repository root, after `source .gpu-kit/env.sh`): tests/data/tools/plan/
# decode_train.py (a decode loop with a growing KV cache, then a training loop whose
# backward runs on the autograd thread) profiled as a user does, `make systems` then
# `make compute` of the same NAME, each timed end to end; `python -m analysis picks` prints
# the plan in between. Writes $OUT/plan.tar.xz: the report folder, the scrubbed export,
# the merged ncu CSV and meta, the plan (JSON and page), the logs and times. NCU_RUNS=N
# in the environment caps the plan's ncu runs; COMPUTE_RUNS=N times the Compute step N times.
set -u
P="python3 tests/data/tools/plan/decode_train.py"
W=$OUT/plan; mkdir -p $W
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version; ncu --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__)"; } > $W/env.txt 2>&1
/usr/bin/time -f "make systems: %e s" make systems SCRIPT="$P" NAME=decode_train > $W/systems.log 2>&1
tail -1 $W/systems.log
python3 -m analysis picks reports/decode_train --json > $W/plan.json 2> $W/picks.err
python3 -m analysis picks reports/decode_train > $W/plan.md 2>> $W/picks.err
tail -3 $W/plan.md
for i in $(seq ${COMPUTE_RUNS:-1}); do     # COMPUTE_RUNS=N: the Compute step N times
  /usr/bin/time -f "make compute: %e s" make compute SCRIPT="$P" NAME=decode_train \
    ${NCU_RUNS:+NCU_RUNS=$NCU_RUNS} > $W/compute$i.log 2>&1
  tail -1 $W/compute$i.log
done
cp "$W/compute$i.log" $W/compute.log     # the last: its CSV and report are kept
grep -h "ncu took" reports/decode_train/compute.md | head -2
cp -r reports/decode_train $W/report
cp runs/decode_train/latest-ncu/ncu_raw.csv runs/decode_train/latest-ncu/meta.json $W/ 2>/dev/null
python3 -m analysis scrub runs/decode_train/latest/trace.sqlite $W/trace.sqlite > /dev/null
cp runs/decode_train/latest/meta.json $W/systems_meta.json
(cd $OUT && XZ_OPT=-9T16 tar cJf plan.tar.xz plan && rm -rf plan) && ls -la $OUT
