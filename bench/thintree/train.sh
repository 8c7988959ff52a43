#!/usr/bin/env bash
# bench/thintree/train.sh BUILD_DIR [OUT_PREFIX]
#
# The shape of ChainerMN's 10 GbE table (ResNet-50 on ImageNet: InfiniBand 6.96 h,
# 10 GbE 21.3 h, 10 GbE + fp16 all-reduce + double buffering 7.71 h, accuracy alike)
# as a short CPU training run on the emulated thin tree (netns.sh: NODES nodes in
# LEAVES leaves, one slurmd per node namespace, real Slurm, `srun --dpt`): dpt-train,
# one rank per node, Fashion-MNIST (Debian's dataset-fashion-mnist), ResNet-50 v1.5
# small stem at width WIDTH, batch 32 per rank, STEPS steps, validation at the end, in
#   fast       node links and uplinks at FAST
#   slow       the same at SLOW; SLOW=auto (default) picks it from the fast run so that
#              the fp32 all-reduce takes about twice a step's compute, as 10 GbE did for
#              ChainerMN (21.3 h vs 6.96 h: communication about 2x computation):
#              rate = C * 2(p-1)/p * 4 * parameters * 8 bit / (2 * compute p50 of the fast
#              run), C = SLOW_C (2.0: the ring's measured all-reduce time over the bound
#              at a tbf rate on this emulation, 0.60 s vs 0.30 s at 60 Mbit/s, 0.92 vs 0.45
#              at 40).  The compute time follows the machine's load, so a fixed rate is
#              communication-bound by a different factor on a quiet and on a busy machine.
#   slow-fp16-dbuf  SLOW + --fp16-allreduce --double-buffering
# (VARIANTS may add slow-fp16 and slow-dbuf, the two halves, and slow-b0 / slow-buckets:
# SLOW with one all-reduce after backward (--bucket-mb 0) / with BUCKET_MB-MiB gradient
# buckets all-reduced during backward (default 0.25: several buckets at this width).  The rates change in place
# between the runs (netns.sh rate); the cluster is started once.  Per run, from the job
# report (--report): time per step (median over steps = the largest rank's phases.step
# p50, with p90), the exposed all-reduce, final validation top-1; from srun: wall time.
# Writes OUT_PREFIX.json (dpt.bench.thintree-train/1) and OUT_PREFIX.md (default
# bench/results/thintree-train).  Knobs: NODES=4 LEAVES=2 FAST=2000mbit SLOW=auto SLOW_C=2.0
# STEPS=80 WIDTH=0.125 REPEAT=1 VARIANTS="fast slow slow-fp16-dbuf".  Needs root.
# Every daemon is stopped and every namespace removed on exit, INT or TERM.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: train.sh BUILD_DIR [OUT_PREFIX]}" && pwd)
out=${2:-$root/bench/results/thintree-train}
nodes=${NODES:-4}
leaves=${LEAVES:-2}
fast=${FAST:-2000mbit}
slow=${SLOW:-auto}
steps=${STEPS:-80}
width=${WIDTH:-0.125}
repeat=${REPEAT:-1}
variants=${VARIANTS:-fast slow slow-fp16-dbuf}
export DPT_TT_PREFIX=${DPT_TT_PREFIX:-dptt}
py=${DPT_BENCH_PYTHON:-python3}
train="$build/trainer/dpt-train"
plugin="$build/spank/spank_dpt.so"
for f in "$train" "$plugin"; do
  [[ -e "$f" ]] || { echo "train.sh: $f is missing: build dpt-train and spank_dpt in $build" >&2; exit 2; }
done
if ! dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
  echo "train.sh: apt-get install dataset-fashion-mnist" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q dataset-fashion-mnist >/dev/null
fi

. "$here/cluster-up.sh"
tt_cluster_up train "$nodes" "$leaves" "$fast"
# NODES ranks share this machine's cores: 1 thread each
targs=(--comm ring --dataset fashion-mnist --width "$width" --batch-size 32 --iterations "$steps" --threads 1
  --warmup-epochs 0.02 --log-every 20 --prefetch 2)
: >"$work/runs.jsonl"
: >"$work/failures.jsonl"
for r in $(seq 1 "$repeat"); do
  for v in $variants; do
    if [[ "$slow" == auto && "$v" == slow* ]]; then
      slow=$("$py" - "$work/runs.jsonl" "$nodes" "${SLOW_C:-2.0}" "$fast" <<'PY'
import json, math, sys
runs = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
p, c, fast = int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4][:-4])
f = next((r for r in runs if r["variant"] == "fast"), None)
if f is None:
    sys.exit("train.sh: SLOW=auto needs the fast run first (VARIANTS starting with fast)")
