#!/bin/bash
# Captures tests/data/queue_ab/ on the H200 test machine (capture_ab_h200.sh):
# tools/queue_ab.py, a loop whose host fills the launch queue beside the same loop with its
# GEMM on TF32, in one process, with its truth. Writes $OUT/queue_ab.tar.xz.
exec bash tests/data/tools/capture_ab_h200.sh queue_ab queue_ab.py "$@"
