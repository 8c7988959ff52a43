#!/usr/bin/env bash
# A real Slurm 22.05 cluster on this one machine, for dpt's tests and benchmarks.
#
#   cluster.sh start DIR [NODES] [GPUS_PER_NODE]   start munged, slurmctld and one slurmd per node
#   cluster.sh stop DIR                             stop every daemon it started, remove nothing else
#   cluster.sh env DIR                              print the environment a client needs (eval it)
#
# DIR holds everything: munge key and socket, slurm.conf, gres.conf, topology.conf,
# spool/log/pid files per node (%n), fake GPU devices (character devices, as gres.conf
# requires).  Node n<i> is served by `slurmd -N n<i>` on port 17000+i; slurmctld on
# 16817.  Topology (topology/tree): two leaf switches whose node lists interleave
# the node names, so Slurm's name order is the worst order for a ring:
#   leaf1: n1 n3 n5 ...   leaf2: n2 n4 n6 ...   under one core switch.
# A file plugstack.conf in DIR is used if present (the dpt SPANK plugin's tests write one).
# Environment knobs: DPT_SLURM_CPUS (CPUs declared per node, default 8*GPUS);
# DPT_SLURM_CTL_PORT / DPT_SLURM_BASE_PORT (slurmctld port, default 16817; node
# n<i> listens on BASE+i, default 17000+i) so that several clusters can run at
# once (tests pick their own ports).
# DPT_SLURM_LEAVES=L (default 2): node n<i> hangs off leaf ((i-1) % L) + 1.
# Netns mode, DPT_SLURM_NETNS=PREFIX (bench/thintree/netns.sh builds the namespaces):
# node n<i> runs in network namespace PREFIX-n<i> with its own hostname n<i> (a UTS
# namespace) and NodeAddr = the IPv4 address of DPT_SLURM_NETNS_IF (default mgmt0)
# there; slurmctld runs in PREFIX-ctl.  Clients must run in PREFIX-ctl too: `env`
# then prints DPT_SLURM_CLIENT_NETNS (the path for `nsenter --net=`).
# An ASan build's tests (tests/CMakeLists.txt: DPT_SLURM_TEST_ENV) set two knobs:
# DPT_SLURM_PRELOAD=LIB (the ASan runtime) is exported by `env` for the clients (srun,
# sbatch, salloc: the instrumented plugin needs the runtime first in every process that
# loads it), and DPT_SLURM_DAEMON_PLUGIN=PLUGIN:BUILD makes the daemons run WITHOUT that
# runtime and see, at the instrumented plugin's path PLUGIN, BUILD (the same sources with
# UBSan only): each slurmd starts in a private mount namespace with BUILD bind-mounted
# over PLUGIN, which its slurmstepds inherit.  Why: GCC 12's libasan has no fork handler,
# and slurmstepd forks each task while its other threads allocate; a task forked while
# one of them held an allocator lock waits on it forever (gdb: the child in
# SizeClassAllocator64::GetFromAllocator -> Mutex::Lock, from Slurm's xrecalloc), which
# hung 2 of 3 slurm_spank_batch runs here and 3 of 3 in CI.
set -euo pipefail

cmd=${1:-}
dir=${2:-}
[[ -n "$cmd" && -n "$dir" ]] || { echo "usage: cluster.sh start|stop|env DIR [NODES] [GPUS]" >&2; exit 2; }
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

ctl_port=${DPT_SLURM_CTL_PORT:-16817}
base_port=${DPT_SLURM_BASE_PORT:-17000}

client_env() {
  echo "export SLURM_CONF=$dir/slurm.conf"
  if [[ -s "$dir/netns" ]]; then echo "export DPT_SLURM_CLIENT_NETNS=/var/run/netns/$(cat "$dir/netns")-ctl"; fi
  echo "export OMPI_MCA_btl=self,tcp"
  echo "export PMIX_MCA_gds=hash"
  if [[ -s "$dir/preload" ]]; then echo "export LD_PRELOAD=$(cat "$dir/preload")"; fi
  echo "unset DPT_SLURM_PRELOAD DPT_SLURM_DAEMON_PLUGIN" # not DPT_ variables of the jobs (the inert test counts them)
}

