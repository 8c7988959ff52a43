#!/usr/bin/env bash
# bench/run-all.sh BUILD_DIR — every dpt benchmark, one after the other, then
# bench/results/SUMMARY.md (every goal met or not, with the measured ratio).
#
#   1. bench/thintree/run.sh   thin tree in network namespaces + real Slurm: planned ring
#                              vs Slurm's order vs random vs hierarchical, fp16 wire
#                              -> results/thintree.{json,md}            (needs root)
#   2. bench/peers/run.sh      all-reduce vs Open MPI and torch gloo; dpt-launch vs torchrun
#                              -> results/peers.{json,md}
#   3. bench/allreduce/run.sh  issue 4's CPU all-reduce table -> results/peers-allreduce-cpu.md (the committed allreduce-cpu.md is issue 4's)
#   4. tests/slurm/bench_spank_overhead.sh  srun --dpt vs srun -> results/peers-srun-overhead.md
#   5. tests/trainer/bench/bench.sh (or bench/trainer/*.sh) when it exists: dpt-train vs
#      PyTorch -> results/train.json; skipped with a note otherwise
#
# Benchmarks are commands, not tests: the machine (2 cores, shared) makes absolute
# figures noisy; every comparison is a ratio measured in one run.  Each step's
# output goes to bench/results/logs/<step>.log; a failing step is reported in the
# summary and the others still run.  ONLY="thintree peers ..." runs a subset.
# Budget: under 20 minutes here.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
build=$(cd "${1:?usage: run-all.sh BUILD_DIR}" && pwd)
res="$here/results"
mkdir -p "$res/logs"
only=${ONLY:-thintree peers allreduce spank train}
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

step thintree bash "$here/thintree/run.sh" "$build" "$res/thintree"
step peers bash "$here/peers/run.sh" "$build" "$res/peers"
step allreduce env REPEAT="${ALLREDUCE_REPEAT:-2}" bash "$here/allreduce/run.sh" "$build" "$res/peers-allreduce-cpu.md"
if [[ -f "$root/tests/slurm/bench_spank_overhead.sh" && -e "$build/spank/spank_dpt.so" ]]; then
  step spank bash -c 'bash "$1" "$2" "$3" 10 >"$4"' _ "$root/tests/slurm/bench_spank_overhead.sh" \
    "$build/spank/spank_dpt.so" "$root/tests/topology/fixtures/mn1-8gpu-4hca.xml" "$res/peers-srun-overhead.md"
else
  skip spank "tests/slurm/bench_spank_overhead.sh or $build/spank/spank_dpt.so missing"
fi
train_script=""
for c in "$root/tests/trainer/bench/bench.sh" "$root"/bench/trainer/*.sh; do
  [[ -f "$c" ]] && { train_script=$c; break; }
done
if [[ " $only " != *" train "* ]]; then
  :
elif [[ -z "$train_script" ]]; then
  skip train "no trainer benchmark script (tests/trainer/bench/bench.sh or bench/trainer/*.sh) yet"
elif [[ ! -x "${DPT_TRAIN:-$build/trainer/dpt-train}" ]]; then
  skip train "${DPT_TRAIN:-$build/trainer/dpt-train} not built (cmake --build $build --target dpt-train, or DPT_TRAIN=path)"
else
  step train sh "$train_script" "${DPT_TRAIN:-$build/trainer/dpt-train}" "$res/train.json" "$(nproc)" 4
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
t = load("train.json")
if isinstance(t, list):
    for e in t:
        try:
            r = e["dpt"]["images_per_s"] / e["torch"]["images_per_s"]
            goals.append((f"dpt-train CPU images/s vs PyTorch {e['torch'].get('framework', '')}, {e['image_size']}x{e['image_size']}, batch {e['batch']}",
                          ">= 1.5x", round(r, 3), r >= 1.5, "train.json"))
            m = e["dpt"]["peak_rss_bytes"] / e["torch"]["peak_rss_bytes"]
            goals.append((f"dpt-train peak memory vs PyTorch, {e['image_size']}x{e['image_size']}",
                          "<= 1x", round(m, 3), m <= 1.0, "train.json"))
        except (KeyError, TypeError, ZeroDivisionError):
            pass
try:
    md = open(os.path.join(res, "peers-allreduce-cpu.md")).read()
    for m in re.finditer(r"^\| (\d+) \| (\d+) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| ([0-9.]+)x \| ([0-9.]+)x \|$", md, re.M):
        for comm, v in (("ring", float(m.group(3))), ("hierarchical", float(m.group(4)))):
            goals.append((f"issue 4: {comm} busbw >= MPI_Allreduce, {m.group(1)} ranks, {int(m.group(2)):,} B",
                          ">= 1x", v, v >= 1.0, "peers-allreduce-cpu.md"))
except OSError:
    pass
L += ["", "## Goals\n", "| goal | target | measured | met | page |", "|---|---|---:|---|---|"]
for g, tgt, meas, met, page in goals:
    L.append(f"| {g} | {tgt} | {meas} | {'**met**' if met else '**not met**'} | [{page}]({page}) |")
n_met = sum(1 for g in goals if g[3])
L += ["", f"{n_met} of {len(goals)} goals met.\n", "## Pages\n"]
for page, what in (("thintree.md", "thin tree on one machine: planned ring vs Slurm's order vs random vs hierarchical, fp16 wire"),
                   ("peers.md", "all-reduce vs Open MPI and torch.distributed gloo; dpt-launch vs torchrun"),
                   ("peers-allreduce-cpu.md", "issue 4's CPU all-reduce table (ring / hierarchical vs MPI_Allreduce)"),
                   ("peers-srun-overhead.md", "srun --dpt vs plain srun start-up"),
                   ("train.json", "dpt-train vs PyTorch (trainer benchmark)")):
    if os.path.exists(os.path.join(res, page)):
        L.append(f"- [{page}]({page}): {what}")
L.append("")
open(os.path.join(res, "SUMMARY.md"), "w").write("\n".join(L) + "\n")
json.dump({"schema": "dpt.bench.summary/1", "command": command, "elapsed_s": elapsed, **h,
           "goals": [{"goal": g, "target": t_, "measured": m_, "met": ok, "page": p_} for g, t_, m_, ok, p_ in goals]},
          open(os.path.join(res, "summary.json"), "w"), indent=1)
PY
echo "run-all: wrote $res/SUMMARY.md in $elapsed s" >&2
