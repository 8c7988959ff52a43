#!/usr/bin/env bash
# bench/thintree/run.sh BUILD_DIR [OUT_PREFIX]
#
# The thin-tree benchmark of issue 9: a real Slurm 22.05 cluster of NODES nodes in
# network namespaces (netns.sh: LEAVES leaf switches, node links and leaf uplinks at
# RATE, node names interleaving the leaves), one slurmd per node namespace, the dpt
# SPANK plugin in plugstack.conf.  The same SIZE-byte all-reduce (dpt-bench, ring
# communicator, one rank per node) runs with the ring in
#   planned  srun --dpt: the plugin plans from topology.conf, DPT_RANK = ring position
#            (also the hierarchical communicator, same launch)
#   slurm    plain srun: the ring follows SLURM_PROCID (Slurm's name order)
#   random   plain srun + ring-order.sh: the "random" order of `dpt-topo plan`
#   fp16     srun --dpt, fp16 on the wire (issue 4's figure on a rate-limited link)
#   pair, pair-fp16   2 nodes (n1, n2: across the spine), fp32 vs fp16 on the wire: the
#            same figure without 8 ranks' fp16 conversions sharing 2 cores
# and every variant is compared with `dpt-topo plan`'s predicted time (--host-gbps /
# --uplink-gbps = RATE) and the bandwidth bound 2(p-1)/p * S / B.  The bytes that
# crossed each leaf uplink (tc counters) are recorded per run: they show how many
# ring flows shared the busiest uplink.
#
# Writes OUT_PREFIX.json (dpt.bench.thintree/1) and OUT_PREFIX.md (default
# bench/results/thintree).  Knobs (environment): NODES=8 LEAVES=2 RATE=500mbit
# SIZE=64M REPEAT=3 ITERS=2 WARMUP=1 VARIANTS="planned slurm random fp16 pair pair-fp16 mpi"
# ("mpi": Open MPI's MPI_Allreduce in Slurm's order; slow, so once with 1 iteration).  Needs root (ip netns,
# tc, nsenter, unshare).  Everything it starts is stopped and every namespace removed
# on exit, also on INT/TERM; a launch that fails or exceeds LAUNCH_TIMEOUT (240 s) is
# retried once and recorded (DPT_BENCH_KEEP=1 keeps the work directory: logs, raw output).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [OUT_PREFIX]}" && pwd)
out=${2:-$root/bench/results/thintree}
nodes=${NODES:-8}
leaves=${LEAVES:-2}
rate=${RATE:-500mbit}
size=${SIZE:-64M}
repeat=${REPEAT:-3}
iters=${ITERS:-2}
warmup=${WARMUP:-1}
variants=${VARIANTS:-planned slurm random fp16 pair pair-fp16 mpi}
export DPT_TT_PREFIX=${DPT_TT_PREFIX:-dptt}
py=${DPT_BENCH_PYTHON:-python3}

bench="$build/runtime/dpt-bench"
topo="$build/tools/dpt-topo"
plugin="$build/spank/spank_dpt.so"
for f in "$bench" "$topo" "$plugin"; do
  [[ -e "$f" ]] || { echo "run.sh: $f is missing: build dpt-bench, dpt-topo and spank_dpt in $build" >&2; exit 2; }
done
[[ "$rate" =~ ^([0-9]+)mbit$ ]] || { echo "run.sh: RATE=$rate: expected <N>mbit" >&2; exit 2; }
gbps=$("$py" -c "print(${BASH_REMATCH[1]} / 1000)")

. "$here/cluster-up.sh"
tt_cluster_up run "$nodes" "$leaves" "$rate"

plan_args=(plan --topology-conf "$cluster/topology.conf" --nodes "n[1-$nodes]" --gpus-per-node 0
  --ranks-per-node 1 --size "$size" --host-gbps "$gbps" --uplink-gbps "$gbps" --no-report --json)
