#!/bin/bash
# nccl_ring.sh — dpt-report --nccl-log: the rings NCCL printed at init (NCCL_DEBUG=INFO, rank 0:
# "host:pid:tid [dev] NCCL INFO Channel cc/nn :" and " %3d" per rank, src/graph/rings.cc
# dumpLine) against the plan of a job report.  The plan: 4 nodes, 2 ranks each, on the tests'
# interleaved thin tree (leaf1 = n1,n3; leaf2 = n2,n4): ring n1 n3 n2 n4, 2 inter-switch
# crossings.  NCCL's rings that follow it agree (reversed too); one in Slurm's node order
# (n1 n2 n3 n4: 4 crossings) DIFFERS (exit 1); no ring line, no plan: exit 2.
# usage: nccl_ring.sh DPT_TOPO DPT_REPORT NODE_XML
set -u
topo=$1 report=$2 xml=$3
tmp=$(mktemp -d /tmp/dpt-nccl-ring.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
cat >"$tmp/topology.conf" <<'T'
SwitchName=leaf1 Nodes=n[1,3]
SwitchName=leaf2 Nodes=n[2,4]
SwitchName=spine Switches=leaf[1-2]
T
"$topo" plan --topology-conf "$tmp/topology.conf" --nodes 'n[1-4]' --node-xml "$xml" --ranks-per-node 2 \
  --report "$tmp/rep.json" >/dev/null || { echo "FAIL: dpt-topo plan --report"; exit 1; }
ring() { printf 'n1:4711:4711 [0] NCCL INFO Channel %s :' "$1"; shift; printf ' %3d' "$@"; printf '\n'; }
{
  echo "n1:4711:4711 [0] NCCL INFO NCCL_DEBUG=INFO"
  ring 00/02 0 1 2 3 4 5 6 7
  ring 01/02 1 0 3 2 5 4 7 6
  echo "n1:4711:4790 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"
  ring 00/02 0 1 2 3            # a split communicator of 4 ranks: skipped
  echo "3: n2:4800:4800 [1] NCCL INFO Channel 00/02 :    0   7   6   5   4   3   2   1"  # srun --label, reversed
} >"$tmp/agree.log"
out=$("$report" --nccl-log "$tmp/agree.log" "$tmp/rep.json" 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || fail "rings that follow the plan: exit $rc"
[ "$(grep -c '^nccl ring: communicator [12] channel 0[01]/02 agrees with the plan: n1 n3 n2 n4, 2 inter-switch crossings (the plan: 2)$' <<<"$out")" = 2 ] ||
  fail "the two channels of communicator 1 do not agree with 2 crossings"
grep -q '^nccl ring: communicator 2 channel 00/02 agrees with the plan (reversed): n1 n4 n2 n3, 2 inter-switch crossings' <<<"$out" ||
  fail "the reversed ring is not accepted as reversed"
grep -q '^nccl ring: 1 channel line of communicators of another size than the plan.s 8 ranks skipped$' <<<"$out" ||
  fail "the 4-rank communicator is not said skipped"

ring 00/01 0 1 4 5 2 3 6 7 >"$tmp/differ.log"
out=$("$report" --nccl-log "$tmp/differ.log" "$tmp/rep.json" 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] || fail "a ring in Slurm's node order: exit $rc, not 1"
grep -q '^nccl ring: communicator 1 channel 00/01 DIFFERS from the plan: n1 n2 n3 n4, 4 inter-switch crossings (the plan: 2, n1 n3 n2 n4)$' <<<"$out" ||
  fail "the differing ring is not named with its crossings"

echo "n1:4711:4711 [0] NCCL INFO Bootstrap : Using eth0" >"$tmp/none.log"
out=$("$report" --nccl-log "$tmp/none.log" "$tmp/rep.json" 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] && grep -q "none.log: no NCCL ring of 8 ranks .*run the job with NCCL_DEBUG=INFO" <<<"$out" ||
  fail "a log without ring lines: exit $rc"
out=$("$report" --nccl-log "$tmp/missing.log" "$tmp/rep.json" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "missing.log: cannot open" <<<"$out" || fail "a missing log: exit $rc: $out"
python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); d["plan"]=None; json.dump(d, open(sys.argv[2], "w"))' \
  "$tmp/rep.json" "$tmp/noplan.json"
out=$("$report" --nccl-log "$tmp/agree.log" "$tmp/noplan.json" 2>&1); rc=$?
[ $rc = 2 ] && grep -q "no plan with nodes and ranks" <<<"$out" || fail "a report without a plan: exit $rc: $out"
[ $fails = 0 ] && echo "ok: NCCL's rings checked against the plan: agree, reversed, differ, none"
[ $fails = 0 ]
