#!/bin/bash
# Issue 15 on real data (device tool kind nvidia-h200-x2, from the repository root, after
# `source .gpu-kit/env.sh`): a long DDP run of user_ddp.py under one `nsys profile` around
# torchrun (two processes, NCCL kernels on their own streams overlapping compute, backward
# on the autograd threads), exported; then the analysis in one window and in many small
# windows on worker processes, both against NVIDIA's `nsys stats` on the same file.
# Writes $OUT/issue15.json and the logs.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
STEPS=${STEPS:-1500}
R=${CAPTURE_DIR:-/tmp/issue15}; rm -rf "$R"; mkdir -p "$R"
FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; nsys --version
  python3 -c "import torch,pandas;print('torch',torch.__version__,'pandas',pandas.__version__)"
} > "$OUT/env.txt" 2>&1
nsys profile $FLAGS --output="$R/trace" python3 -m torch.distributed.run --nproc-per-node 2 \
  tests/data/tools/user_ddp.py --steps "$STEPS" --straggler 1 > "$OUT/capture_log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/trace.sqlite" "$R/trace.nsys-rep" > /dev/null 2>&1
T=/usr/bin/time
$T -f "nsys_stats %e s %M KiB" nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum \
  --report cuda_gpu_kern_sum:base --format csv --force-overwrite=true --output "$R/stats" \
  "$R/trace.sqlite" > "$OUT/stats_log.txt" 2>&1
$T -f "whole %e s %M KiB" python3 -m analysis systems "$R/trace.sqlite" -o "$R/whole" \
  --jobs 1 --chunk-rows 1000000000 >> "$OUT/stats_log.txt" 2>&1
$T -f "windows %e s %M KiB" python3 -m analysis systems "$R/trace.sqlite" -o "$R/windows" \
  --jobs 8 --chunk-rows 20000 >> "$OUT/stats_log.txt" 2>&1
python3 - "$R" "$OUT/env.txt" > "$OUT/issue15.json" <<'PY'
import json, sqlite3, sys
from pathlib import Path
from analysis.documents.types import SystemsDoc
from analysis.documents.io import load_json_doc
from analysis.load.nsys_chunks import plan
from analysis.commands.nsys_stats import mismatches
r = Path(sys.argv[1])
docs = {k: json.loads((r / k / "systems.json").read_text()) for k in ("whole", "windows")}
for d in docs.values():
    d["source"].pop("path")
doc = load_json_doc(r / "windows" / "systems.json", SystemsDoc)
diffs = mismatches(doc, r / "stats_nvtx_kern_sum_base.csv", r / "stats_nvtx_gpu_proj_sum.csv")
conn = sqlite3.connect(r / "trace.sqlite")
n = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in (
    "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS")}
import csv
kern = {}
for row in csv.DictReader(open(r / "stats_cuda_gpu_kern_sum_base.csv")):
    kern[row["Name"]] = kern.get(row["Name"], 0) + int(row["Instances"])
ours = {k.name: k.count for k in doc.kernel_summary}
env = (Path(sys.argv[2]).read_text().split("\n") if len(sys.argv) > 2 else [])
print(json.dumps({"environment": env, "rows": n, "windows": plan(r / "trace.sqlite", 20000).windows,
                  "windowed_equals_whole": docs["whole"] == docs["windows"],
                  "differing_keys": [k for k in docs["whole"] if docs["whole"][k] != docs["windows"].get(k)],
                  "nsys_stats_mismatches": len(diffs), "first": diffs[:5],
                  "kernel_summary_equals_cuda_gpu_kern_sum": kern == ours,
                  "ranges": len(doc.ranges), "pids": sorted({e.pid for e in doc.ranges}),
                  "streams": sorted({(b.device, b.stream) for b in doc.gpu_busy if b.stream is not None}),
                  "findings": [f.rule for f in doc.findings][:12]}, indent=2))
PY
cat "$OUT/stats_log.txt" | grep -E "^(nsys_stats|whole|windows) "
cat "$OUT/issue15.json"
ls -la "$R" | head
