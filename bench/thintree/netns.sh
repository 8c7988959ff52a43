#!/usr/bin/env bash
# bench/thintree/netns.sh — a thin-tree cluster network on one machine.
#
#   netns.sh up   [NODES] [LEAVES] [RATE]   build it (defaults: 8 nodes, 2 leaves, 300mbit)
#   netns.sh down                           remove every namespace it made (idempotent)
#   netns.sh show                           namespaces, addresses, qdiscs
#   netns.sh rate RATE [UPLINK]             change every fabric link's rate (node links RATE,
#                                           leaf uplinks UPLINK, default RATE) in place
#
# Everything lives in network namespaces this script creates (prefix $DPT_TT_PREFIX,
# default "dptt"); nothing is added to the machine's own namespace and no address
# outside 10.77.0.0/16 is used.  Layout:
#
#   dptt-n<i>      node i: fab0 = 10.77.1.<i> (the emulated fabric, rate-limited),
#                  mgmt0 = 10.77.2.<i> (management: Slurm, PMIx; not limited)
#   dptt-leaf<j>   a Linux bridge (switch): one port per node of the leaf and one uplink
#   dptt-spine     a Linux bridge: one port per leaf uplink
#   dptt-ctl       management bridge, 10.77.2.254: slurmctld and srun run here
#
# Node i sits on leaf ((i-1) % LEAVES) + 1, so the groups interleave the node names
# (n1 on leaf1, n2 on leaf2, ...): Slurm's name order is the worst ring.
# Rates (tc tbf, on the egress of both ends of every fabric link): node links at
# RATE, each leaf's uplink to the spine at $DPT_TT_UPLINK (default RATE) — with 4
# nodes per leaf that is 4:1 oversubscribed, like MN-1's links between groups.
# Fabric MTU $DPT_TT_MTU (default 65520, IPoIB connected mode's): with 1500-byte
# frames the kernel's per-packet work on 2 cores, not the rate limits, caps an
# 8-flow ring near 1 Gbit/s in total; with 65520 every flow reaches its tbf rate.
# `up` removes what it built if any step fails (or on INT/TERM).
set -euo pipefail

prefix=${DPT_TT_PREFIX:-dptt}
cmd=${1:-}

die() { echo "netns.sh: $*" >&2; exit 2; }

our_namespaces() {
  ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${prefix}-(n[0-9]+|leaf[0-9]+|spine|ctl)\$" || true
}

down() {
  local ns pid
  for ns in $(our_namespaces); do
    # processes still inside a namespace we made (daemons a caller left behind) are ours
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill "$pid" 2>/dev/null || true; done
  done
  for ns in $(our_namespaces); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  # deleting a namespace destroys its veths and bridges; wait until the kernel is done
  for _ in $(seq 50); do
    [[ -z "$(our_namespaces)" ]] && return 0
    sleep 0.1
  done
  echo "netns.sh: namespaces left behind: $(our_namespaces | tr '\n' ' ')" >&2
  return 1
}

tbf() { # tbf NS DEV RATE: egress rate limit
  ip -n "$1" link set "$2" txqueuelen 1000
  ip netns exec "$1" tc qdisc replace dev "$2" root tbf rate "$3" burst "${DPT_TT_BURST:-256kb}" \
    latency "${DPT_TT_LATENCY:-100ms}"
}

reach() { # reach SERVER_NS ADDR CLIENT_NS: a TCP connection from CLIENT_NS to ADDR:7999
  local py=${DPT_TT_PYTHON:-python3} lpid ok=1
  ip netns exec "$1" "$py" -c 'import socket,sys
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], 7999)); s.listen(1); s.settimeout(10); c, _ = s.accept(); c.close()' "$2" &
  lpid=$!
  for _ in $(seq 50); do
    if ip netns exec "$3" "$py" -c 'import socket,sys
socket.create_connection((sys.argv[1], 7999), timeout=1).close()' "$2" 2>/dev/null; then ok=0; break; fi
    sleep 0.1
  done
  kill "$lpid" 2>/dev/null || true
  wait "$lpid" 2>/dev/null || true
  return $ok
}

