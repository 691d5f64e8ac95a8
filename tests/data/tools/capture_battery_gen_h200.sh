#!/bin/bash
# The generated battery on the H200 (through the device tool, from the repository root,
# after `source .gpu-kit/env.sh`): for each SEED, battery_gen/program.py under Nsight
# Systems with CPU and Python sampling, exported with its JSON, scrubbed and trimmed, with
# the program's truth -> $OUT/battery_gen.tar.xz (gen_<seed>/{trace.sqlite,truth.json,log.txt}).
#   SEEDS="11 12" LOOPS=40 STEPS=16 [ROUNDS=2] [MAX_ROUNDS=8] [PROFILE_S=250] [PY_HZ=2000] [BACKTRACE=sync:1000] \
#     bash tests/data/tools/capture_battery_gen_h200.sh
set -u
T=tests/data/tools
R=${CAPTURE_DIR:-/tmp/battery_gen}; rm -rf "$R"; mkdir -p "$R"
bash $T/machine_env.sh > "$R/env.txt" 2>&1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
FLAGS="--trace=cuda,nvtx,osrt --sample=process-tree --python-sampling=true --cpuctxsw=none --force-overwrite=true"
[ -n "${PY_HZ:-}" ] && FLAGS="$FLAGS --python-sampling-frequency=$PY_HZ"   # nsys: 1-2000 Hz
[ -n "${BACKTRACE:-}" ] && FLAGS="$FLAGS --cudabacktrace=$BACKTRACE"         # e.g. sync:1000
dirs=""
for seed in ${SEEDS:-11 12}; do
  d=$R/gen_$seed; mkdir -p "$d"
  /usr/bin/time -f "seed $seed profile wall %e s" timeout ${PROFILE_S:-250} nsys profile $FLAGS --output="$d/raw" \
    python3 $T/battery_gen/program.py --seed $seed --loops ${LOOPS:-40} --steps ${STEPS:-16} \
    --rounds ${ROUNDS:-1} --max-rounds ${MAX_ROUNDS:-${ROUNDS:-1}} --out "$d/truth.json" > "$d/log.txt" 2>&1
  tail -4 "$d/log.txt"
  nsys export --type=sqlite --include-json=true --force-overwrite=true --output="$d/raw.sqlite" \
    "$d/raw.nsys-rep" >> "$d/log.txt" 2>&1
  python3 -m analysis scrub "$d/raw.sqlite" "$d/trace.sqlite" >> "$d/log.txt" 2>&1
  python3 $T/trim_sampled.py "$d/trace.sqlite" >> "$d/log.txt" 2>&1
  rm -f "$d/raw.sqlite" "$d/raw.nsys-rep"
  ls -la "$d"
  dirs="$dirs gen_$seed"
done
cd "$R" && XZ_OPT=-9T16 tar cJf "$OUT/battery_gen.tar.xz" env.txt $dirs
# The device tool brings back files of 16 MiB at most: a larger tarball comes back in parts
# (cat battery_gen.tar.xz.part* > battery_gen.tar.xz).
if [ "$(stat -c %s "$OUT/battery_gen.tar.xz")" -gt 15728640 ]; then
  split -b 15M -d "$OUT/battery_gen.tar.xz" "$OUT/battery_gen.tar.xz.part" && rm "$OUT/battery_gen.tar.xz"
fi
ls -la "$OUT"
