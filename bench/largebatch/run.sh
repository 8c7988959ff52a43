#!/usr/bin/env bash
# bench/largebatch/run.sh BUILD_DIR [OUT_PREFIX]
#
# Issue 23's large-batch benchmark (a benchmark, not a test): Fashion-MNIST (Debian's
# dataset-fashion-mnist), dpt-train's default network for it (ResNet-50 v1.5 at width 1/8, 28 px),
# the same number of epochs for every run, a global batch of 256 (the main job's recipe) against
# 4,096 emulated on one rank by --accumulate 16 micro-batches of 256 (BN statistics per 256, as on
# 16 GPUs), with
#   sgd-256     momentum SGD, lr 0.4 per 256, cosine, warm-up 0.2 epochs (dpt-train's defaults)
#   sgd-4096    the same rule scaled linearly (lr 6.4), warm-up 1 epoch (Goyal et al.)
#   lars-4096   LARS as the MLPerf reference: eta 0.001, lr 10 at this batch (its initial rate below
#               a 16k batch), poly power 2 to 1e-4 after a 1-epoch warm-up
#   rmsw-4096   RMSprop warm-up (Akiba et al.) with the linearly scaled rate 6.4, no lr warm-up
#               (the RMSprop phase is the warm-up): SGD share 1/2 at epoch 1, 1 from epoch 1.5
#   sgd-decay   batch 256, lr 0.4 halved at epochs 1 and 2 (multistep)
#   sgd-grow    the same lr kept, the batch doubled instead (--batch-schedule 0:256,1:512,2:1024):
#               Smith et al.'s "don't decay the learning rate, increase the batch size", the
#               ChainerMN 90-epoch recipe's batch change (fewer updates for the same epochs)
# Writes OUT_PREFIX.md and OUT_PREFIX.json (default bench/results/largebatch): top-1 after every
# epoch, the final top-1, time and images/s of each run, the machine.
# Knobs: EPOCHS (3), RUNS (all six, comma-separated names), DPT_TRAIN.  ~33 min on a 2-core VM.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: run.sh BUILD_DIR [OUT_PREFIX]}" && pwd)
out=${2:-$root/bench/results/largebatch}
T=${DPT_TRAIN:-$build/trainer/dpt-train}
[[ -x "$T" ]] || { echo "run.sh: $T is missing: build dpt-train in $build" >&2; exit 2; }
epochs=${EPOCHS:-3}
runs=${RUNS:-sgd-256,sgd-4096,lars-4096,rmsw-4096,sgd-decay,sgd-grow}
work=$(mktemp -d /tmp/dpt-largebatch.XXXXXX)
trap 'rm -rf "$work"' EXIT
common=(--dataset fashion-mnist --epochs "$epochs" --seed 1 --log-every 50) # + --batch-size 256 unless scheduled
declare -A args=(
  [sgd-256]=""
  [sgd-4096]="--accumulate 16 --warmup-epochs 1"
  [lars-4096]="--accumulate 16 --optimizer lars --lr 10 --lr-batch 4096 --schedule poly --power 2 --end-lr 0.0001 --warmup-epochs 1"
  [rmsw-4096]="--accumulate 16 --optimizer rmsprop-warmup --warmup-epochs 0 --rmsprop-center 1 --rmsprop-period 1"
  [sgd-decay]="--schedule multistep --milestones 1,2 --gammas 0.5,0.5"
  [sgd-grow]="--batch-schedule 0:256,1:512,2:1024 --schedule const"
)
t0=$(date +%s)
for name in ${runs//,/ }; do
  [[ -n "${args[$name]+x}" ]] || { echo "run.sh: unknown run '$name' (known: ${!args[*]})" >&2; exit 2; }
  batch="--batch-size 256"
  [[ "${args[$name]}" == *--batch-schedule* ]] && batch=""
  echo "run.sh: $name: dpt-train ${common[*]} $batch ${args[$name]}" >&2
  # shellcheck disable=SC2086
  "$T" "${common[@]}" $batch ${args[$name]} --report "$work/$name.json" >"$work/$name.log" 2>&1 ||
    { echo "run.sh: $name failed:" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
done
commit=$(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)
/usr/bin/python3 - "$work" "$out" "$runs" "$epochs" "$(($(date +%s) - t0))" "$commit" \
    "bench/largebatch/run.sh ${1}${2:+ $2}" "$(printf '%q ' "${common[@]}")" <<'PY'
import json, os, platform, sys
work, out, runs, epochs, secs, commit, command, common = sys.argv[1:9]
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
isa = "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else "SSE"
rows = []
for name in runs.split(","):
    r = json.load(open(os.path.join(work, name + ".json")))
    cfg, tr = r["config"], r["results"]["train"]
    curve = [p.get("top1") for p in tr.get("accuracy_curve", [])]
    bs = cfg.get("batch_schedule")
    gb = "->".join(str(p["global_batch"]) for p in bs) if bs else str(cfg["batch_per_rank"])
    rows.append({"run": name, "global_batch": gb, "optimizer": cfg.get("optimizer", "sgd"),
                 "schedule": cfg["schedule"], "peak_lr": cfg["peak_lr"], "warmup_epochs": cfg["warmup_epochs"],
                 "steps": cfg["steps"], "final_top1": tr["final_top1"], "top1_by_epoch": curve,
                 "seconds": tr["seconds"], "images_per_s": tr["images_per_s_rank0"],
                 "args": open(os.path.join(work, name + ".log")).readline().strip()})
doc = {"schema": "dpt.bench.largebatch/1", "command": command, "commit": commit, "epochs": int(epochs),
       "seconds": int(secs), "machine": {"cpu": cpu, "isa": isa, "cores": os.cpu_count(),
       "kernel": platform.release()}, "runs": rows}
json.dump(doc, open(out + ".json", "w"), indent=1)
pct = lambda v: "%.2f%%" % (100 * v) if isinstance(v, (int, float)) else "?"
with open(out + ".md", "w") as f:
    f.write("# Large-batch recipes on Fashion-MNIST (issue 23)\n\n")
    f.write("Produced by `%s` in %s s at dpt %s.  Machine: %s (%s), %d cores.  Every run: `dpt-train %s` "
            "plus `--batch-size 256` (unless scheduled) and its options below, 1 rank (the 4,096-image batches "
            "are 16 micro-batches of 256: BN statistics per 256, as on 16 GPUs).\n\n" % (command, secs, commit, cpu, isa, os.cpu_count(), common.strip()))
    f.write("| run | global batch | optimizer | schedule (peak lr, warm-up) | steps | top-1 by epoch | final top-1 | time |\n")
    f.write("|---|---:|---|---|---:|---|---:|---:|\n")
    for w in rows:
        f.write("| %s | %s | %s | %s (%.4g, %g ep) | %d | %s | **%s** | %.0f s |\n" % (
            w["run"], w["global_batch"], w["optimizer"], w["schedule"], w["peak_lr"], w["warmup_epochs"], w["steps"],
            ", ".join(pct(v) for v in w["top1_by_epoch"]), pct(w["final_top1"]), w["seconds"]))
    f.write("\n")
print(open(out + ".md").read())
PY
