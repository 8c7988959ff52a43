#!/bin/bash
# oversubscribe.sh — dpt-launch starts more ranks than this machine has cores (on a machine
# without GPUs; more than its GPUs on one with GPUs), or two ranks on a 1-GPU node (the fixture
# node-2core-1gpu.xml: its CPUs 0-1 exist on every machine), only with --oversubscribe: without
# it, exit 2 and a message naming the host, what would be shared and --oversubscribe, and nothing
# started; with it the ranks run, the sharing is said on stderr and the ranks get
# DPT_OVERSUBSCRIBE=1 and DPT_PLAN_OVERSUBSCRIBED (what is shared, for their job report).  When a rank fails, mpirun's abort paragraphs stay out of dpt-launch's
# output (mpirun --quiet) and dpt-launch's own summary line names the rank.
#
# usage: oversubscribe.sh DPT_LAUNCH DPT_TOPO NODE_2CORE_1GPU_XML
set -u
launch=$1 topo=$2 gpu1=$3
unset CUDA_VISIBLE_DEVICES SLURM_STEP_GPUS # the plan's GPU, not a narrowed list
tmp=$(mktemp -d /tmp/dpt-oversub.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }

read -r cores gpus < <("$topo" --json | python3 -c 'import json,sys; d=json.load(sys.stdin); print(d["machine"]["cores"], len(d["gpus"]))')
if [ "$gpus" -gt 0 ]; then n=$((gpus + 1)) what="GPU"; else n=$((cores + 1)) what="CPUs"; fi
echo "this machine: $cores cores, $gpus GPUs: dpt-launch -n $n"

"$launch" -n "$n" -- sh -c "touch $tmp/started.\$DPT_RANK" >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "  without --oversubscribe: exit $rc: $(head -1 "$tmp/err")"
[ $rc = 2 ] || fail "-n $n: exit $rc, not 2"
grep -q "^dpt-launch: host '$(hostname)': .*share $what.*--oversubscribe" "$tmp/err" || fail "-n $n: no message naming --oversubscribe: $(cat "$tmp/err")"
! ls "$tmp"/started.* >/dev/null 2>&1 || fail "-n $n: ranks were started"

"$launch" -n "$n" --oversubscribe -- sh -c "echo \$DPT_OVERSUBSCRIBE > $tmp/started.\$DPT_RANK; echo \"\$DPT_PLAN_OVERSUBSCRIBED\" > $tmp/shared.\$DPT_RANK" >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "  with --oversubscribe: exit $rc: $(head -1 "$tmp/err")"
[ $rc = 0 ] || fail "-n $n --oversubscribe: exit $rc: $(cat "$tmp/err")"
grep -q "^dpt-launch: oversubscribed as asked: host '$(hostname)': $n ranks on" "$tmp/err" || fail "-n $n --oversubscribe: not said on stderr: $(cat "$tmp/err")"
[ "$(cat "$tmp"/started.* 2>/dev/null | grep -c '^1$')" = "$n" ] || fail "-n $n --oversubscribe: not $n ranks with DPT_OVERSUBSCRIBE=1: $(ls "$tmp")"
# what is shared reaches the ranks (DPT_PLAN_OVERSUBSCRIBED: the job report's job.oversubscribed)
[ "$(sed -n 's/^dpt-launch: oversubscribed as asked: //p' "$tmp/err")" = "$(cat "$tmp/shared.0" 2>/dev/null)" ] ||
  fail "-n $n --oversubscribe: rank 0's DPT_PLAN_OVERSUBSCRIBED is '$(cat "$tmp/shared.0" 2>/dev/null)'"
rm -f "$tmp"/started.* "$tmp"/shared.*

# two ranks on a node with one GPU (and 2 cores)
"$launch" -n 2 --input "$gpu1" -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "  1-GPU node, -n 2: exit $rc: $(head -1 "$tmp/err")"
[ $rc = 2 ] && grep -q "^dpt-launch: host '$(hostname)': 2 ranks per node but its topology ($gpu1) has 1 GPU: ranks would share GPUs; use at most 1 rank per node, or allow oversubscription (dpt-launch / dpt-topo plan --oversubscribe" "$tmp/err" ||
  fail "1-GPU node, -n 2: exit $rc: $(cat "$tmp/err")"
"$launch" -n 2 --oversubscribe --input "$gpu1" -- sh -c "echo \$CUDA_VISIBLE_DEVICES \$DPT_CPUSET > $tmp/gpu.\$DPT_RANK" >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "  1-GPU node, -n 2 --oversubscribe: exit $rc: $(head -1 "$tmp/err"); ranks: $(cat "$tmp"/gpu.* 2>/dev/null | tr '\n' ';')"
[ $rc = 0 ] || fail "1-GPU node, -n 2 --oversubscribe: exit $rc: $(cat "$tmp/err")"
grep -q "^dpt-launch: oversubscribed as asked: host '$(hostname)': 2 ranks on 1 GPU: ranks 0 and 1 share GPU 0$" "$tmp/err" || fail "1-GPU node: not said: $(cat "$tmp/err")"
[ "$(cat "$tmp/gpu.0" 2>/dev/null)" = "0 0" ] && [ "$(cat "$tmp/gpu.1" 2>/dev/null)" = "0 1" ] ||
  fail "1-GPU node: rank 0 '$(cat "$tmp/gpu.0" 2>/dev/null)', rank 1 '$(cat "$tmp/gpu.1" 2>/dev/null)' (want GPU 0 for both, CPUs 0 and 1)"

# --oversubscribe belongs to -n
"$launch" --hostfile /dev/null -N 1 --oversubscribe -- true >"$tmp/out" 2>"$tmp/err"
rc=$?
[ $rc = 2 ] && grep -q "oversubscribe goes with -n" "$tmp/err" || fail "--hostfile with --oversubscribe: exit $rc: $(cat "$tmp/err")"

# a failing rank: dpt-launch's summary, without mpirun's abort paragraphs
"$launch" -n 2 -- sh -c 'test "$DPT_RANK" = 1 && exit 3; sleep 2' >"$tmp/out" 2>"$tmp/err"
rc=$?
echo "  a rank exits 3: exit $rc: $(tail -1 "$tmp/err")"
[ $rc = 3 ] || fail "failing rank: exit $rc"
grep -q "^dpt-launch: rank 1 on [^ ]* exited with status 3 (first failing rank; the others were stopped)$" "$tmp/err" || fail "no summary line: $(cat "$tmp/err")"
! grep -q -e "^------" -e "Primary job" -e "detected that one or more processes exited" "$tmp/err" "$tmp/out" ||
  fail "mpirun's abort paragraphs are there: $(cat "$tmp/err")"
"$launch" -n 2 -v -- sh -c 'test "$DPT_RANK" = 1 && exit 3; sleep 2' >"$tmp/out" 2>"$tmp/err"
grep -q "Primary job\|detected that one or more processes exited" "$tmp/err" || fail "-v does not show mpirun's own messages: $(cat "$tmp/err")"

[ $fails = 0 ] && echo "ok: oversubscription only with --oversubscribe, said on stderr; no abort paragraphs"
[ $fails = 0 ]
