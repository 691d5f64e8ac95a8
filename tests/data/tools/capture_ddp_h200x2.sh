#!/bin/bash
# Captures the multi-GPU test data on two H200s (device tool kind nvidia-h200-x2, from the
# repository root, after `source .gpu-kit/env.sh`): user_ddp.py under torchrun, profiled
# both ways users do it: one `nsys profile` around torchrun (one export, two processes)
# and `torchrun --no-python nsys profile -o rank%q{LOCAL_RANK}` (one export per rank),
# with a straggler rank and balanced; NVIDIA's `nsys stats` CSVs for each export.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R"/{ddp_single,ddp_straggler,ddp_balanced,stats}
P=tests/data/tools/user_ddp.py
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
RUN="python3 -m torch.distributed.run --nproc-per-node 2"
{ nvidia-smi; nvidia-smi topo -m; nsys --version
  python3 -c "import torch;print('torch',torch.__version__,'cuda',torch.version.cuda,'nccl',torch.cuda.nccl.version())"
} > "$R/env.txt" 2>&1
nsys profile $FLAGS --output="$R/ddp_single/trace" $RUN $P --straggler 1 > "$R/ddp_single/log.txt" 2>&1
$RUN --no-python nsys profile $FLAGS --output="$R/ddp_straggler/rank%q{LOCAL_RANK}" python3 $P --straggler 1 > "$R/ddp_straggler/log.txt" 2>&1
$RUN --no-python nsys profile $FLAGS --output="$R/ddp_balanced/rank%q{LOCAL_RANK}" python3 $P > "$R/ddp_balanced/log.txt" 2>&1
for rep in "$R"/ddp_*/*.nsys-rep; do
  db=${rep%.nsys-rep}.sqlite; s=$(basename "$(dirname "$rep")")_$(basename "${rep%.nsys-rep}")
  nsys export --type=sqlite --force-overwrite=true --output="$db" "$rep" > /dev/null 2>&1 || echo "export $rep FAILED"
  nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum --report cuda_gpu_kern_sum:base \
    --format csv --force-overwrite=true --output "$R/stats/${s}_2025.3" "$db" > "$R/stats/$s.log" 2>&1 || echo "stats $s FAILED"
  ls -la "$db"
done
tail -3 "$R"/ddp_*/log.txt
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/ddp.tar.xz" ddp_*/*.sqlite ddp_*/log.txt stats env.txt
ls -la "$OUT"
