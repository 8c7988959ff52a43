# Sourced by bench/thintree/run.sh and train.sh: the emulated thin tree with one slurmd
# per node namespace and the dpt plugin, torn down on exit, INT or TERM.
#   tt_cluster_up TAG NODES LEAVES RATE
# Needs $root, $here and $plugin; sets $work (a temporary directory, kept with
# DPT_BENCH_KEEP=1), $cluster, $t_start, $in_ctl (the client namespace) and the client's
# Slurm and Open MPI environment (TCP on fab0 only: every byte between ranks crosses the
# emulated fabric; ranks poll with sched_yield, as NODES ranks share this machine's cores).
# A launch running in the background should be recorded in $launch_pid: cleanup stops it
# first, so an interrupt does not wait for its timeout.
#   tt_uplinks LEAVES  the bytes each leaf uplink direction has sent so far (tc counters), as
#                      JSON {"leaf1->core": N, "core->leaf1": N, ...}
launch_pid=
tt_cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "${launch_pid:-}" ]]; then kill -TERM "$launch_pid" 2>/dev/null || true; sleep 1; fi
  bash "$root/tests/slurm/cluster.sh" stop "$cluster" >/dev/null 2>&1 || true
  bash "$here/netns.sh" down || rc=1
  if [[ -n "${DPT_BENCH_KEEP:-}" ]]; then echo "$tt_tag: kept $work" >&2; else rm -rf "$work"; fi
  exit $rc
}
tt_cluster_up() {
  local nodes=$2 leaves=$3 rate=$4
  tt_tag=$1
  work=$(mktemp -d "/tmp/dpt-thintree-$tt_tag.XXXXXX")
  cluster="$work/cluster"
  trap tt_cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  t_start=$(date +%s)
  bash "$here/netns.sh" up "$nodes" "$leaves" "$rate"
  # CPUs = this machine's (every "node" shares them)
  DPT_SLURM_NETNS=$DPT_TT_PREFIX DPT_SLURM_LEAVES=$leaves DPT_SLURM_CPUS=$(nproc) \
    DPT_SLURM_CTL_PORT=${DPT_SLURM_CTL_PORT:-26817} DPT_SLURM_BASE_PORT=${DPT_SLURM_BASE_PORT:-27000} \
    bash "$root/tests/slurm/cluster.sh" start "$cluster" "$nodes" 0 >/dev/null
  echo "required $plugin" >"$cluster/plugstack.conf"
  eval "$(bash "$root/tests/slurm/cluster.sh" env "$cluster")"
  export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,tcp OMPI_MCA_btl_tcp_if_include=fab0 \
    OMPI_MCA_mpi_yield_when_idle=1
  in_ctl=(nsenter "--net=$DPT_SLURM_CLIENT_NETNS")
}
tt_uplinks() {
  local j first=1 leaves=$1
  printf '{'
  for j in $(seq 1 "$leaves"); do
    ((first)) || printf ','
    first=0
    printf '"leaf%d->core":%s,"core->leaf%d":%s' "$j" \
      "$(ip netns exec "$DPT_TT_PREFIX-leaf$j" tc -s qdisc show dev up0 | awk '/Sent/{print $2; exit}')" "$j" \
      "$(ip netns exec "$DPT_TT_PREFIX-spine" tc -s qdisc show dev "leaf$j" | awk '/Sent/{print $2; exit}')"
  done
  printf '}'
}
