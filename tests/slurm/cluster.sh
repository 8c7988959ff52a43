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
  echo "export OMPI_MCA_btl=self,tcp"
  echo "export PMIX_MCA_gds=hash"
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

leaf1=() leaf2=()
for i in $(seq 1 "$nodes"); do
  if ((i % 2)); then leaf1+=("n$i"); else leaf2+=("n$i"); fi
done
join() { local IFS=,; echo "$*"; }

gres_line=""
((gpus > 0)) && gres_line="Gres=gpu:$gpus"
cat >"$dir/slurm.conf" <<CONF
ClusterName=dpttest
SlurmctldHost=$host(127.0.0.1)
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
NodeName=n[1-$nodes] NodeHostname=$host NodeAddr=127.0.0.1 Port=$((base_port + 1))-$((base_port + nodes)) CPUs=$cpus Sockets=2 CoresPerSocket=$((cpus / 2)) ThreadsPerCore=1 RealMemory=1000 $gres_line State=UNKNOWN
PartitionName=debug Nodes=n[1-$nodes] Default=YES MaxTime=INFINITE State=UP
CONF
cat >"$dir/topology.conf" <<CONF
SwitchName=leaf1 Nodes=$(join "${leaf1[@]}")
SwitchName=leaf2 Nodes=$(join "${leaf2[@]}")
SwitchName=core Switches=leaf[1-2]
CONF
: >"$dir/gres.conf"
if ((gpus > 0)); then
  echo "NodeName=n[1-$nodes] Name=gpu File=$dir/dev/nvidia[0-$((gpus - 1))]" >"$dir/gres.conf"
fi
[[ -e "$dir/plugstack.conf" ]] || : >"$dir/plugstack.conf"
rm -f "$dir/cgroup.conf"
for i in $(seq 1 "$nodes"); do mkdir -p "$dir/tmp/n$i" "$dir/spool/n$i"; done
mkdir -p "$dir/spool/ctld"

export SLURM_CONF="$dir/slurm.conf"
slurmctld -i -f "$dir/slurm.conf" 
for i in $(seq 1 "$nodes"); do
  slurmd -N "n$i" -f "$dir/slurm.conf"
done

# wait until every node is idle (well under a second normally; give it 20 s)
for _ in $(seq 200); do
  st=$(sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2=="idle"' | wc -l)
  [[ "$st" -eq "$nodes" ]] && { echo "cluster.sh: $nodes nodes idle ($dir)"; exit 0; }
  sleep 0.1
done
echo "cluster.sh: nodes did not become idle; sinfo says:" >&2
sinfo -N -l >&2 || true
tail -n 20 "$dir"/log/*.log >&2 || true
exit 1
