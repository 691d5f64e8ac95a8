#!/bin/bash
# Captures tests/data/autotune on the H200 test machine (through the device tool, from the
# repository root, after `source .gpu-kit/env.sh`): user_autotune.py, a program that
# compiles with max-autotune and runs a @triton.autotune kernel inside its own NVTX
# ranges, profiled the way a user would; NVIDIA's own `nsys stats` CSVs for the export;
# the analysis's report of it. Writes $OUT/autotune.tar.xz.
set -u
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R"/{autotune,stats,report}
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
{ nvidia-smi; nsys --version
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)"
} > "$R/env.txt" 2>&1
/usr/bin/time -f "profile wall %e s" nsys profile $FLAGS --output="$R/autotune/trace" \
  python3 tests/data/tools/user_autotune.py --steps 8 > "$R/autotune/log.txt" 2>&1
tail -3 "$R/autotune/log.txt"
nsys export --type=sqlite --force-overwrite=true --output="$R/autotune/trace.sqlite" \
  "$R/autotune/trace.nsys-rep" >> "$R/autotune/log.txt" 2>&1
ls -la "$R/autotune/trace.sqlite"
nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum:base \
  --format csv --force-overwrite=true --output "$R/stats/autotune_2025.3" "$R/autotune/trace.sqlite" \
  > "$R/stats/autotune.log" 2>&1 || echo "stats FAILED"
python3 -m analysis systems "$R/autotune/trace.sqlite" -o "$R/report" --quiet 2>&1 | tail -2
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/autotune.tar.xz" autotune/trace.sqlite autotune/log.txt stats report env.txt
ls -la "$OUT"
