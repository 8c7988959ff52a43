#!/bin/sh
# The trainer's benchmark moved to bench/train/ (dpt-train vs PyTorch 1.13 vs ChainerMN,
# 1 and 2 ranks, 32 and 224 px; steady-state images/s median over steps with p25-p75,
# time to first step, peak RSS of every rank).  This wrapper keeps the old entry point:
#   bench.sh DPT_TRAIN [OUT_PREFIX]      (BUILD_DIR = DPT_TRAIN's ../..)
# -> OUT_PREFIX.json / OUT_PREFIX.md (default bench/results/train).  bench/README.md
# has the details; results.json here is the first benchmark (4 steps, kept for history).
T=${1:?usage: bench.sh DPT_TRAIN [OUT_PREFIX]}
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "$(dirname "$T")/.." && pwd)
DPT_TRAIN=$T exec bash "$here/../../../bench/train/run.sh" "$build" ${2:+"$2"}
