#!/usr/bin/env bash
# bench/run-all.sh BUILD_DIR — every dpt benchmark, one after the other, then
# bench/results/SUMMARY.md (every goal met or not, with the measured ratio).
#
#   thintree        bench/thintree/run.sh: thin tree in network namespaces + real Slurm:
#                   planned ring vs Slurm's order vs random vs hierarchical, fp16 wire
#                   -> results/thintree.{json,md}                      (needs root)
#   thintree-train  bench/thintree/train.sh: ChainerMN's 10 GbE table on the thin tree:
#                   dpt-train at fast links / slow links / slow + fp16 + double buffering
#                   -> results/thintree-train.{json,md}                (needs root)
#   thintree-buckets the same cluster at slow links: one all-reduce after backward vs
#                   0.25 MiB gradient buckets all-reduced during backward, 2 runs each
#                   -> results/thintree-buckets.{json,md}              (needs root)
#   cleanup         bench/thintree/interrupt_test.sh: SIGINT in the middle of a training
#                   step on the emulated cluster, then no namespace, daemon or rank left;
#                   netns_test.sh -> results/cleanup.json              (needs root)
#   peers           bench/peers/run.sh: all-reduce vs Open MPI and torch gloo; dpt-launch
#                   vs torchrun -> results/peers.{json,md}
#   allreduce       issue 4's CPU all-reduce table -> results/peers-allreduce-cpu.md (the
#                   committed allreduce-cpu.md is issue 4's): from the peers step's dpt-bench
#                   launches (bench/allreduce/from_peers.py; they are the same launches), or
#                   bench/allreduce/run.sh when peers is not run
#   spank           tests/slurm/bench_spank_overhead.sh: srun --dpt vs srun
#                   -> results/peers-srun-overhead.md
#   train           bench/train/run.sh: dpt-train vs PyTorch 1.13 vs ChainerMN, 1 and 2
#                   ranks, 32 and 224 px -> results/train.{json,md}
#
# Benchmarks are commands, not tests: the machine (2 cores, shared) makes absolute
# figures noisy; every comparison is a ratio measured in one run.  Each step's
# output goes to bench/results/logs/<step>.log; a failing step is reported in the
# summary and the others still run.  ONLY="thintree peers ..." runs a subset.
# Budget: under 20 minutes here (the repeat counts below are chosen for it:
# THINTREE_REPEAT=2 THINTREE_SIZE=32M PEERS_REPEAT=2 PEERS_LAUNCH_N=3 PEERS_MAX_BYTES=100M
# (64 MiB and ResNet-50's 102,228,128 B; 128M adds 128 MiB); each
# script's own knobs pass through the environment).
# INT/TERM stop the running step (its own trap removes namespaces and daemons).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: run-all.sh BUILD_DIR}" && pwd)
res="$here/results"
mkdir -p "$res/logs"
only=${ONLY:-thintree thintree-train thintree-buckets cleanup peers allreduce spank train}
py=python3
t_all=$(date +%s)
: >"$res/logs/steps.tsv"

step() { # step NAME COMMAND...: run, time, record status
  local name=$1 t0 rc
  shift
  if [[ " $only " != *" $name "* ]]; then return 0; fi
  echo "run-all: $name: $*" >&2
  t0=$(date +%s)
  "$@" >"$res/logs/$name.log" 2>&1
  rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - t0))" "$*" >>"$res/logs/steps.tsv"
  echo "run-all: $name: exit $rc in $(($(date +%s) - t0)) s (log: bench/results/logs/$name.log)" >&2
}
skip() { printf '%s\tskipped\t0\t%s\n' "$1" "$2" >>"$res/logs/steps.tsv"; echo "run-all: $1: skipped: $2" >&2; }

trap 'echo "run-all: interrupted" >&2; exit 130' INT
trap 'echo "run-all: terminated" >&2; exit 143' TERM
step thintree env REPEAT="${THINTREE_REPEAT:-2}" SIZE="${THINTREE_SIZE:-32M}" bash "$here/thintree/run.sh" "$build" "$res/thintree"
step thintree-train bash "$here/thintree/train.sh" "$build" "$res/thintree-train"
step thintree-buckets env VARIANTS="fast slow-b0 slow-buckets slow-b0 slow-buckets" STEPS=40 \
  bash "$here/thintree/train.sh" "$build" "$res/thintree-buckets"
step cleanup bash "$here/thintree/interrupt_test.sh" "$build" "$res/cleanup.json"
step peers env REPEAT="${PEERS_REPEAT:-2}" LAUNCH_N="${PEERS_LAUNCH_N:-3}" MAX_BYTES="${PEERS_MAX_BYTES:-100M}" bash "$here/peers/run.sh" "$build" "$res/peers"
if [[ " $only " == *" peers "* ]]; then # the same dpt-bench launches as peers': do not repeat them
  step allreduce "$py" "$here/allreduce/from_peers.py" "$res/peers.json" "$res/peers-allreduce-cpu.md"
else
  step allreduce env REPEAT="${ALLREDUCE_REPEAT:-2}" bash "$here/allreduce/run.sh" "$build" "$res/peers-allreduce-cpu.md"
fi
if [[ -f "$root/tests/slurm/bench_spank_overhead.sh" && -e "$build/spank/spank_dpt.so" ]]; then
  step spank bash -c 'bash "$1" "$2" "$3" 10 >"$4"' _ "$root/tests/slurm/bench_spank_overhead.sh" \
    "$build/spank/spank_dpt.so" "$root/tests/topology/fixtures/mn1-8gpu-4hca.xml" "$res/peers-srun-overhead.md"
else
  skip spank "tests/slurm/bench_spank_overhead.sh or $build/spank/spank_dpt.so missing"
