#!/usr/bin/env bash
# Fuzz every parser for SECONDS each (default 60) and write the results to
# bench/results/fuzz.md (executions, exec/s, corpus size, coverage, crashes).
#   bash tests/fuzz/run-fuzzers.sh [SECONDS] [NAME...]
# Builds with clang (-fsanitize=fuzzer,address,undefined) in its own build
# directory (DPT_FUZZ_BUILD, default build-fuzz).  New corpus entries stay in
# <build>/tests/fuzz/work/<name>/ (copy the interesting ones to corpus/ by
# hand); crashing inputs go to <build>/tests/fuzz/artifacts/<name>/: add each
# to tests/fuzz/regress/<name>/ with the fix.  Exit 1 when anything crashed.
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
secs=${1:-60}
shift || true
build=${DPT_FUZZ_BUILD:-$root/build-fuzz}
jobs=$(nproc 2>/dev/null || echo 2)
out=$root/bench/results/fuzz.md

extra=()
# Until tests/CMakeLists.txt adds tests/fuzz itself, include it from the top level.
grep -Eq '^[^#]*add_subdirectory\(fuzz\)' tests/CMakeLists.txt ||
  extra+=("-DCMAKE_PROJECT_INCLUDE=$root/tests/fuzz/standalone.cmake")
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
  -DDPT_SANITIZE=ON -DDPT_FUZZ=ON -DDPT_CUDA=OFF "${extra[@]}" >"$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; echo "run-fuzzers: cmake configure failed" >&2; exit 1; }
cmake --build "$build" -j "$jobs" --target fuzzers

fz=$build/tests/fuzz
names=("$@")
if [ ${#names[@]} -eq 0 ]; then
  for f in "$fz"/fuzzer_*; do names+=("${f##*/fuzzer_}"); done
fi
export LSAN_OPTIONS="suppressions=$root/tests/fuzz/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"

rows=() crashed=0
for n in "${names[@]}"; do
  mkdir -p "$fz/work/$n" "$fz/artifacts/$n"
  inputs=("$root/tests/fuzz/corpus/$n")
  [ -d "$root/tests/fuzz/regress/$n" ] && inputs+=("$root/tests/fuzz/regress/$n")
  dict=()
  [ -f "$root/tests/fuzz/dict/$n.dict" ] && dict=("-dict=$root/tests/fuzz/dict/$n.dict")
  log=$fz/artifacts/$n/run.log
  before=$(find "$fz/artifacts/$n" -type f ! -name run.log | wc -l)
  # as in tests/fuzz/CMakeLists.txt: hwloc dlclose()s its libxml2 plugin, so node_xml needs
  # the slow unwinder for the libhwloc.so leak suppression to match
  if [ "$n" = node_xml ]; then export ASAN_OPTIONS=fast_unwind_on_malloc=0; else unset ASAN_OPTIONS; fi
  echo "== fuzzer_$n: $secs s"
  start=$(date +%s.%N)
  set +e
  "$fz/fuzzer_$n" -max_total_time="$secs" -print_final_stats=1 -rss_limit_mb=2560 -malloc_limit_mb=2048 \
    -timeout=20 "${dict[@]}" -artifact_prefix="$fz/artifacts/$n/" "$fz/work/$n" "${inputs[@]}" >"$log" 2>&1
  rc=$?
  set -e
  end=$(date +%s.%N)
  after=$(find "$fz/artifacts/$n" -type f ! -name run.log | wc -l)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -Eo 'cov: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  ft=$(grep -Eo 'ft: [0-9]+' "$log" | tail -1 | cut -d' ' -f2)
  corp=$(find "$fz/work/$n" -type f | wc -l)
  seeds=$(find "${inputs[@]}" -type f | wc -l)
  t=$(awk -v a="$start" -v b="$end" 'BEGIN { printf "%.0f", b - a }')
  eps=$(awk -v e="${execs:-0}" -v t="$t" 'BEGIN { printf "%.0f", (t > 0 ? e / t : 0) }')
  new=$((after - before))
  status=ok
  if [ $rc -ne 0 ] || [ $new -gt 0 ]; then
    status="CRASH (exit $rc, $new new artifact(s) in artifacts/$n; $(grep -m1 -Eo 'ERROR: [A-Za-z]+: [a-z-]+|property violated: .*|out-of-memory.*' "$log" || echo see run.log))"
    crashed=1
  fi
  echo "   $execs executions, $eps/s, coverage $cov edges, corpus $corp, $status"
  rows+=("| $n | $t | ${execs:-0} | $eps | $seeds | $corp | ${cov:-?} | ${ft:-?} | $status |")
done

{
  echo "# Fuzzing results"
  echo
  echo "\`bash tests/fuzz/run-fuzzers.sh $secs\` on $(date -u +%Y-%m-%d) ($(uname -m), $(nproc) cores," \
       "$(clang --version | head -1 | sed 's/ (.*//'), libFuzzer, -fsanitize=fuzzer,address,undefined," \
       "commit $(git rev-parse --short HEAD 2>/dev/null || echo ?))."
  echo "One harness per parser of outside input (tests/fuzz/fuzz_<name>.c), seeded from the real"
  echo "fixtures (tests/fuzz/corpus/<name>); \"corpus\" is the working corpus at the end (seeds plus"
  echo "what libFuzzer kept), \"cov\"/\"features\" libFuzzer's edge and feature counts.  A crash is any"
  echo "sanitizer report, violated property, leak, timeout (> 20 s) or allocation over 2 GiB."
  echo
  echo "| harness | seconds | executions | exec/s | seed inputs | corpus | cov | features | result |"
  echo "|---|---:|---:|---:|---:|---:|---:|---:|---|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Crashes found while writing the harnesses (each is a regression input under"
  echo "tests/fuzz/regress/<name>/, run by ctest fuzz_regress.<name> in every build):"
  echo
  if [ -f "$root/tests/fuzz/regress/FINDINGS.md" ]; then
    sed '1,/^---$/d' "$root/tests/fuzz/regress/FINDINGS.md"
  fi
} >"$out"
echo "results: $out"
exit $crashed
