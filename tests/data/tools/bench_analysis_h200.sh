#!/bin/bash
# Paired timings of `python -m analysis systems` against NVIDIA's `nsys stats` (2025.3,
# the one users have) on the H200 test machine's host CPU, on the same files: the NVTX-heavy
# emit_nvtx capture and the gelu capture replayed 1000x (about 1M kernels).
set -u
unpack() { python3 -c "from analysis.io import unpack_xz; from pathlib import Path; unpack_xz(Path('$1'))"; }
unpack tests/data/emit_nvtx_200; unpack tests/data/gelu
python3 -c "from analysis.bench import replicate; from pathlib import Path; print(replicate(Path('tests/data/gelu/trace.sqlite'), Path('/tmp/t1000.sqlite'), 1000))"
for f in tests/data/emit_nvtx_200/trace.sqlite /tmp/t1000.sqlite; do
  for i in 1 2 3; do
    /usr/bin/time -f "$f analysis %e s %M KB" python3 -m analysis systems $f -o /tmp/a > /dev/null 2>> /tmp/b.txt
    /usr/bin/time -f "$f nsys_stats %e s %M KB" nsys stats --report nvtx_kern_sum:base --report nvtx_gpu_proj_sum \
      --format csv --force-overwrite=true --output /tmp/s $f > /dev/null 2>> /tmp/b.txt
  done
done
grep " s " /tmp/b.txt; nproc; lscpu | grep "Model name"
