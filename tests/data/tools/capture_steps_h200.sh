#!/bin/bash
# Captures the step-finding programs (tests/data/steps) on the H200 test machine (through
# the device tool, from the repository root, after `source .gpu-kit/env.sh`): a training
# loop with no range of its own (tests/data/tools/steps/emit_train.py) under emit_nvtx,
# with NCCL's ranges, its bf16 twin, and once with profiler step markers; profiled as
# `make systems SCRIPT=...` does. Per capture: the scrubbed export, NVIDIA's own
# `nsys stats` CSVs, the program's log. Writes $OUT/steps.tar.xz.
set -u
R=${CAPTURE_DIR:-/tmp/steps}; rm -rf "$R"; mkdir -p "$R"
P=tests/data/tools/steps/emit_train.py
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
REPORTS="--report nvtx_sum --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum:base"
{ nvidia-smi; nsys --version
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda,'nccl',torch.cuda.nccl.version())"
} > "$R/env.txt" 2>&1
source tests/data/tools/capture_one.sh
capture emit_nccl "$FLAGS" python3 $P --nccl
capture emit_nccl_fast "$FLAGS" python3 $P --nccl --fast
capture emit_markers "$FLAGS" python3 $P --markers
(cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/steps.tar.xz" env.txt emit_nccl emit_nccl_fast emit_markers) && ls -la "$OUT/steps.tar.xz"
