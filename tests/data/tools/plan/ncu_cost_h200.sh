#!/bin/bash
# Where an ncu run's time goes, on tests/data/tools/plan/decode_train.py (H200 test machine,
# through the device tool, from the repository root, after `source .gpu-kit/env.sh`):
# the program alone, under ncu profiling nothing, and the one-run plan's launches with
# 1 metric (1 pass), the report's metrics only, and the section set (workflows/ncu.py).
# Writes $OUT/cost.tar.xz: every output line stamped with seconds since its command began,
# and times.txt.
set -u
export PYTHONUNBUFFERED=1
P="python3 tests/data/tools/plan/decode_train.py"
W=$OUT/cost; mkdir -p $W
STAMP='import sys,time
t0=float(sys.argv[1])
for l in sys.stdin: print(f"{time.time()-t0:7.2f} {l}", end="", flush=True)'
now() { python3 -c "import time; print(time.time())"; }
t() {    # t NAME COMMAND...: run it, its lines stamped into NAME.log, its time into times.txt
  local name=$1; shift; local s; s=$(now)
  "$@" 2>&1 | python3 -c "$STAMP" "$s" > "$W/$name.log"
  python3 -c "import time; print(f'{time.time() - $s:.2f} s $name')" | tee -a $W/times.txt
}
t alone $P
t import_torch python3 -c "import torch"
t under_ncu ncu --kernel-name nomatch_zz $P
make systems SCRIPT="$P" NAME=decode_train > $W/systems.log 2>&1
python3 -m analysis picks reports/decode_train --json --runs 1 > $W/plan.json
ARGS=$(python3 -c "import json, shlex, sys; print(shlex.join(json.load(open(sys.argv[1]))['runs'][0]['ncu_args']))" $W/plan.json)
SECTIONS=$(python3 -c "from workflows.ncu import SECTIONS, METRICS; print(' '.join(f'--section {s}' for s in SECTIONS), '--metrics', ','.join(METRICS))")
READ=$(python3 -c "from analysis.load.ncu_csv import REQUIRED, OPTIONAL; print(','.join(m for d in (REQUIRED, OPTIONAL) for v in d.values() for m in v))")
eval "t one_pass ncu --clock-control none $ARGS --metrics gpu__time_duration.sum -f -o /tmp/c $P"
eval "t read_metrics ncu --clock-control none $ARGS --metrics $READ -f -o /tmp/b $P"
eval "t sections ncu --clock-control none $ARGS $SECTIONS -f -o /tmp/a $P"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; ncu --version | tail -1
  python3 -c "import torch; print('torch', torch.__version__)"; } > $W/env.txt 2>&1
(cd $OUT && tar cJf cost.tar.xz cost && rm -rf cost)