bits = 2 * (p - 1) / p * 4 * f["config"]["parameters"] * 8
print("%dmbit" % min(fast, max(5, math.ceil(c * bits / (2 * f["compute_p50_s"]) / 1e6))))
PY
)
      echo "train.sh: SLOW=auto: $slow (fp32 all-reduce ~2x the fast run's compute p50)" >&2
    fi
    case "$v" in
      fast) rate=$fast extra=() ;;
      slow) rate=$slow extra=() ;;
      slow-fp16-dbuf) rate=$slow extra=(--fp16-allreduce --double-buffering) ;;
      slow-fp16) rate=$slow extra=(--fp16-allreduce) ;;
      slow-dbuf) rate=$slow extra=(--double-buffering) ;;
      slow-b0) rate=$slow extra=(--bucket-mb 0) ;;
      slow-buckets) rate=$slow extra=(--bucket-mb "${BUCKET_MB:-0.25}") ;;
      *) echo "train.sh: unknown variant $v (fast slow slow-fp16-dbuf slow-fp16 slow-dbuf slow-b0 slow-buckets)" >&2
         exit 2 ;;
    esac
    bash "$here/netns.sh" rate "$rate" >/dev/null
    cmd=(srun -N "$nodes" --ntasks-per-node=1 -c "$(nproc)" --mpi=pmix --kill-on-bad-exit=1 --dpt
      "$train" "${targs[@]}" ${extra[@]+"${extra[@]}"})
    echo "train.sh: run $r $v (links $rate): ${cmd[*]}" >&2
    for attempt in 1 2; do # a failed launch is retried once and recorded in failures.jsonl
      t0=$(date +%s.%N)
      # in the background: INT/TERM run the trap at once (not after the launch), and it stops
      # the launch (timeout forwards TERM to srun, which cancels the step)
      (cd "$work" && exec timeout "${LAUNCH_TIMEOUT:-400}" "${in_ctl[@]}" "${cmd[@]}" --report "$work/report-$v-$r.json") \
        >"$work/out-$v-$r.txt" 2>&1 &
      launch_pid=$!
      if wait "$launch_pid"; then
        launch_pid=
        break
      fi
      launch_pid=
      echo "train.sh: $v (run $r, attempt $attempt) failed:" >&2
      grep -v '^srun: ' "$work/out-$v-$r.txt" | tail -n 20 >&2
      "$py" -c 'import json,sys; print(json.dumps({"variant": sys.argv[1], "run": int(sys.argv[2]), "attempt": int(sys.argv[3]), "command": sys.argv[4], "output_tail": open(sys.argv[5], errors="replace").read()[-3000:]}))' \
        "$v" "$r" "$attempt" "${cmd[*]}" "$work/out-$v-$r.txt" >>"$work/failures.jsonl"
      ((attempt == 1)) || exit 1
    done
    t1=$(date +%s.%N)
    "$py" - "$v" "$r" "$rate" "$work/report-$v-$r.json" "$t0" "$t1" "${cmd[*]} --report R.json" \
      "$work/out-$v-$r.txt" >>"$work/runs.jsonl" <<'PY'
import json, sys
v, r, rate, repf, t0, t1, cmd, outf = sys.argv[1:]
rep = json.load(open(repf))
ph = [x["phases"] for x in rep["ranks"]]
lc = [e for e in rep.get("learning_curve", []) if e.get("val_top1") is not None]
print(json.dumps({
    "variant": v, "run": int(r), "rate": rate, "command": cmd, "wall_s": float(t1) - float(t0),
    "steps": min(x["steps"] for x in rep["ranks"]), "ranks": rep["job"]["ranks"], "hosts": rep["job"]["hosts"],
    "step_p50_s": max(p["step"]["p50_s"] for p in ph), "step_p90_s": max(p["step"]["p90_s"] for p in ph),
    "step_mean_s": max(p["step"]["mean_s"] for p in ph),
    "step_p50_s_per_rank": [p["step"]["p50_s"] for p in ph],
    "compute_p50_s": max(p["forward"]["p50_s"] + p["backward"]["p50_s"] for p in ph),
    "allreduce_exposed_p50_s": max(p.get("allreduce_exposed", {}).get("p50_s", 0) for p in ph),
    "images_per_s": rep["throughput"]["images_per_s"],
    "wire": rep["software"].get("wire"), "config": rep.get("config"),
    "final_val_top1": lc[-1]["val_top1"] if lc else None, "final_train_loss": lc[-1].get("train_loss") if lc else None,
    "ring": (rep.get("plan") or {}).get("nodes"),
    "log_tail": open(outf, errors="replace").read().splitlines()[-4:]}))
PY
    echo "train.sh: $(tail -1 "$work/runs.jsonl" | "$py" -c 'import json,sys
d = json.loads(sys.stdin.read()); print("%s: %.3f s/step (p90 %.3f), exposed all-reduce %.3f s, top-1 %s, wall %.0f s" % (d["variant"], d["step_p50_s"], d["step_p90_s"], d["allreduce_exposed_p50_s"], d["final_val_top1"], d["wall_s"]))')" >&2
  done
done
"$py" "$here/summarize_train.py" --runs "$work/runs.jsonl" --out "$out" --nodes "$nodes" --leaves "$leaves" \
  --fast "$fast" --slow "$slow" --slow-rule "${SLOW:-auto} (SLOW_C=${SLOW_C:-2.0})" --steps "$steps" --width "$width" --elapsed $(($(date +%s) - t_start)) \
  --command "bench/thintree/train.sh $build${2:+ $2}" --failures "$work/failures.jsonl"
