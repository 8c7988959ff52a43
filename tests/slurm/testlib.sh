# Sourced by the real-Slurm test scripts (tests/slurm/*_test.sh, tests/runtime/boot_slurm_test.sh).
#   testlib_dir NAME       $dir: a fresh temporary directory for the cluster (mode 0755)
#   fail WHAT / check WHAT CMD...   report a failed property (sets $failed) / test one
#   daemons_alive [NODES]  slurmctld and the NODES (4) slurmd of the cluster in $dir all run
#   testlib_teardown       stop every daemon of the cluster in $dir, print its logs when
#                          something failed, remove $dir (call it from the script's EXIT trap)
testlib_cluster_sh="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/cluster.sh"
failed=0
testlib_dir() {
  dir=$(mktemp -d "/tmp/dpt-$1-XXXXXX")
  chmod 0755 "$dir"
}
fail() { echo "FAIL: $*"; failed=1; }
check() { local what=$1; shift; if "$@"; then echo "ok: $what"; else fail "$what"; fi; }
daemons_alive() {
  local f n=0
  for f in "$dir"/run/slurmctld.pid "$dir"/run/slurmd-n*.pid; do
    kill -0 "$(cat "$f")" 2>/dev/null || { echo "daemon of $f is gone"; return 1; }
    n=$((n + 1))
  done
  [[ $n -eq $((${1:-4} + 1)) ]]
}
testlib_teardown() {
  bash "$testlib_cluster_sh" stop "$dir" >/dev/null 2>&1 || true
  if ((failed)); then
    echo "---- logs ($dir/log) ----"
    tail -n 15 "$dir"/log/*.log 2>/dev/null
  fi
  rm -rf "$dir"
}
