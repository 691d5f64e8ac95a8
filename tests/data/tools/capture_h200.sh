#!/bin/bash
# Captures the real test data under tests/data/ on the H200 test machine (run through the
# device tool from the repository root, after `source .gpu-kit/env.sh`). Writes tarballs
# to $OUT: the nsys exports (gelu, matmul_relu, edge), NVIDIA's own `nsys stats` CSVs for
# each, and Nsight Compute raw CSVs in both unit styles, plus the ncu NVTX-filter probes.
set -u
R=${CAPTURE_DIR:-/tmp/capture}; rm -rf "$R"; mkdir -p "$R/stats" "$R/ncu" "$R/edge"
NSYS_FLAGS="--trace=cuda,nvtx,osrt --cuda-graph-trace=node --sample=none --cpuctxsw=none --force-overwrite=true"
{ nvidia-smi; nsys --version; ncu --version
  python3 -c "import torch,triton;print('torch',torch.__version__,'triton',triton.__version__,'cuda',torch.version.cuda)"
} > "$R/env.txt" 2>&1
stats() {  # $1 sqlite, $2 name
  nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum --format csv \
    --force-overwrite=true --output "$R/stats/$2" "$1" > "$R/stats/$2.log" 2>&1 || echo "stats $2 FAILED"
}
for w in ${WORKLOADS:-gelu matmul_relu}; do
  /usr/bin/time -f "$w nsys wall %e s" python3 -m workflows.nsys $w --runs "$R/runs" 2>&1 | tail -5
  stats "$R/runs/$w/latest/trace.sqlite" "$w"
done
if [ "${EDGE:-1}" = 1 ]; then
nsys profile $NSYS_FLAGS --output="$R/edge/trace" python3 tests/data/tools/edge_program.py > "$R/edge/log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/edge/trace.sqlite" "$R/edge/trace.nsys-rep" >> "$R/edge/log.txt" 2>&1
stats "$R/edge/trace.sqlite" edge
nsys profile ${NSYS_FLAGS/--cuda-graph-trace=node/} --output="$R/edge/graphs_default" python3 tests/data/tools/edge_program.py >> "$R/edge/log.txt" 2>&1
nsys export --type=sqlite --force-overwrite=true --output="$R/edge/graphs_default.sqlite" "$R/edge/graphs_default.nsys-rep" >> "$R/edge/log.txt" 2>&1
stats "$R/edge/graphs_default.sqlite" edge_graphs_default
fi
# Which --nvtx-include forms select the kernels of range gelu/naive (nested push/pop, domain profkit)?
for f in "profkit@gelu/naive/" "gelu/naive/" "profkit@gelu/" "profkit@gelu/*/" "regex:profkit@gelu/naive"; do
  ncu --clock-control none --nvtx --nvtx-include "$f" --section LaunchStats --csv --page raw \
    python3 -m workflows.runner gelu --size small --iters 1 --variants naive,triton --out "$R/ncu/probe" > "$R/ncu/probe.csv" 2>&1
  echo "filter '$f': $(grep -c '^"[0-9]' "$R/ncu/probe.csv") kernel rows" | tee -a "$R/ncu/filters.txt"
done
SECTIONS="--section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis --section SpeedOfLight_RooflineChart"
METRICS="--metrics dram__bytes_read.sum,dram__bytes_write.sum,launch__waves_per_multiprocessor"
for w in ${NCU_WORKLOADS:-matmul_relu gelu}; do
  /usr/bin/time -f "$w ncu wall %e s" ncu --clock-control none --nvtx --nvtx-include "profkit@$w/" $SECTIONS $METRICS \
    -f -o "$R/ncu/$w" python3 -m workflows.runner $w --iters 1 --out "$R/ncu/${w}_meta" > "$R/ncu/$w.log" 2>&1
  tail -3 "$R/ncu/$w.log"
  ncu -i "$R/ncu/$w.ncu-rep" --csv --page raw > "$R/ncu/${w}_raw.csv"
  ncu -i "$R/ncu/$w.ncu-rep" --csv --page raw --print-units base > "$R/ncu/${w}_raw_base.csv"
done
cd "$R" && tar czf "$OUT/nsys.tgz" runs/*/2*/*.sqlite runs/*/2*/*.json runs/*/2*/*.txt $(ls edge/*.sqlite edge/log.txt 2>/dev/null) stats env.txt \
  && tar czf "$OUT/ncu.tgz" ncu/*.csv ncu/*.txt ncu/*.log ncu/*_meta
ls -la "$OUT"; cat "$R/ncu/filters.txt"; du -sh runs/*/2*/*.sqlite edge/*.sqlite
