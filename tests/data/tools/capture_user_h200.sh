#!/bin/bash
# Captures the "user program" test data on the H200 test machine (through the device
# tool, from the repository root, after `source .gpu-kit/env.sh`): plain PyTorch programs
# written for neither tool (user_train.py, user_serve.py), profiled the way a user would,
# with NVIDIA's own `nsys stats` CSVs and wall times for each export, and an Nsight
# Compute report taken with ncu's default section set. Writes two tarballs to $OUT.
set -u
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R"/{emit_nvtx_200,train_step_user,serve_recompiles,ncu,stats}
T=tests/data/tools
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
{ nvidia-smi; nsys --version; ncu --version
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)"
} > "$R/env.txt" 2>&1
capture() {  # $1 scenario, rest: the program
  local s=$1; shift
  /usr/bin/time -f "$s profile wall %e s" nsys profile $FLAGS --output="$R/$s/trace" "$@" > "$R/$s/log.txt" 2>&1
  tail -2 "$R/$s/log.txt"
  nsys export --type=sqlite --force-overwrite=true --output="$R/$s/trace.sqlite" "$R/$s/trace.nsys-rep" >> "$R/$s/log.txt" 2>&1
  /usr/bin/time -f "$s nsys stats wall %e s, max RSS %M KB" nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum \
    --format csv --force-overwrite=true --output "$R/stats/${s}_2025.3" "$R/$s/trace.sqlite" > "$R/stats/$s.log" 2>&1
  tail -1 "$R/stats/$s.log"
  nsys stats --report cuda_gpu_kern_sum:base --format csv --force-overwrite=true \
    --output "$R/stats/${s}_2025.3" "$R/$s/trace.sqlite" >> "$R/stats/$s.log" 2>&1
  ls -la "$R/$s/trace.sqlite"
}
capture emit_nvtx_200 python3 $T/user_train.py --warmup 2 --steps 0 --emit-nvtx-steps 200
capture train_step_user python3 $T/user_train.py --warmup 2 --steps 5 --emit-nvtx-steps 1
TORCH_LOGS=recompiles,graph_breaks TORCH_LOGS_OUT="$R/serve_recompiles/torch_logs.txt" \
  capture serve_recompiles python3 $T/user_serve.py
# Nsight Compute as most users run it: default section set, a launch cap, no NVTX.
/usr/bin/time -f "ncu default set wall %e s" ncu --clock-control none -c 40 -f -o "$R/ncu/user_train_default" \
  python3 $T/user_train.py --warmup 0 --steps 1 > "$R/ncu/user_train_default.log" 2>&1
tail -2 "$R/ncu/user_train_default.log"
ncu -i "$R/ncu/user_train_default.ncu-rep" --csv --page raw > "$R/ncu/user_train_default_raw.csv"
wc -l "$R/ncu/user_train_default_raw.csv"
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/emit_nvtx_200.tar.xz" emit_nvtx_200/trace.sqlite emit_nvtx_200/log.txt \
  && XZ_OPT=-9T16 tar cJf "$OUT/user.tar.xz" train_step_user/trace.sqlite train_step_user/log.txt \
     serve_recompiles/trace.sqlite serve_recompiles/log.txt serve_recompiles/torch_logs.txt \
     ncu/*.csv ncu/*.log stats env.txt
ls -la "$OUT"