up() {
  local nodes=${1:-8} leaves=${2:-2} rate=${3:-300mbit}
  local uplink=${DPT_TT_UPLINK:-$rate} mtu=${DPT_TT_MTU:-65520}
  [[ "$mtu" =~ ^[0-9]+$ && "$mtu" -ge 1280 && "$mtu" -le 65520 ]] || die "DPT_TT_MTU=$mtu: expected 1280..65520"
  [[ "$nodes" =~ ^[0-9]+$ && "$nodes" -ge 2 && "$nodes" -le 200 ]] || die "NODES=$nodes: expected 2..200"
  [[ "$leaves" =~ ^[0-9]+$ && "$leaves" -ge 1 && "$leaves" -le "$nodes" ]] || die "LEAVES=$leaves: expected 1..NODES"
  [[ "$rate" =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "RATE=$rate: expected e.g. 300mbit"
  [[ "$uplink" =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "DPT_TT_UPLINK=$uplink: expected e.g. 300mbit"
  [[ -z "$(our_namespaces)" ]] || die "namespaces ${prefix}-* exist already (run: netns.sh down)"

  trap 'rc=$?; trap - EXIT INT TERM; if ((rc)); then echo "netns.sh: up failed, removing what was built" >&2; down || true; fi; exit $rc' EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM

  ip netns add "${prefix}-ctl"
  ip netns add "${prefix}-spine"
  ip -n "${prefix}-ctl" link set lo up
  ip -n "${prefix}-spine" link set lo up
  ip -n "${prefix}-ctl" link add brm type bridge stp_state 0
  ip -n "${prefix}-ctl" addr add 10.77.2.254/24 dev brm
  ip -n "${prefix}-ctl" link set brm up
  ip -n "${prefix}-spine" link add br0 type bridge stp_state 0
  ip -n "${prefix}-spine" link set br0 up

  local j i leaf ns
  for j in $(seq 1 "$leaves"); do
    leaf="${prefix}-leaf$j"
    ip netns add "$leaf"
    ip -n "$leaf" link set lo up
    ip -n "$leaf" link add br0 type bridge stp_state 0
    ip -n "$leaf" link set br0 up
    ip link add up0 mtu "$mtu" netns "$leaf" type veth peer name "leaf$j" mtu "$mtu" netns "${prefix}-spine"
    ip -n "$leaf" link set up0 master br0 up
    ip -n "${prefix}-spine" link set "leaf$j" master br0 up
    tbf "$leaf" up0 "$uplink"                 # leaf -> spine
    tbf "${prefix}-spine" "leaf$j" "$uplink"  # spine -> leaf
  done
  for i in $(seq 1 "$nodes"); do
    ns="${prefix}-n$i"
    leaf="${prefix}-leaf$(( (i - 1) % leaves + 1 ))"
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add fab0 mtu "$mtu" netns "$ns" type veth peer name "n$i" mtu "$mtu" netns "$leaf"
    ip -n "$ns" addr add "10.77.1.$i/24" dev fab0
    ip -n "$ns" link set fab0 up
    ip -n "$leaf" link set "n$i" master br0 up
    tbf "$ns" fab0 "$rate"      # node -> leaf
    tbf "$leaf" "n$i" "$rate"   # leaf -> node
    ip link add mgmt0 netns "$ns" type veth peer name "n$i" netns "${prefix}-ctl"
    ip -n "$ns" addr add "10.77.2.$i/24" dev mgmt0
    ip -n "$ns" link set mgmt0 up
    ip -n "${prefix}-ctl" link set "n$i" master brm up
  done
  # n1 reaches the last node over the fabric, and the controller over mgmt (TCP connect)
  reach "${prefix}-n$nodes" "10.77.1.$nodes" "${prefix}-n1" ||
    { echo "netns.sh: n1 cannot reach n$nodes (10.77.1.$nodes) over the fabric" >&2; exit 1; }
  reach "${prefix}-ctl" 10.77.2.254 "${prefix}-n$nodes" ||
    { echo "netns.sh: n$nodes cannot reach the controller (10.77.2.254)" >&2; exit 1; }
  trap - EXIT INT TERM
  echo "netns.sh: $nodes nodes in $leaves leaves, node links $rate, uplinks $uplink (prefix $prefix)"
}

rate() { # rate RATE [UPLINK]: the same tbf on every fabric link, new rates (in place)
  local r=${1:-} u=${2:-${1:-}} ns dev n=0
  [[ "$r" =~ ^[0-9]+(kbit|mbit|gbit)$ && "$u" =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "rate: expected e.g. 300mbit [UPLINK]"
  [[ -n "$(our_namespaces)" ]] || die "rate: no ${prefix}-* namespaces (run: netns.sh up)"
  for ns in $(our_namespaces); do
    for dev in $(ip netns exec "$ns" tc qdisc show | awk '$2 == "tbf" {print $5}'); do
      case "$ns:$dev" in
        "${prefix}"-leaf*:up0 | "${prefix}"-spine:*) tbf "$ns" "$dev" "$u" ;;
        *) tbf "$ns" "$dev" "$r" ;;
      esac
      n=$((n + 1))
    done
  done
  echo "netns.sh: $n fabric link directions: node links $r, uplinks $u"
}

case "$cmd" in
  up) shift; up "$@" ;;
  rate) shift; rate "$@" ;;
  down) down ;;
  show)
    for ns in $(our_namespaces); do
      echo "== $ns"
      ip -n "$ns" -br addr
      ip netns exec "$ns" tc qdisc show | grep tbf || true
    done ;;
  *) echo "usage: netns.sh up [NODES] [LEAVES] [RATE] | rate RATE [UPLINK] | down | show" >&2; exit 2 ;;
esac
