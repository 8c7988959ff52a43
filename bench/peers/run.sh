#!/usr/bin/env bash
# bench/peers/run.sh BUILD_DIR [OUT_PREFIX]
#
# dpt side by side with what users would otherwise run, on this machine, same ranks:
#  1. all-reduce, 2 and 4 ranks, 64 MiB, ResNet-50's 102,228,128 B and 128 MiB (fp32):
#     dpt's ring / hierarchical / mpi communicators (dpt-launch -n P -- dpt-bench; "mpi"
#     is Open MPI's MPI_Allreduce called through dpt_comm) vs PyTorch torch.distributed
#     gloo (torchrun --standalone, gloo_allreduce.py: the same timing and busbw);
#     REPEAT launches each, interleaved; median of the launches.
#  2. launch overhead of a no-op, 2 ranks, N runs interleaved (median):
#     `dpt-launch -n 2 -- true`, `dpt-launch -n 2 -- python3 noop.py`,
#     `torchrun --standalone --nproc_per_node 2 noop.py` (also with --monitor_interval 0.1).
# Writes OUT_PREFIX.json (dpt.bench.peers/1) and OUT_PREFIX.md (default
# bench/results/peers).  Knobs: REPEAT=3 ITERS=3 WARMUP=1 RANKS="2 4" LAUNCH_N=5 MAX_BYTES=128M
# TORCH_PYTHON (a python3 with torch; default: the first of python3, /usr/bin/python3).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [OUT_PREFIX]}" && pwd)
out=${2:-$root/bench/results/peers}
repeat=${REPEAT:-3}
iters=${ITERS:-3}
warmup=${WARMUP:-1}
ranks=${RANKS:-2 4}
launch_n=${LAUNCH_N:-5}
max_bytes=${MAX_BYTES:-128M} # 100M: 64 MiB and ResNet-50's 102,228,128 B only (run-all's budget)
launch="$build/launcher/dpt-launch"
bench="$build/runtime/dpt-bench"
for f in "$launch" "$bench"; do
  [[ -x "$f" ]] || { echo "run.sh: $f is missing: build dpt-launch and dpt-bench in $build" >&2; exit 2; }
done
tpy=${TORCH_PYTHON:-}
if [[ -z "$tpy" ]]; then
  for c in python3 /usr/bin/python3; do
    if "$c" -c 'import torch' 2>/dev/null; then tpy=$c; break; fi
  done
fi
[[ -n "$tpy" ]] || { echo "run.sh: no python3 with torch (set TORCH_PYTHON)" >&2; exit 2; }
work=$(mktemp -d /tmp/dpt-peers.XXXXXX)
# torch 1.13 under Python 3.11 (Debian 12): torchrun's default --redirects/--tee "0"
# parse to None (Std is an IntFlag; 3.11 no longer iterates its 0 member) and it
# crashes in to_map(); "1" (stdout) parses, so workers' stdout goes to the console
# and a log file (prefixed "[defaultN]:"): results travel through --out instead.
torchrun=("$tpy" -m torch.distributed.run --redirects 1 --tee 1 --log_dir "$work/torchrun-logs")
trap 'rm -rf "$work"' EXIT
: >"$work/noop.py"
case "$max_bytes" in
  128M) sizes="67108864,102228128,134217728" ;;
  100M) sizes="67108864,102228128" ;;
  *) echo "run.sh: MAX_BYTES=$max_bytes: 100M (64 MiB + ResNet-50's gradient) or 128M" >&2; exit 2 ;;
esac
t_start=$(date +%s)
: >"$work/allreduce.jsonl"
for np in $ranks; do
  for r in $(seq "$repeat"); do
    cmd=("$launch" -n "$np" --oversubscribe -- "$bench" allreduce --comm ring,hierarchical,mpi --min-bytes 64M
      --max-bytes "$max_bytes" --iters "$iters" --warmup "$warmup" --json --report "$work/report.json")
    (cd "$work" && "${cmd[@]}") >"$work/dpt.json" 2>"$work/dpt.err" ||
      { echo "run.sh: failed: ${cmd[*]}" >&2; cat "$work/dpt.err" >&2; exit 1; }
    "$tpy" -c 'import json,sys; print(json.dumps({"tool": "dpt", "ranks": int(sys.argv[1]), "run": int(sys.argv[2]), "command": sys.argv[3], "bench": json.load(open(sys.argv[4]))}))' \
      "$np" "$r" "${cmd[*]}" "$work/dpt.json" >>"$work/allreduce.jsonl"
    cmd=("${torchrun[@]}" --standalone --nproc_per_node "$np" "$here/gloo_allreduce.py" --sizes "$sizes"
      --iters "$iters" --warmup "$warmup" --out "$work/gloo.json")
    rm -f "$work/gloo.json"
    (cd "$work" && "${cmd[@]}") >"$work/gloo.out" 2>"$work/gloo.err" ||
      { echo "run.sh: failed: ${cmd[*]}" >&2; cat "$work/gloo.err" >&2; exit 1; }
    "$tpy" -c 'import json,sys; print(json.dumps({"tool": "torch-gloo", "ranks": int(sys.argv[1]), "run": int(sys.argv[2]), "command": sys.argv[3], "bench": json.load(open(sys.argv[4]))}))' \
      "$np" "$r" "${cmd[*]}" "$work/gloo.json" >>"$work/allreduce.jsonl"
    echo "run.sh: all-reduce $np ranks, run $r done" >&2
  done
done

# launch overhead: wall time of a no-op job, interleaved
: >"$work/launch.jsonl"
for i in $(seq "$launch_n"); do
  for v in dpt-launch-true dpt-launch-python torchrun-python torchrun-python-fastpoll; do
    case "$v" in
      dpt-launch-true) cmd=("$launch" -n 2 -- true) ;;
      dpt-launch-python) cmd=("$launch" -n 2 -- "$tpy" "$work/noop.py") ;;
      torchrun-python) cmd=("${torchrun[@]}" --standalone --nproc_per_node 2 "$work/noop.py") ;;
      # torchrun's agent polls its workers every --monitor_interval (default 5 s)
      torchrun-python-fastpoll) cmd=("${torchrun[@]}" --monitor_interval 0.1 --standalone --nproc_per_node 2 "$work/noop.py") ;;
    esac
    t0=$(date +%s.%N)
    (cd "$work" && "${cmd[@]}") >/dev/null 2>"$work/launch.err" ||
      { echo "run.sh: failed: ${cmd[*]}" >&2; cat "$work/launch.err" >&2; exit 1; }
    t1=$(date +%s.%N)
    "$tpy" -c 'import json,sys; print(json.dumps({"variant": sys.argv[1], "run": int(sys.argv[2]), "seconds": float(sys.argv[4]) - float(sys.argv[3]), "command": sys.argv[5]}))' \
      "$v" "$i" "$t0" "$t1" "${cmd[*]}" >>"$work/launch.jsonl"
  done
done
t_end=$(date +%s)
"$tpy" "$here/summarize.py" --allreduce "$work/allreduce.jsonl" --launch "$work/launch.jsonl" \
  --out "$out" --elapsed $((t_end - t_start)) --command "bench/peers/run.sh $build${2:+ $2}" \
  --iters "$iters" --warmup "$warmup" --repeat "$repeat"