fi
if [[ " $only " == *" train "* && ! -x "${DPT_TRAIN:-$build/trainer/dpt-train}" ]]; then
  skip train "${DPT_TRAIN:-$build/trainer/dpt-train} not built (cmake --build $build --target dpt-train, or DPT_TRAIN=path)"
else
  step train bash "$here/train/run.sh" "$build" "$res/train"
fi
elapsed=$(($(date +%s) - t_all))
"$py" - "$res" "$elapsed" "bench/run-all.sh $build" <<'PY'
import json, os, re, sys
res, elapsed, command = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sys.path.insert(0, os.path.join(os.path.dirname(res), "thintree"))
import benchinfo
h = benchinfo.header()
L = ["# dpt benchmark summary\n",
     f"Produced by `{command}` in {elapsed} s ({elapsed / 60:.1f} min; budget 20 min: "
     f"{'met' if elapsed <= 1200 else 'NOT met'}).  {benchinfo.md_machine(h)}\n",
     "Benchmarks are commands, not tests; this machine's 2 cores are shared with other jobs, so "
     "absolute figures are noisy and every goal below is a ratio measured within one run.\n",
     "## Steps\n", "| step | exit | seconds | command |", "|---|---|---:|---|"]
for line in open(os.path.join(res, "logs", "steps.tsv")):
    name, rc, sec, cmd = line.rstrip("\n").split("\t", 3)
    L.append(f"| {name} | {rc} | {sec} | `{cmd}` |")
goals = []
def load(name):
    try:
        return json.load(open(os.path.join(res, name)))
    except (OSError, ValueError):
        return None
for name, page in (("thintree.json", "thintree.md"), ("peers.json", "peers.md")):
    d = load(name)
    if d:
        goals += [(g["goal"], g["target"], g["measured"], g["met"], page) for g in d.get("goals", [])]
for name, page in (("thintree-train.json", "thintree-train.md"), ("thintree-buckets.json", "thintree-buckets.md"),
                   ("train.json", "train.md")):
    d = load(name)
    if isinstance(d, dict):
        for g in d.get("goals", []):
            meas = g["measured"]
            if g.get("range"):
                meas = f"{meas} (IQR {g['range'][0]}-{g['range'][1]})"
            if "floor_met" in g and not g["met"] and g["floor_met"]:
                meas = f"{meas}; floor 1x met"
            goals.append((g["goal"], g["target"], meas, g["met"], page))
c = load("cleanup.json")
if isinstance(c, dict):
    goals.append(("the emulation cleans up every namespace and daemon even when interrupted (SIGINT during a "
                  "training step on the emulated cluster; netns_test.sh: down twice, TERM during up)",
                  "0 left", f"{c['namespaces_left']} namespaces, {c['processes_left']} processes left "
                  f"({c['namespaces_before_interrupt']} namespaces, {c['daemons_and_ranks_before_interrupt']} daemons "
                  f"and ranks before; {c['seconds_to_clean_up']} s); netns_test exit {c['netns_test_exit']}",
                  bool(c["clean"]), "cleanup.json"))
try:
    md = open(os.path.join(res, "peers-allreduce-cpu.md")).read()
    for m in re.finditer(r"^\| (\d+) \| (\d+) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+)x \| ([0-9.]+)x \|$", md, re.M):
        for comm, v in (("ring", float(m.group(3))), ("hierarchical", float(m.group(4)))):
            goals.append((f"issue 4: {comm} busbw >= MPI_Allreduce, {m.group(1)} ranks, {int(m.group(2)):,} B",
                          ">= 1x", v, v >= 1.0, "peers-allreduce-cpu.md"))
except OSError:
    pass
goals.append(("the whole suite (run-all.sh) finishes in under 20 minutes here", "<= 20 min",
              f"{elapsed / 60:.1f} min", elapsed <= 1200, "SUMMARY.md"))
L += ["", "## Goals\n", "| goal | target | measured | met | page |", "|---|---|---:|---|---|"]
for g, tgt, meas, met, page in goals:
    L.append(f"| {g} | {tgt} | {meas} | {'**met**' if met else '**not met**'} | [{page}]({page}) |")
n_met = sum(1 for g in goals if g[3])
L += ["", f"{n_met} of {len(goals)} goals met.\n", "## Pages\n"]
for page, what in (("thintree.md", "thin tree on one machine: planned ring vs Slurm's order vs random vs hierarchical, fp16 wire"),
                   ("thintree-train.md", "ChainerMN's 10 GbE table on the thin tree: fast / slow / slow + fp16 + double buffering"),
                   ("cleanup.json", "the emulation interrupted mid-training: namespaces and daemons left"),
                   ("peers.md", "all-reduce vs Open MPI and torch.distributed gloo; dpt-launch vs torchrun"),
                   ("peers-allreduce-cpu.md", "issue 4's CPU all-reduce table (ring / hierarchical vs MPI_Allreduce)"),
                   ("peers-srun-overhead.md", "srun --dpt vs plain srun start-up"),
                   ("train.md", "training: dpt-train vs PyTorch 1.13 vs ChainerMN, 1 and 2 ranks, 32 and 224 px")):
    if os.path.exists(os.path.join(res, page)):
        L.append(f"- [{page}]({page}): {what}")
L.append("")
open(os.path.join(res, "SUMMARY.md"), "w").write("\n".join(L) + "\n")
json.dump({"schema": "dpt.bench.summary/1", "command": command, "elapsed_s": elapsed, **h,
           "goals": [{"goal": g, "target": t_, "measured": m_, "met": ok, "page": p_} for g, t_, m_, ok, p_ in goals]},
          open(os.path.join(res, "summary.json"), "w"), indent=1)
PY
echo "run-all: wrote $res/SUMMARY.md in $elapsed s" >&2