stop_all() {
  local f pid
  for f in "$dir"/run/*.pid; do
    [[ -e "$f" ]] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then kill "$pid" 2>/dev/null || true; fi
  done
  # wait up to 5 s, then KILL what is left
  for _ in $(seq 50); do
    local alive=0
    for f in "$dir"/run/*.pid; do
      [[ -e "$f" ]] || continue
      pid=$(cat "$f" 2>/dev/null || true)
      [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && alive=1
    done
    ((alive)) || break
    sleep 0.1
  done
  for f in "$dir"/run/*.pid; do
    [[ -e "$f" ]] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null && kill -9 "$pid" 2>/dev/null || true
    rm -f "$f"
  done
}

case "$cmd" in
  env) client_env; exit 0 ;;
  stop) stop_all; exit 0 ;;
  start) ;;
  *) echo "cluster.sh: unknown command '$cmd' (start|stop|env)" >&2; exit 2 ;;
esac

nodes=${3:-4}
gpus=${4:-8}
cpus=${DPT_SLURM_CPUS:-$((gpus > 0 ? 8 * gpus : 8))}
host=$(hostname -s)
leaves=${DPT_SLURM_LEAVES:-2}
netns=${DPT_SLURM_NETNS:-}
[[ "$leaves" =~ ^[1-9][0-9]*$ ]] || { echo "cluster.sh: DPT_SLURM_LEAVES=$leaves: expected a positive count" >&2; exit 2; }
ns_addr() { # ns_addr NAMESPACE [DEV]: its first IPv4 address
  ip -n "$1" -4 -o addr show ${2:+dev "$2"} scope global | awk '{split($4, a, "/"); print a[1]; exit}'
}
ctl_addr=127.0.0.1
in_ctl=()
if [[ -n "$netns" ]]; then
  ctl_addr=$(ns_addr "$netns-ctl")
  [[ -n "$ctl_addr" ]] || { echo "cluster.sh: no IPv4 address in namespace $netns-ctl (DPT_SLURM_NETNS=$netns)" >&2; exit 2; }
  in_ctl=(nsenter "--net=/var/run/netns/$netns-ctl")
  echo "$netns" >"$dir/netns"
else
  rm -f "$dir/netns"
fi
mkdir -p "$dir"/{run,log,spool,tmp,dev,munge}
chmod 0711 "$dir/munge"

# munge: a private key and socket
if [[ ! -s "$dir/munge/munge.key" ]]; then
  dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
  chmod 0400 "$dir/munge/munge.key"
fi
user=$(id -un)
munged --key-file="$dir/munge/munge.key" --socket="$dir/munge/munge.socket" \
  --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
  --seed-file="$dir/munge/munge.seed" --force
for _ in $(seq 50); do [[ -S "$dir/munge/munge.socket" ]] && break; sleep 0.05; done

# fake GPUs: gres.conf File= must name character devices
for i in $(seq 0 $((gpus - 1))); do
  [[ -e "$dir/dev/nvidia$i" ]] || mknod "$dir/dev/nvidia$i" c 1 3
done

declare -a leaf_nodes
for i in $(seq 1 "$nodes"); do
  j=$(( (i - 1) % leaves + 1 ))
  leaf_nodes[j]+="${leaf_nodes[j]:+,}n$i"
done
node_lines="NodeName=n[1-$nodes] NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base_port + 1))-$((base_port + nodes))"
if [[ -n "$netns" ]]; then
  node_lines=""
  for i in $(seq 1 "$nodes"); do
    a=$(ns_addr "$netns-n$i" "${DPT_SLURM_NETNS_IF:-mgmt0}")
    [[ -n "$a" ]] || { echo "cluster.sh: no IPv4 address on ${DPT_SLURM_NETNS_IF:-mgmt0} in namespace $netns-n$i" >&2; exit 2; }
    node_lines+="${node_lines:+$'\n'}NodeName=n$i NodeHostname=n$i NodeAddr=$a Port=$((base_port + i))"
  done
fi

gres_line=""
((gpus > 0)) && gres_line="Gres=gpu:$gpus"
cat >"$dir/slurm.conf" <<CONF
ClusterName=dpttest
SlurmctldHost=$host($ctl_addr)
SlurmctldPort=$ctl_port
SlurmdPort=$base_port
SlurmUser=$user
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/spool/ctld
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdSpoolDir=$dir/spool/%n
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp/%n
ProctrackType=proctrack/pgid
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/builtin
TopologyPlugin=topology/tree
GresTypes=gpu
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
PlugStackConfig=$dir/plugstack.conf
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=2
MinJobAge=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmctldDebug=info
SlurmdDebug=info
NodeName=DEFAULT CPUs=$cpus Sockets=2 CoresPerSocket=$((cpus / 2)) ThreadsPerCore=1 RealMemory=1000 $gres_line State=UNKNOWN
$node_lines
PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP
CONF
{
  for j in $(seq 1 "$leaves"); do
    [[ -n "${leaf_nodes[j]:-}" ]] && echo "SwitchName=leaf$j Nodes=${leaf_nodes[j]}"
  done
  echo "SwitchName=core Switches=leaf[1-$(( leaves < nodes ? leaves : nodes ))]"
} >"$dir/topology.conf"
: >"$dir/gres.conf"
if ((gpus > 0)); then
  echo "NodeName=n[1-$nodes] Name=gpu File=$dir/dev/nvidia[0-$((gpus - 1))]" >"$dir/gres.conf"
fi
[[ -e "$dir/plugstack.conf" ]] || : >"$dir/plugstack.conf"
rm -f "$dir/cgroup.conf"
for i in $(seq 1 "$nodes"); do mkdir -p "$dir/tmp/n$i" "$dir/spool/n$i"; done
mkdir -p "$dir/spool/ctld"

# A cluster left behind by a test that was killed (ctest's timeout kills the script, whose
# teardown never runs; the daemons detach) still holds these ports, and every later start
# would fail: stop it, saying so.  Only daemons of another cluster directory, found through
# the listening sockets of this network namespace (netns clusters are not touched).
reap_stale() {
  local port pid conf other
  for port in "$ctl_port" $(seq $((base_port + 1)) $((base_port + nodes))); do
    for pid in $(ss -Htlnp "sport = :$port" 2>/dev/null | grep -o 'pid=[0-9]*' | cut -d= -f2 | sort -u); do
      conf=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | sed -n 's/.* -f \([^ ]*\/slurm\.conf\).*/\1/p')
      other=${conf%/slurm.conf}
      [[ -n "$conf" && "$other" != "$dir" && -d "$other/run" ]] || continue
      echo "cluster.sh: port $port is held by $(cat "/proc/$pid/comm" 2>/dev/null) of a cluster left" \
        "behind in $other (a killed test?): stopping it" >&2
      bash "${BASH_SOURCE[0]}" stop "$other" || true
    done
  done
}
[[ -n "$netns" ]] || reap_stale

