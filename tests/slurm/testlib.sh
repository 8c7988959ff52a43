# Sourced by the real-Slurm test scripts (tests/slurm/*_test.sh, tests/runtime/boot_slurm_test.sh).
#   testlib_dir NAME       $dir: a fresh temporary directory for the cluster (mode 0755)
#   fail WHAT / check WHAT CMD...   report a failed property (sets $failed) / test one
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
testlib_teardown() {
  bash "$testlib_cluster_sh" stop "$dir" >/dev/null 2>&1 || true
  if ((failed)); then
    echo "---- logs ($dir/log) ----"
    tail -n 15 "$dir"/log/*.log 2>/dev/null
  fi
  rm -rf "$dir"
}
