#!/usr/bin/env bash
# bench/gpu/run.sh [BUILD_DIR] [OUT_PREFIX]
#
# Issue 14's GPU benchmark: dpt-train (cuda backend) vs PyTorch (torchvision resnet50, the
# peer's own installation: nothing is installed) on one GPU, ResNet-50 at 224 px, synthetic
# data, 1000 classes, interleaved: dpt fp32, torch fp32, dpt tf32, torch tf32 NCHW and
# channels_last, dpt mixed fp16, torch fp16 AMP channels_last, torch.compile fp16 AMP, dpt bf16,
# torch bf16 AMP channels_last, torch.compile bf16; batch 256 then 128.  Median step time after
# warm-up, images/s, peak memory (how: bench/gpu/bench_gpu.py), device, driver, CUDA, cuDNN and
# NCCL versions and the dpt commit.  Writes OUT_PREFIX.md and .json (default
# bench/results/gpu-<device>, e.g. gpu-h100); whole run under 10 minutes (BUDGET=570 s).
# Issue 15: each dpt precision also fused (--fuse on --cuda-graph on), and the per-step kernel
# breakdown (kernels per step, time per class, idle between kernels) of a few configurations at the
# largest batch: PROFILE_STEPS steps after their timed steps, in the same launch (dpt-train
# --profile-steps with CUPTI, torch_gpu.py with torch.profiler), through bench/gpu/breakdown.py.
#
# BUILD_DIR: a build with the cuda backend (default $DPT_GPU_BUILD, which ../shared/gpu/env.sh
# sets).  Without a GPU (no nvidia-smi, no GPU listed, or CUDA_VISIBLE_DEVICES hiding them all)
# it says so and exits 0, writing nothing.
# Knobs: TORCH_PYTHON=python3 BATCHES=256,128 WARMUP=4 STEPS=20 BUDGET=570 ONLY=key,key
# PROFILE_STEPS=3 (0: no breakdown) PROFILE=key,key (default: bench_gpu.py's PROFILE_CONFIGS)
# DPT_BENCH_KEEP=1 (keep the launches' logs and reports in OUT_PREFIX-logs/).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)

# 1. a GPU, as CUDA would see it: nvidia-smi, narrowed by CUDA_VISIBLE_DEVICES
nogpu() { echo "bench/gpu/run.sh: no GPU here ($1): nothing measured, nothing written"; exit 0; }
command -v nvidia-smi >/dev/null 2>&1 || nogpu "nvidia-smi is not installed: no NVIDIA driver"
gpus=$(nvidia-smi --query-gpu=index,name --format=csv,noheader 2>/dev/null) || gpus=""
[[ -n "$gpus" ]] || nogpu "nvidia-smi lists no GPU"
gpu=0
if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
  first=${CUDA_VISIBLE_DEVICES%%,*}
  [[ -n "$first" && "$first" != -* ]] || nogpu "CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' hides every GPU"
  nvidia-smi -i "$first" --query-gpu=name --format=csv,noheader >/dev/null 2>&1 ||
    nogpu "CUDA_VISIBLE_DEVICES='$CUDA_VISIBLE_DEVICES' names no GPU that nvidia-smi knows"
  gpu=$first
fi

# 2. the build and the peer
build=${1:-${DPT_GPU_BUILD:-}}
[[ -n "$build" ]] || { echo "run.sh: give the build directory (or source .gpu/env.sh for \$DPT_GPU_BUILD)" >&2; exit 2; }
build=$(cd "$build" && pwd)
dpt_train=${DPT_TRAIN:-$build/trainer/dpt-train}
[[ -x "$dpt_train" ]] || { echo "run.sh: $dpt_train is missing: build dpt-train in $build" >&2; exit 2; }
help=$("$dpt_train" --help 2>&1 || true)
[[ "$help" == *"this build has: cpu,cuda"* ]] ||
  { echo "run.sh: $dpt_train has no cuda backend (configure with -DDPT_CUDA=ON on a machine with the CUDA toolkit)" >&2; exit 2; }
py=${TORCH_PYTHON:-python3}
"$py" -c 'import torch, torchvision; assert torch.cuda.is_available(), "torch.cuda.is_available() is False"' 2>"/tmp/dpt-gpu-bench-peer.$$" || {
  echo "run.sh: the PyTorch peer ($py: torch + torchvision with CUDA) is not usable here: $(tail -1 "/tmp/dpt-gpu-bench-peer.$$")" >&2
  rm -f "/tmp/dpt-gpu-bench-peer.$$"; exit 2; }
rm -f "/tmp/dpt-gpu-bench-peer.$$"

# 3. the commit dpt-train was built from (a git checkout, or an export with a .commit file)
src=$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
commit=$(cat "$src/.commit" 2>/dev/null || git -C "${src:-$root}" describe --always --dirty 2>/dev/null || echo unknown)

work=$(mktemp -d /tmp/dpt-gpu-bench.XXXXXX)
out=${2:-}
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "${DPT_BENCH_KEEP:-}" ]]; then
    keep=${out:-$root/bench/results/gpu}-logs
    rm -rf "$keep" && mkdir -p "$keep" && cp -r "$work"/. "$keep"/ && echo "run.sh: logs in $keep" >&2
  fi
  rm -rf "$work"
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
echo "run.sh: $(nvidia-smi -i "$gpu" --query-gpu=name,driver_version --format=csv,noheader); dpt $commit; peer $py" >&2
"$py" "$here/bench_gpu.py" --dpt-train "$dpt_train" --work "$work" --gpu "$gpu" --torch-python "$py" \
  ${out:+--out "$out"} --batches "${BATCHES:-256,128}" --warmup "${WARMUP:-4}" --steps "${STEPS:-20}" \
  --budget "${BUDGET:-570}" ${ONLY:+--only "$ONLY"} --dpt-commit "${DPT_BUILD_COMMIT:-$commit}" \
  --profile-steps "${PROFILE_STEPS:-3}" ${PROFILE:+--profile-configs "$PROFILE"} \
  --command "bench/gpu/run.sh $build${2:+ $2}"