"$topo" "${plan_args[@]}" >"$work/plan.json"
"$topo" "${plan_args[@]}" --fp16 >"$work/plan-fp16.json"
random_order=$("$py" -c 'import json,sys
d = json.load(open(sys.argv[1]))
print(" ".join(next(a for a in d["alternatives"] if a["name"] == "random")["node_order"]))' "$work/plan.json")

# --kill-on-bad-exit: a rank that dies ends the step (the others would poll forever)
common=(-N "$nodes" --ntasks-per-node=1 -c "$(nproc)" --mpi=pmix --kill-on-bad-exit=1)
bargs=(allreduce --min-bytes "$size" --max-bytes "$size" --no-resnet --iters "$iters" --warmup "$warmup" --json)
: >"$work/runs.jsonl"
: >"$work/failures.jsonl"
for r in $(seq 1 "$repeat"); do
  for v in $variants; do
    case "$v" in
      planned) cmd=(srun "${common[@]}" --dpt "$bench" "${bargs[@]}" --comm ring,hierarchical) ;;
      slurm)   cmd=(srun "${common[@]}" "$bench" "${bargs[@]}" --comm ring) ;;
      random)  cmd=(srun "${common[@]}" "$here/ring-order.sh" "$random_order" "$bench" "${bargs[@]}" --comm ring) ;;
      fp16)    cmd=(srun "${common[@]}" --dpt "$bench" "${bargs[@]}" --comm ring --fp16) ;;
      pair)    cmd=(srun -N 2 -w "n1,n2" --ntasks-per-node=1 -c "$(nproc)" --mpi=pmix --kill-on-bad-exit=1 --dpt "$bench" "${bargs[@]}" --comm ring) ;;
      pair-fp16) cmd=(srun -N 2 -w "n1,n2" --ntasks-per-node=1 -c "$(nproc)" --mpi=pmix --kill-on-bad-exit=1 --dpt "$bench" "${bargs[@]}" --comm ring --fp16) ;;
      mpi)     # slow (~5x the planned ring): once, one iteration
               ((r == 1)) || continue
               cmd=(srun "${common[@]}" "$bench" allreduce --min-bytes "$size" --max-bytes "$size"
                    --no-resnet --iters 1 --warmup 0 --json --comm mpi) ;;
      *) echo "run.sh: unknown variant $v (planned slurm random fp16 pair pair-fp16 mpi)" >&2; exit 2 ;;
    esac
    for attempt in 1 2; do # a failed launch is retried once and recorded in failures.jsonl
      before=$(tt_uplinks "$leaves")
      t0=$(date +%s.%N)
      # in the background: INT/TERM run the trap at once (not after the launch), and it stops
      # the launch (timeout forwards TERM to srun, which cancels the step)
      (cd "$work" && exec timeout "${LAUNCH_TIMEOUT:-240}" "${in_ctl[@]}" "${cmd[@]}" --report "$work/report-$v-$r.json") \
        >"$work/out-$v-$r.json" 2>"$work/err-$v-$r.txt" &
      launch_pid=$!
      if wait "$launch_pid"; then
        launch_pid=
        break
      fi
      launch_pid=
      echo "run.sh: $v (run $r, attempt $attempt) failed: ${cmd[*]}" >&2
      tail -n 30 "$work/err-$v-$r.txt" >&2
      "$py" -c 'import json,sys; print(json.dumps({"variant": sys.argv[1], "run": int(sys.argv[2]), "attempt": int(sys.argv[3]), "command": sys.argv[4], "stderr_tail": open(sys.argv[5], errors="replace").read()[-3000:]}))' \
        "$v" "$r" "$attempt" "${cmd[*]}" "$work/err-$v-$r.txt" >>"$work/failures.jsonl"
      ((attempt == 1)) || exit 1
    done
    t1=$(date +%s.%N)
    after=$(tt_uplinks "$leaves")
    "$py" - "$v" "$r" "$work/out-$v-$r.json" "$work/report-$v-$r.json" "$before" "$after" "$t0" "$t1" \
      "${cmd[*]} --report R.json" >>"$work/runs.jsonl" <<'PY'
import json, sys
v, r, outf, repf, before, after, t0, t1, cmd = sys.argv[1:]
out = json.load(open(outf))
rep = json.load(open(repf))
before, after = json.loads(before), json.loads(after)
ranks = rep.get("ranks") or [{}]
ar = ranks[0].get("phases", {}).get("allreduce", {})  # rank 0's iterations of the first comm
print(json.dumps({"variant": v, "run": int(r), "command": cmd, "wall_s": float(t1) - float(t0),
                  "bench": out, "uplink_bytes": {k: after[k] - before[k] for k in after},
                  "rank0_iterations": ar, "launcher": rep.get("job", {}).get("launcher")}))
PY
    echo "run.sh: run $r $v: $(tail -1 "$work/runs.jsonl" | "$py" -c 'import json,sys
d = json.loads(sys.stdin.read()); print(", ".join("%s %.3f s" % (x["comm"], x["time_us"] / 1e6) for x in d["bench"]["results"]))')" >&2
  done
done
t_end=$(date +%s)
"$py" "$here/summarize.py" --plan "$work/plan.json" --plan-fp16 "$work/plan-fp16.json" \
  --runs "$work/runs.jsonl" --out "$out" --nodes "$nodes" --leaves "$leaves" --rate "$rate" \
  --size "$size" --iters "$iters" --warmup "$warmup" --repeat "$repeat" --elapsed $((t_end - t_start)) \
  --command "bench/thintree/run.sh $build${2:+ $2}" --random-order "$random_order" \
  --failures "$work/failures.jsonl"