export SLURM_CONF="$dir/slurm.conf"
rm -f "$dir/preload"
if [[ -n "${DPT_SLURM_PRELOAD:-}" ]]; then # the clients' (client_env), not the daemons'
  [[ -r "$DPT_SLURM_PRELOAD" ]] || { echo "cluster.sh: DPT_SLURM_PRELOAD=$DPT_SLURM_PRELOAD: no such library" >&2; exit 2; }
  echo "$DPT_SLURM_PRELOAD" >"$dir/preload"
fi
unset LD_PRELOAD
mount_ns=() plugin_at="" plugin_build=""
if [[ -n "${DPT_SLURM_DAEMON_PLUGIN:-}" ]]; then
  plugin_at=${DPT_SLURM_DAEMON_PLUGIN%%:*} plugin_build=${DPT_SLURM_DAEMON_PLUGIN#*:}
  [[ -f "$plugin_at" && -f "$plugin_build" && "$plugin_at" != "$plugin_build" ]] ||
    { echo "cluster.sh: DPT_SLURM_DAEMON_PLUGIN=$DPT_SLURM_DAEMON_PLUGIN: expected PLUGIN:BUILD, two existing files (build the ASan tree's spank_dpt_daemons target)" >&2; exit 2; }
  mount_ns=(unshare --mount --propagation private)
fi
"${in_ctl[@]}" slurmctld -i -f "$dir/slurm.conf"
for i in $(seq 1 "$nodes"); do
  # netns mode: own network namespace and hostname (the daemon keeps the UTS namespace);
  # DPT_SLURM_DAEMON_PLUGIN: own mount namespace with the daemons' plugin build in place
  ns=() name_it=""
  if [[ -n "$netns" ]]; then
    ns=(nsenter "--net=/var/run/netns/$netns-n$i" unshare --uts) name_it='hostname "$1" || exit 1; '
  fi
  [[ ${#mount_ns[@]} -gt 0 ]] && ns+=("${mount_ns[@]}")
  if [[ ${#ns[@]} -eq 0 ]]; then
    slurmd -N "n$i" -f "$dir/slurm.conf"
  else
    "${ns[@]}" sh -c "${name_it}"'if [ -n "$3" ]; then mount --bind "$4" "$3" || exit 1; fi; exec slurmd -N "$1" -f "$2"' \
      sh "n$i" "$dir/slurm.conf" "$plugin_at" "$plugin_build" ||
      { echo "cluster.sh: slurmd n$i did not start${plugin_at:+ (its private mount namespace with $plugin_build over $plugin_at: needs root)}" >&2; exit 1; }
  fi
done

# wait until every node is idle (well under a second normally; give it 20 s)
for _ in $(seq 200); do
  st=$("${in_ctl[@]}" sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2=="idle"' | wc -l)
  [[ "$st" -eq "$nodes" ]] && { echo "cluster.sh: $nodes nodes idle ($dir)"; exit 0; }
  sleep 0.1
done
echo "cluster.sh: nodes did not become idle; sinfo says:" >&2
"${in_ctl[@]}" sinfo -N -l >&2 || true
tail -n 20 "$dir"/log/*.log >&2 || true
exit 1
