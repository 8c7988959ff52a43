#!/bin/bash
# bench.gpu.nogpu: bench/gpu/run.sh (issue 14) on a machine without a GPU says so on one line,
# exits 0 and writes nothing: no results file (the OUT_PREFIX given, bench/results/gpu-*), no
# work directory.  Three ways to have no GPU, each forced so that they are tested on a GPU
# machine too: no nvidia-smi on PATH (no driver), CUDA_VISIBLE_DEVICES=-1 (every GPU hidden, as
# CUDA would see it), and an empty CUDA_VISIBLE_DEVICES; also without a build directory (the GPU
# is looked for first).
# usage: test_bench_gpu_nogpu.sh bench/gpu/run.sh BUILD_DIR
run=$1 build=$2
results=$(cd "$(dirname "$run")/../results" && pwd)
tmp=$(mktemp -d /tmp/dpt-test-bench-gpu.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
snapshot() { (cd "$results" && ls -l --time-style=+%s.%N gpu-* 2>/dev/null); ls -d /tmp/dpt-gpu-bench.* 2>/dev/null; }
mkdir -p "$tmp/bin" "$tmp/out"
for t in dirname mktemp; do ln -s "$(command -v $t)" "$tmp/bin/$t"; done # a PATH without nvidia-smi
before=$(snapshot)
# check NAME WANT-REGEX ENV... -- ARGS...: exit 0, one line matching, nothing written
check() {
  name=$1 want=$2
  shift 2
  envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$BASH" "$run" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
  rc=$?
  [ $rc = 0 ] || fail "$name: exit $rc, expected 0: $(cat "$tmp/stdout" "$tmp/stderr")"
  grep -Eq "$want" "$tmp/stdout" || fail "$name: no '$want' in: $(cat "$tmp/stdout" "$tmp/stderr")"
  [ "$(wc -l <"$tmp/stdout")" = 1 ] || fail "$name: not one line: $(cat "$tmp/stdout")"
  [ -s "$tmp/stderr" ] && fail "$name: stderr: $(cat "$tmp/stderr")"
  [ -z "$(ls -A "$tmp/out")" ] || fail "$name: wrote $(ls "$tmp/out")"
  [ "$(snapshot)" = "$before" ] || fail "$name: bench/results/gpu-* or /tmp/dpt-gpu-bench.* changed"
}
nothing="nothing measured, nothing written"
check "no driver" "^bench/gpu/run.sh: no GPU here \(nvidia-smi is not installed: no NVIDIA driver\): $nothing\$" \
  PATH="$tmp/bin" -- "$build" "$tmp/out/gpu-test"
check "no driver, no build dir given" "no GPU here \(nvidia-smi is not installed" PATH="$tmp/bin" --
check "CUDA_VISIBLE_DEVICES=-1" "no GPU here \((nvidia-smi is not installed|CUDA_VISIBLE_DEVICES='-1' hides every GPU)" \
  CUDA_VISIBLE_DEVICES=-1 -- "$build" "$tmp/out/gpu-test"
check "CUDA_VISIBLE_DEVICES=''" "no GPU here \((nvidia-smi is not installed|CUDA_VISIBLE_DEVICES='' hides every GPU)" \
  CUDA_VISIBLE_DEVICES= -- "$build" "$tmp/out/gpu-test"
if [ $fails = 0 ]; then echo "ok: bench/gpu/run.sh without a GPU: says so, exit 0, nothing written (4 ways)"; fi
rm -rf "$tmp"
[ $fails = 0 ]
