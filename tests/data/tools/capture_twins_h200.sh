#!/bin/bash
# Captures the twin battery (tests/data/twins) on the H200 test machine, through the device
# tool, from the repository root, after `source .gpu-kit/env.sh`: each program of
# tests/data/tools/twins runs its planted loop, its fix and a control interleaved in one
# process (twins.py), profiled the way `make systems SCRIPT=...` does (TORCH_LOGS for the
# graph-break program). Per capture: the scrubbed export, NVIDIA's own `nsys stats` CSVs (the
# references), the program's log. Arguments: a tarball name, then the programs, each
# optionally `name:sampled` (CPU and Python sampling, exported with --include-json=true,
# then trimmed to commit: tests/data/tools/trim_sampled.py).
# Writes $OUT/<tarball>.
set -u
NAME=$1; shift
R=${CAPTURE_DIR:-/tmp/twins}; mkdir -p "$R"
T=tests/data/tools/twins
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
SAMPLED="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=process-tree --python-sampling=true --cpuctxsw=none --force-overwrite=true"
REPORTS="--report nvtx_sum --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum:base --report cuda_gpu_mem_time_sum --report cuda_gpu_mem_size_sum --report cuda_api_sum --report osrt_sum"
[ -f "$R/env.txt" ] || { nvidia-smi; nsys --version
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda,'cudnn',torch.backends.cudnn.version())"
} > "$R/env.txt" 2>&1
done_list=""
for spec in "$@"; do
  p=${spec%%:*}; s=$p; flags=$FLAGS; json=""
  if [ "$spec" != "$p" ]; then s=${p}_sampled; flags=$SAMPLED; json="--include-json=true"; fi
  mkdir -p "$R/$s"
  ( cd $T && TORCH_LOGS=graph_breaks,recompiles TORCH_LOGS_OUT="$R/$s/torch_logs.txt" \
    /usr/bin/time -f "$s profile wall %e s" nsys profile $flags --output="$R/$s/raw" \
    python3 $p.py ) > "$R/$s/log.txt" 2>&1
  grep -E "median|Error|error" "$R/$s/log.txt" | tail -2
  nsys export --type=sqlite $json --force-overwrite=true --output="$R/$s/raw.sqlite" \
    "$R/$s/raw.nsys-rep" >> "$R/$s/log.txt" 2>&1
  python3 -m analysis scrub "$R/$s/raw.sqlite" "$R/$s/trace.sqlite" >> "$R/$s/log.txt" 2>&1
  [ -n "$json" ] && python3 tests/data/tools/trim_sampled.py "$R/$s/trace.sqlite" >> "$R/$s/log.txt" 2>&1
  rm -f "$R/$s/raw.sqlite" "$R/$s/raw.nsys-rep"
  [ -s "$R/$s/torch_logs.txt" ] || rm -f "$R/$s/torch_logs.txt"
  nsys stats $REPORTS --format csv --force-overwrite=true --output "$R/$s/nsys_stats" \
    "$R/$s/trace.sqlite" > "$R/$s/stats.log" 2>&1 || echo "$s: stats FAILED"
  ls -la "$R/$s/trace.sqlite" | awk '{print $5, $9}'
  done_list="$done_list $s"
done
(cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/$NAME" env.txt $done_list) && ls -la "$OUT/$NAME"
