#!/usr/bin/env bash
# bench/thintree/torch.sh BUILD_DIR [OUT_PREFIX]
#
# PyTorch on the emulated thin tree (issue 24): the same torch.distributed.all_reduce
# (gloo, SIZE bytes, one rank per node; torch_allreduce.py) on the same allocation,
# launched
#   planned  srun --dpt: RANK = the plan's ring position, MASTER_ADDR/PORT from the plan
#   slurm    plain srun as users' sbatch scripts do it (slurm_env.sh): RANK = SLURM_PROCID,
#            MASTER_ADDR = the first node
# gloo's large all-reduce is a ring in rank order, so the launch alone decides how many
# ring flows share the 4:1 oversubscribed leaf uplinks.  Each is compared with the
# bandwidth bound 2(p-1)/p * S / B and with `dpt-topo plan`'s prediction of the same order;
# the bytes through each leaf uplink (tc counters) show the flows on the busiest one.
#
# Writes OUT_PREFIX.json (dpt.bench.thintree-torch/1) and OUT_PREFIX.md (default
# bench/results/thintree-pytorch).  Knobs: NODES=8 LEAVES=2 RATE=500mbit SIZE=64M (MiB
# suffix M) REPEAT=2 ITERS=2 WARMUP=1; DPT_TORCH_PYTHON (default /usr/bin/python3, Debian's
# python3-torch).  Needs root (ip netns, tc); everything is torn down on exit (cluster-up.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: torch.sh BUILD_DIR [OUT_PREFIX]}" && pwd)
out=${2:-$root/bench/results/thintree-pytorch}
nodes=${NODES:-8} leaves=${LEAVES:-2} rate=${RATE:-500mbit} size=${SIZE:-64M}
repeat=${REPEAT:-2} iters=${ITERS:-2} warmup=${WARMUP:-1}
tpy=${DPT_TORCH_PYTHON:-/usr/bin/python3}
py=python3
export DPT_TT_PREFIX=${DPT_TT_PREFIX:-dptt}
topo="$build/tools/dpt-topo"
plugin="$build/spank/spank_dpt.so"
for f in "$topo" "$plugin"; do
  [[ -e "$f" ]] || { echo "torch.sh: $f is missing: build dpt-topo and spank_dpt in $build" >&2; exit 2; }
done
"$tpy" -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
  { echo "torch.sh: $tpy has no torch.distributed (apt install python3-torch)" >&2; exit 2; }
[[ "$rate" =~ ^([0-9]+)mbit$ ]] || { echo "torch.sh: RATE=$rate: expected <N>mbit" >&2; exit 2; }
rate_mbit=${BASH_REMATCH[1]}
[[ "$size" =~ ^([0-9]+)M$ ]] || { echo "torch.sh: SIZE=$size: expected <N>M" >&2; exit 2; }
bytes=$((BASH_REMATCH[1] * 1048576))
gbps=$("$py" -c "print($rate_mbit / 1000)")

. "$here/cluster-up.sh"
tt_cluster_up torch "$nodes" "$leaves" "$rate"
export GLOO_SOCKET_IFNAME=fab0 # gloo's pairs on the emulated fabric only (the store: management)

plan_args=(plan --topology-conf "$cluster/topology.conf" --nodes "n[1-$nodes]" --gpus-per-node 0
  --ranks-per-node 1 --size "$bytes" --host-gbps "$gbps" --uplink-gbps "$gbps" --no-report --json)
"$topo" "${plan_args[@]}" >"$work/plan.json"
addr1=$("${in_ctl[@]}" scontrol show node n1 | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p')
common=(-N "$nodes" --ntasks-per-node=1 -c "$(nproc)" --kill-on-bad-exit=1)
prog=("$tpy" "$here/torch_allreduce.py" "$bytes" "$iters" "$warmup")
: >"$work/runs.jsonl"
for r in $(seq 1 "$repeat"); do
  for v in planned slurm; do
    case "$v" in
      planned) cmd=(srun "${common[@]}" --dpt "${prog[@]}") ;;
      slurm)   cmd=(srun "${common[@]}" "$here/slurm_env.sh" "$addr1" "${prog[@]}") ;;
    esac
    before=$(tt_uplinks "$leaves")
    t0=$(date +%s.%N)
    (cd "$work" && exec timeout "${LAUNCH_TIMEOUT:-300}" "${in_ctl[@]}" "${cmd[@]}") \
      >"$work/out-$v-$r.json" 2>"$work/err-$v-$r.txt" &
    launch_pid=$!
    if ! wait "$launch_pid"; then
      launch_pid=
      echo "torch.sh: $v (run $r) failed: ${cmd[*]}" >&2
      tail -n 30 "$work/err-$v-$r.txt" >&2
      exit 1
    fi
    launch_pid=
    t1=$(date +%s.%N)
    after=$(tt_uplinks "$leaves")
    "$py" - "$v" "$r" "$work/out-$v-$r.json" "$before" "$after" "$t0" "$t1" "${cmd[*]}" >>"$work/runs.jsonl" <<'PY'
import json, sys
v, r, outf, before, after, t0, t1, cmd = sys.argv[1:]
out = json.loads([l for l in open(outf) if l.startswith("{")][-1])
before, after = json.loads(before), json.loads(after)
print(json.dumps({"variant": v, "run": int(r), "command": cmd, "wall_s": float(t1) - float(t0),
                  "torch": out, "uplink_bytes": {k: after[k] - before[k] for k in after}}))
PY
    echo "torch.sh: run $r $v: $(tail -1 "$work/runs.jsonl" | "$py" -c 'import json,sys
d = json.loads(sys.stdin.read())["torch"]; print(" ".join("%.3f" % t for t in d["times_s"]), "s; ranks on", " ".join(d["hosts"]))')" >&2
  done
done
t_end=$(date +%s)
"$py" "$here/summarize_torch.py" --plan "$work/plan.json" --runs "$work/runs.jsonl" --out "$out" \
  --nodes "$nodes" --leaves "$leaves" --rate-mbit "$rate_mbit" --bytes "$bytes" --iters "$iters" \
  --warmup "$warmup" --repeat "$repeat" --elapsed $((t_end - t_start)) --python "$tpy" \
  --command "bench/thintree/torch.sh $build${2:+ $2}"
