#!/bin/bash
# A script written for no tool (stranger_train.py: no NVTX ranges), profiled the way a user
# runs the toolkit on it (python -m workflows.nsys --sample cpu -- python3 stranger_train.py),
# once per variant (--fix none|item|mask|batch|all), each export scrubbed and trimmed; and
# each variant's own ms per step run twice without the profiler. -> $OUT/stranger.tar.xz
#   [VARIANTS="none item mask batch all"] [STEPS=300] bash tests/data/tools/capture_stranger_h200.sh
set -u
T=tests/data/tools
R=${CAPTURE_DIR:-/tmp/stranger}; rm -rf "$R"; mkdir -p "$R/runs"
bash $T/machine_env.sh > "$R/env.txt" 2>&1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
for v in ${VARIANTS:-none item mask batch all}; do
  for k in 1 2; do python3 $T/stranger_train.py --fix $v --steps ${STEPS:-300} >> "$R/plain.txt" 2>&1; done
  d=$R/$v; mkdir -p "$d"
  /usr/bin/time -f "$v profile wall %e s" python3 -m workflows.nsys --name stranger_$v --runs "$R/runs" \
    --sample cpu -- python3 $T/stranger_train.py --fix $v --steps ${STEPS:-300} > "$d/log.txt" 2>&1
  grep -h "ms_per_step\|wall" "$d/log.txt"
  run=$(readlink -f "$R/runs/stranger_$v/latest")
  cp "$run/meta.json" "$d/"
  python3 -m analysis scrub "$run/trace.sqlite" "$d/trace.sqlite" >> "$d/log.txt" 2>&1
  python3 $T/trim_sampled.py "$d/trace.sqlite" >> "$d/log.txt" 2>&1
  ls -la "$d/trace.sqlite"
done
cat "$R/plain.txt"
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/stranger.tar.xz" env.txt plain.txt */log.txt */meta.json */trace.sqlite
# The device tool brings back files of 16 MiB at most: a larger tarball comes back in parts.
if [ "$(stat -c %s "$OUT/stranger.tar.xz")" -gt 15728640 ]; then
  split -b 15M -d "$OUT/stranger.tar.xz" "$OUT/stranger.tar.xz.part" && rm "$OUT/stranger.tar.xz"
fi
ls -la "$OUT"
