#!/bin/sh
# test_backend_cli: --backend auto and --precision without a usable GPU (the
# test runs with CUDA_VISIBLE_DEVICES=-1).  auto trains on cpu; in a build with
# the GPU backend it says so on one stderr line naming what CUDA answered.
# --precision: unknown values and tf32/mixed with --backend cpu are usage errors
# (exit 2); tf32 with auto falling back to cpu fails clearly (exit 1); the
# precision is recorded in the job report's config.
# usage: test_backend_cli.sh dpt-train REPORT_DIR
T=$1 RD=$2
tmp=$(mktemp -d /tmp/dpt-test-backend-cli.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
export OMP_NUM_THREADS=1
mkdir -p "$RD" && rm -f "$RD"/backend-cli-*.json
common="--dataset synthetic --synthetic-images 64 --image-size 16 --width 0.0625 --batch-size 4
        --iterations 2 --no-val --log-every 100 --prefetch 1"
gpu_build=0
"$T" --help | grep -q "this build has: cpu,cuda" && gpu_build=1
# expect STATUS PATTERN ARGS...: exit status and an extended regex on stdout+stderr
expect() {
  want=$1 pat=$2
  shift 2
  "$T" "$@" >"$tmp/out" 2>"$tmp/err"
  got=$?
  [ "$got" = "$want" ] || { fail "dpt-train $*: exit $got, expected $want: $(tail -3 "$tmp/err")"; return 1; }
  cat "$tmp/out" "$tmp/err" | grep -Eq -- "$pat" || fail "dpt-train $*: no '$pat' in: $(cat "$tmp/err")"
}
expect 0 "backend cpu fp32" $common --backend auto --report "$RD/backend-cli-auto.json"
if [ $gpu_build = 1 ]; then
  grep -q "^dpt-train: no usable GPU (cudaGetDeviceCount.*): training on CPU$" "$tmp/err" ||
    fail "auto without a device: no one-line notice naming cudaGetDeviceCount: $(cat "$tmp/err")"
  [ "$(grep -c 'no usable GPU' "$tmp/err")" = 1 ] || fail "auto: the notice is not one line"
else
  grep -q "no usable GPU" "$tmp/err" && fail "auto in a cpu-only build printed a notice: $(cat "$tmp/err")"
fi
grep -q '"precision": "fp32"' "$RD/backend-cli-auto.json" || fail "the report's config lacks the precision"
grep -q '"backend_memory"' "$RD/backend-cli-auto.json" || fail "the report lacks the backend's memory"
expect 0 "backend cpu fp32" $common --backend cpu --precision fp32 --no-report
# the default width: 1/8 for the 28/32-px datasets, ResNet-50 (width 1) from 64 px (and imagenet)
small="--dataset synthetic --synthetic-images 2 --batch-size 1 --iterations 1 --threads 2 --no-val --no-report --backend cpu"
expect 0 "resnet50-v1.5 w0.125 small-stem 3x32x32" $small
expect 0 "resnet50-v1.5 w1 small-stem 3x64x64 k10\), 23520842 parameters" $small --image-size 64
"$T" --help | grep -q "default: 1 = ResNet-50 for --dataset imagenet" || fail "--help does not say which default width applies"
expect 2 "--precision 'fp16' is unknown: fp32, tf32, mixed or bf16" $common --precision fp16 --no-report
expect 2 "--precision bf16 needs --backend cuda" $common --backend cpu --precision bf16 --no-report
expect 1 "precision 'bf16' is not supported: the cpu backend computes in fp32 only" \
  $common --backend auto --precision bf16 --no-report
expect 2 "--precision mixed needs --backend cuda" $common --backend cpu --precision mixed --no-report
expect 2 "--precision tf32 needs --backend cuda" $common --backend cpu --precision tf32 --no-report
expect 1 "precision 'tf32' is not supported: the cpu backend computes in fp32 only" \
  $common --backend auto --precision tf32 --no-report
# double buffering with nccl is a valid combination now (the pending gradient lives on the device):
# it passes the usage checks and stops only at the missing device (or, in a build without NCCL,
# at the communicator's name)
if "$T" $common --comm nccl --iterations 1 --no-report 2>&1 | grep -q '"nccl" is not in this build'; then
  expect 2 '"nccl" is not in this build' $common --backend cuda --comm nccl --double-buffering --no-report
else
  expect 1 "no usable CUDA device|without the GPU backend" $common --backend cuda --comm nccl --double-buffering --no-report
fi
if [ $gpu_build = 1 ]; then
  expect 1 "no usable CUDA device" $common --backend cuda --precision mixed --no-report
  expect 1 "no usable CUDA device" $common --backend cuda --precision bf16 --no-report
fi
if [ $fails = 0 ]; then echo "ok: --backend auto -> cpu (gpu build: $gpu_build), --precision checks, report config"; rm -rf "$tmp"; fi
[ $fails = 0 ]
