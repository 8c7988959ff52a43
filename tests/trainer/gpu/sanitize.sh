#!/bin/sh
# sanitize.sh TOOL CMD... — run CMD under `compute-sanitizer --tool TOOL` (memcheck,
# racecheck) and fail on any reported error; exit 77 (ctest: SKIPPED, with the reason)
# where there is no GPU or no compute-sanitizer.  compute-sanitizer is looked up on
# PATH, next to nvcc, then in /usr/local/cuda/bin (DPT_COMPUTE_SANITIZER overrides).
tool=$1
shift
cs=${DPT_COMPUTE_SANITIZER:-}
if [ -z "$cs" ]; then
  cs=$(command -v compute-sanitizer 2>/dev/null)
  [ -z "$cs" ] && command -v nvcc >/dev/null 2>&1 && [ -x "$(dirname "$(command -v nvcc)")/compute-sanitizer" ] &&
    cs="$(dirname "$(command -v nvcc)")/compute-sanitizer"
  [ -z "$cs" ] && [ -x /usr/local/cuda/bin/compute-sanitizer ] && cs=/usr/local/cuda/bin/compute-sanitizer
fi
if ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIPPED gpu-sanitize ($tool): no GPU (nvidia-smi -L fails)"
  exit 77
fi
if [ -z "$cs" ]; then
  echo "SKIPPED gpu-sanitize ($tool): compute-sanitizer not found (PATH, next to nvcc, /usr/local/cuda/bin)"
  exit 77
fi
out=$(mktemp)
"$cs" --tool "$tool" --error-exitcode 99 --print-limit 20 "$@" >"$out" 2>&1
rc=$?
cat "$out"
if [ $rc = 77 ]; then rm -f "$out"; exit 77; fi # the test itself skipped
if [ $rc != 0 ] || grep -q "ERROR SUMMARY: [1-9]" "$out" || grep -q "RACECHECK SUMMARY: [1-9]" "$out"; then
  echo "FAIL gpu-sanitize ($tool): exit $rc: $*"
  rm -f "$out"
  exit 1
fi
rm -f "$out"
echo "ok: compute-sanitizer --tool $tool clean: $*"
