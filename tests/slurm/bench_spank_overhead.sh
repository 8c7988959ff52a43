#!/usr/bin/env bash
# Benchmark (not a test): start-up time of `srun --dpt` vs plain `srun` for an
# 8-task no-op on the cluster.sh cluster (4 nodes x 8 fake GPUs), alternating
# the two so drift hits both alike.  Two shapes: one step inside an existing
# allocation (salloc; what a batch script's inner srun pays) and a standalone
# srun (allocation + step).  Prints a markdown table (median / mean / min in s).
#   bench_spank_overhead.sh PLUGIN NODE_XML [REPEATS] > bench/results/spank-overhead.md
set -uo pipefail
plugin=${1:?plugin} xml=${2:?node xml} reps=${3:-30}
here=$(cd "$(dirname "$0")" && pwd)
dir=$(mktemp -d /tmp/dpt-spank-bench-XXXXXX)
chmod 0755 "$dir"
trap 'bash "$here/cluster.sh" stop "$dir" >/dev/null 2>&1; rm -rf "$dir"' EXIT
echo "required $plugin" >"$dir/plugstack.conf"
DPT_SLURM_CTL_PORT=${DPT_SLURM_CTL_PORT:-26000} DPT_SLURM_BASE_PORT=${DPT_SLURM_BASE_PORT:-26010} \
  bash "$here/cluster.sh" start "$dir" 4 8 >&2 || exit 1
eval "$(bash "$here/cluster.sh" env "$dir")"

cat >"$dir/inner.sh" <<EOF
#!/bin/bash
# one step per line: <variant> <seconds>
for i in \$(seq $reps); do
  for v in plain dpt; do
    if [ \$v = dpt ]; then a=(--dpt=topology=$xml); else a=(); fi
    t0=\$(date +%s%N)
    srun "\${a[@]}" -N1 -n8 --gpus-per-node=8 true || echo "\$v failed" >&2
    t1=\$(date +%s%N)
    echo "\$v \$(( (t1 - t0) / 1000 ))"
  done
done
EOF
chmod +x "$dir/inner.sh"
salloc -N1 -n8 --gpus-per-node=8 "$dir/inner.sh" >"$dir/steps.txt" 2>"$dir/salloc.err"

: >"$dir/jobs.txt"
for i in $(seq "$reps"); do
  for v in plain dpt; do
    if [ $v = dpt ]; then a=(--dpt=topology="$xml"); else a=(); fi
    # wait until the previous job has left the node (MinJobAge, epilog)
    for _ in $(seq 100); do [ -z "$(squeue -h)" ] && break; sleep 0.05; done
    t0=$(date +%s%N)
    srun "${a[@]}" -N1 -n8 --gpus-per-node=8 true || echo "$v failed" >&2
    t1=$(date +%s%N)
    echo "$v $(((t1 - t0) / 1000))" >>"$dir/jobs.txt"
  done
done

python3 - "$dir/steps.txt" "$dir/jobs.txt" "$reps" "$xml" <<'EOF'
import statistics, sys, platform, os, subprocess
def load(p):
    d = {"plain": [], "dpt": []}
    for line in open(p):
        v, us = line.split()
        d[v].append(int(us) / 1e6)
    return d
rows = []
for name, path in (("step in an allocation (salloc; srun inside)", sys.argv[1]),
                   ("standalone srun (allocation + step)", sys.argv[2])):
    d = load(path)
    mp, md = statistics.median(d["plain"]), statistics.median(d["dpt"])
    rows.append((name, len(d["plain"]), mp, statistics.mean(d["plain"]), min(d["plain"]),
                 md, statistics.mean(d["dpt"]), min(d["dpt"]), md - mp))
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
slurm = subprocess.run(["srun", "--version"], capture_output=True, text=True).stdout.strip()
print("| shape | runs | plain median | plain mean | plain min | --dpt median | --dpt mean | --dpt min | added (median) |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    print(f"| {r[0]} | {r[1]} | {r[2]:.3f} | {r[3]:.3f} | {r[4]:.3f} | {r[5]:.3f} | {r[6]:.3f} | {r[7]:.3f} | **{r[8]:+.3f}** |")
print()
print(f"Times in seconds. Machine: {cpu}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}; {slurm}.")
print(f"--dpt used topology={os.path.basename(sys.argv[4])} (8 GPUs, 4 HCAs).")
EOF
