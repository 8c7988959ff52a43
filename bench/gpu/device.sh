#!/usr/bin/env bash
# bench/gpu/device.sh OUTDIR [check.sh options...] — on the GPU machine, from the checkout's root,
# with bench/gpu/prepare.sh's files carried: unpacks the build, sources .gpu/env.sh, and runs
# bench/gpu/check.sh.  dpt gets a cuDNN at least as new as the headers it was built with: the
# machine's own first (env.sh's), else the newest found (PyTorch's wheel carries one).  The first
# visit's H200 had 9.14 under 9.19 headers.  CUDNN_LIB_DIR set by the caller wins.
set -uo pipefail
# a warm machine's second call keeps the ignored .gpu/build folder but not all of what the first
# unpacked into it (the second visit: no dpt-train there): unpacked again unless dpt-train is there
[[ -x .gpu/build/trainer/dpt-train ]] || { rm -rf .gpu/build && tar -xJf .gpu/build.txz -C .gpu; } || exit 2
. .gpu/env.sh
if [[ -f .gpudata/fmnist.tar.xz && ! -d .gpudata/fashion-mnist ]]; then # prepare.sh's, for the mnist phase
  mkdir -p .gpudata/fashion-mnist && tar -xJf .gpudata/fmnist.tar.xz -C .gpudata/fashion-mnist
fi
want=$(cat .gpu/cudnn-headers 2>/dev/null || echo 0)
[[ -n "${CUDNN_LIB_DIR:-}" ]] || CUDNN_LIB_DIR=$(python3 bench/gpu/cudnn_pick.py "$want")
if [[ -n "$CUDNN_LIB_DIR" ]]; then export CUDNN_LIB_DIR; else unset CUDNN_LIB_DIR; fi
echo "device.sh: cuDNN headers $want; dpt's cuDNN: ${CUDNN_LIB_DIR:-as env.sh found it}"
exec bash bench/gpu/check.sh "$@"
