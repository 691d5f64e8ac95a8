#!/bin/bash
# Captures tests/data/loops_ab/ on the H200 test machine (capture_ab_h200.sh):
# tools/runs_ab.py, loops whose cost as they run differs from their host ranges' (a
# checkpoint every eighth step, a fill the next op overwrites), each beside its fix in one
# process, with its truth. Writes $OUT/loops_ab.tar.xz.
exec bash tests/data/tools/capture_ab_h200.sh loops_ab runs_ab.py "$@"
