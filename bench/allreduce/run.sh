#!/bin/bash
# bench/allreduce/run.sh BUILD_DIR [OUT.md] — the CPU all-reduce benchmark of
# issue 4: ring and hierarchical vs Open MPI's MPI_Allreduce (the "mpi"
# communicator), measured in the same run (interleaved per size), with 2 and 4
# ranks started by dpt-launch on this machine, 64 MiB .. 128 MiB plus
# ResNet-50's gradient (102,228,128 B), fp32 on the wire.  Each configuration
# runs REPEAT times (default 3); the table keeps every run.  Not a test: the
# machine's load changes the figures (recorded below).
set -euo pipefail
build=${1:?usage: run.sh BUILD_DIR [OUT.md]}
out=${2:-$(dirname "$0")/../results/allreduce-cpu.md}
repeat=${REPEAT:-3}
launch="$build/launcher/dpt-launch"
bench="$build/runtime/dpt-bench"
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
  echo "# CPU all-reduce: ring / hierarchical vs Open MPI MPI_Allreduce"
  echo
  echo "Produced by \`bench/allreduce/run.sh $build\` on $(date -u +%Y-%m-%dT%H:%MZ)."
  echo
  echo "## Machine"
  echo
  echo '```'
  echo "cpu:      $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores online)"
  echo "memory:   $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "kernel:   $(uname -r)"
  echo "mpi:      $(mpirun --version 2>/dev/null | head -1)"
  echo "chunk:    ${DPT_COMM_CHUNK_BYTES:-1048576 (default)} bytes, window ${DPT_COMM_WINDOW:-4 (default)}"
  echo "load:     $(cut -d' ' -f1-3 /proc/loadavg) (1/5/15 min, before the runs; other jobs share this machine)"
  echo '```'
  echo
  echo "busbw = algbw * 2(p-1)/p (nccl-tests); time = max over ranks of the mean of 10 iterations"
  echo "after 2 warm-up ones; maxerr = max |result - exact| of one sum of integer data."
  echo
} >"$tmp"
for np in 2 4; do
  for r in $(seq "$repeat"); do
    cmd="dpt-launch -n $np --oversubscribe -- dpt-bench allreduce --comm ring,hierarchical,mpi --min-bytes 64M --max-bytes 128M --iters 10 --warmup 2"
    {
      echo "## $np ranks, run $r"
      echo
      echo "\`$cmd\`"
      echo
      echo '```'
      "$launch" -n "$np" --oversubscribe -- "$bench" allreduce --comm ring,hierarchical,mpi --min-bytes 64M \
        --max-bytes 128M --iters 10 --warmup 2
      echo '```'
      echo
    } >>"$tmp"
  done
done
# Summary: per size and rank count, median busbw of each communicator and the ratio to mpi.
{
  echo "## Summary (median over the runs)"
  echo
  echo "| ranks | bytes | ring GB/s | hierarchical GB/s | mpi GB/s | ring / mpi | hierarchical / mpi |"
  echo "|---:|---:|---:|---:|---:|---:|---:|"
  awk '
    /^## [0-9]+ ranks/ { np = $2 }
    /^  (ring|hierarchical|mpi) / { v[np, $2, $1] = v[np, $2, $1] " " $7; sizes[np, $2] = 1 }
    function med(s,   a, n, i, j, t) {
      n = split(s, a, " ");
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n ? a[int((n + 1) / 2)] : 0
    }
    END {
      for (k in sizes) { split(k, q, SUBSEP); keys[++m] = sprintf("%d %012d", q[1], q[2]) }
      for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (keys[j] < keys[i]) { t = keys[i]; keys[i] = keys[j]; keys[j] = t }
      for (i = 1; i <= m; i++) {
        split(keys[i], q, " "); np = q[1]; b = q[2] + 0
        r = med(v[np, b, "ring"]); h = med(v[np, b, "hierarchical"]); x = med(v[np, b, "mpi"])
        printf("| %d | %d | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n", np, b, r, h, x, x > 0 ? r / x : 0, x > 0 ? h / x : 0)
      }
    }' "$tmp"
  echo
} >"$tmp.sum"
{ sed -n '1,/^after 2 warm-up/p' "$tmp"; echo; cat "$tmp.sum"; sed -n '/^## 2 ranks, run 1/,$p' "$tmp"; } >"$out"
rm -f "$tmp.sum"
echo "wrote $out"
