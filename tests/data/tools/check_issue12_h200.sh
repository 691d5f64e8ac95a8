#!/bin/bash
# The end-to-end runs of "profile your own code" on the H200 (device tool, repository root,
# after `source .gpu-kit/env.sh`): make profile on a registered workload, on a workload
# file and on plain scripts (one with an NVTX filter for ncu), make systems on the
# train_step workload; wall time of each, reports and the train_step export to $OUT.
set -u
export PY=python3
T() { local what=$1; shift
      /usr/bin/time -f "$what: rc=%x wall %e s" -a -o /tmp/times.txt "$@" > "/tmp/log_$what.txt" 2>&1
      tail -1 /tmp/times.txt; tail -3 "/tmp/log_$what.txt"; }
: > /tmp/times.txt
T kernels_gpu python3 -m pytest -q -m gpu tests/test_kernels.py -x
T profile_gelu make profile WORKLOAD=gelu
T profile_rmsnorm_file make profile WORKLOAD=examples/rmsnorm.py
T systems_train_step make systems WORKLOAD=train_step ITERS=5
T profile_script make profile SCRIPT="python3 examples/rmsnorm.py" NAME=rmsnorm_script
T profile_user_train make profile SCRIPT="python3 tests/data/tools/user_train.py --steps 2 --emit-nvtx-steps 1" NAME=user_train NVTX_INCLUDE="train/step/fwd/"
R=runs/train_step/latest
nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum:base \
  --format csv --force-overwrite=true --output /tmp/train_step_2025.3 $R/trace.sqlite > /tmp/stats.log 2>&1
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version; ncu --version | tail -1
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__)"; } > /tmp/env.txt 2>&1
cp /tmp/log_*.txt /tmp/times.txt /tmp/env.txt /tmp/train_step_2025.3_*.csv reports/ 2>/dev/null
tar cJf "$OUT/reports.tar.xz" reports/gelu reports/rmsnorm reports/train_step reports/rmsnorm_script reports/user_train reports/log_*.txt reports/times.txt reports/env.txt reports/train_step_2025.3_*.csv 2>/dev/null
tar cJf "$OUT/train_step.tar.xz" $R/trace.sqlite $R/meta.json $R/torch_logs.txt runs/*/latest-ncu/ncu_raw.csv runs/*/latest-ncu/meta.json 2>/dev/null
cat /tmp/times.txt; ls -la "$OUT"
