#!/bin/bash
# Where an Nsight Compute run of a script with DataLoader workers spends its time (on the
# H200 test machine, through the device tool, after `source .gpu-kit/env.sh`): the planned
# ncu command of loader_train.py run with every output line and a process listing every 5 s
# stamped with the seconds since its start; then the same with ncu's
# --target-processes application-only. Writes $OUT/ncu_time.txt.
set -u
T=tests/data/tools
K='::regex:^(Kernel2|elementwise_kernel|fmha_cutlassB_f32_aligned_64x64_k64_dropout_sm80|reduce_kernel)$:32'
stamp() { python3 -u -c "
import sys,time
t=time.time()
for line in sys.stdin: print(f'{time.time()-t:7.1f} {line}', end='', flush=True)"; }
watch() { for i in $(seq 1 60); do sleep 5; echo "ps: $(ps -eo pid,ppid,etimes,pcpu,comm | grep -c python) python procs; $(ps -eo pid,pcpu,stat,comm | grep python | tr '\n' ' ')"; done; }
for extra in "" "--target-processes application-only"; do
  echo "=== ncu $extra"
  ( watch & W=$!
    PYTHONUNBUFFERED=1 timeout ${LIMIT:-200} ncu --clock-control none --nvtx $extra --kernel-id "$K" --launch-count 4 --kill yes \
      --section SpeedOfLight --force-overwrite --export /tmp/ncu_time python3 $T/loader_train.py --workers 2 --steps 40 2>&1
    echo "exit $?"; kill $W ) | stamp | grep -v "UserWarning\|self.body" | tee -a "$OUT/ncu_time.txt"
done
