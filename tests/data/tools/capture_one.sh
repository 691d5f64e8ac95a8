#!/bin/bash
# One capture as the H200 capture scripts make it (sourced by them, from the repository
# root): `capture SCENARIO FLAGS PROGRAM...` profiles the program into $R/SCENARIO, exports
# and scrubs it, runs NVIDIA's own `nsys stats` ($REPORTS) on it, keeps the program's log;
# the log lines matching $SAID are echoed.
capture() {  # $1 scenario, $2 flags, rest: the program
  local s=$1 flags=$2; shift 2
  mkdir -p "$R/$s"
  /usr/bin/time -f "$s profile wall %e s" nsys profile $flags --output="$R/$s/raw" "$@" > "$R/$s/log.txt" 2>&1
  grep -E "${SAID:-median}|Error|error" "$R/$s/log.txt" | tail -3
  nsys export --type=sqlite --force-overwrite=true --output="$R/$s/raw.sqlite" "$R/$s/raw.nsys-rep" >> "$R/$s/log.txt" 2>&1
  python3 -m analysis scrub "$R/$s/raw.sqlite" "$R/$s/trace.sqlite" >> "$R/$s/log.txt" 2>&1
  rm -f "$R/$s/raw.sqlite" "$R/$s/raw.nsys-rep"
  nsys stats $REPORTS --format csv --force-overwrite=true --output "$R/$s/nsys_stats" \
    "$R/$s/trace.sqlite" > "$R/$s/stats.log" 2>&1 || echo "$s: stats FAILED"
  ls -la "$R/$s/trace.sqlite" | awk '{print $5, $9}'
}
