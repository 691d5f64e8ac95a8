#!/bin/bash
# Captures the diagnosis battery (tests/data/battery) on the H200 test machine (through the
# device tool, from the repository root, after `source .gpu-kit/env.sh`): seven programs
# under tests/data/tools/battery, each with one planted cause and a fixed twin (--fixed),
# profiled the way `make systems SCRIPT=...` does; one more capture of the runtime
# compilation program with CPU and Python sampling. Per capture: the scrubbed export,
# NVIDIA's own `nsys stats` CSVs (the references), the program's log. Writes
# $OUT/battery1.tar.xz and $OUT/battery2.tar.xz (each half as soon as it is done).
set -u
R=${CAPTURE_DIR:-/tmp/battery}; rm -rf "$R"; mkdir -p "$R"
B=tests/data/tools/battery
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
SAMPLED="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=process-tree --python-sampling=true --cpuctxsw=none --force-overwrite=true"
REPORTS="--report nvtx_sum --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum:base --report cuda_gpu_mem_time_sum --report cuda_gpu_mem_size_sum --report cuda_api_sum --report osrt_sum"
{ nvidia-smi; nsys --version
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda,'cudnn',torch.backends.cudnn.version())"
} > "$R/env.txt" 2>&1
SAID="planted|fixed"
source tests/data/tools/capture_one.sh
pack() {  # $1 tarball name, rest: scenarios
  local name=$1; shift
  (cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/$name" env.txt "$@") && ls -la "$OUT/$name"
}
for p in input_starved pageable_copy item_sync launch_bound; do
  capture "${p}_planted" "$FLAGS" python3 $B/$p.py
  capture "${p}_fixed" "$FLAGS" python3 $B/$p.py --fixed
done
pack battery1.tar.xz input_starved_planted input_starved_fixed pageable_copy_planted \
  pageable_copy_fixed item_sync_planted item_sync_fixed launch_bound_planted launch_bound_fixed
for p in dynamic_shapes fp32_gemm compile_warmup; do
  capture "${p}_planted" "$FLAGS" python3 $B/$p.py
  capture "${p}_fixed" "$FLAGS" python3 $B/$p.py --fixed
done
capture dynamic_shapes_sampled "$SAMPLED" python3 $B/dynamic_shapes.py --tokens 20
pack battery2.tar.xz dynamic_shapes_planted dynamic_shapes_fixed fp32_gemm_planted \
  fp32_gemm_fixed compile_warmup_planted compile_warmup_fixed dynamic_shapes_sampled
