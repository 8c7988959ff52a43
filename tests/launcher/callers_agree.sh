#!/bin/bash
# callers_agree.sh — the five planners of a job agree: `dpt-topo plan`, dpt-launch, srun --dpt's
# srun-side planning (the SPANK plugin's dpt_spank_local_compute), every rank's bootstrap
# (dpt_boot under mpirun) and the job report (dpt_report_plan_from_launch) all plan through
# topology/dpt_job.  For each job below they must print the same plan digest, or all refuse it
# with the same message and exit status 2; with oversubscription asked for, the tools say so on
# stderr and the report records it.
#
# usage: callers_agree.sh DPT_TOPO DPT_LAUNCH JOB_CALLERS TEST_BOOT MN1_XML CPU2_XML GPU1_XML MPIRUN...
set -u
topo=$1 launch=$2 callers=$3 boot=$4 mn1=$5 cpu2=$6 gpu1=$7
shift 7
mpirun=("$@")
host=$(hostname)
tmp=$(mktemp -d /tmp/dpt-callers.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
unset DPT_PLAN_XML DPT_PLAN_GPUS DPT_PLAN_THREADS DPT_FP16 DPT_OVERSUBSCRIBE DPT_PLAN_DIGEST HWLOC_XMLFILE

# one_job NAME XML RANKS OVERSUB EXPECT(ok|refused): run the five, compare
one_job() {
  local name=$1 xml=$2 r=$3 over=$4 expect=$5 d
  local tflag=() lflag=() rpg=0 benv=() renv=()
  if [ "$over" = 1 ]; then
    tflag=(--oversubscribe) lflag=(--oversubscribe) rpg=$r benv=(-x DPT_OVERSUBSCRIBE=1) renv=(DPT_OVERSUBSCRIBE=1)
  fi
  local out=$tmp/$name
  mkdir -p "$out"
  # 1. dpt-topo plan
  (cd "$out" && "$topo" plan --nodes "$host" --node-xml "$xml" --ranks-per-node "$r" "${tflag[@]}" --json) \
    >"$out/topo.out" 2>"$out/topo.err"
  echo $? >"$out/topo.rc"
  # 2. dpt-launch (dry run: the plan and the mpirun command, nothing started)
  (cd "$out" && "$launch" -n "$r" "${lflag[@]}" --input "$xml" --dry-run -- true) >"$out/launch.out" 2>"$out/launch.err"
  echo $? >"$out/launch.rc"
  # 3. srun --dpt's planning (ranks-per-gpu=K is its way to ask)
  "$callers" spank "$host" "$xml" "$r" "$rpg" >"$out/spank.out" 2>&1
  echo $? >"$out/spank.rc"
  # 4. the bootstrap on every rank (mpirun, PMIx), the node from DPT_PLAN_XML
  "${mpirun[@]}" -n "$r" -x DPT_PLAN_XML="$xml" "${benv[@]}" "$boot" --nodes 1 >"$out/boot.out" 2>"$out/boot.err"
  echo $? >"$out/boot.rc"
  # 5. the job report, from the variables dpt-launch gives a rank (digest: dpt-topo's, or any)
  d=$(sed -n 's/^  "digest": "\([0-9a-f]*\)",$/\1/p' "$out/topo.out")
  env DPT_NODE_NAME="$host" DPT_LOCAL_SIZE="$r" DPT_N_NODES=1 DPT_PLAN_DIGEST="${d:-0123456789abcdef}" \
      DPT_PLAN_XML="$xml" "${renv[@]}" "$callers" report 0 0 >"$out/report.out" 2>&1
  echo $? >"$out/report.rc"

  local dt dl ds db dr
  dt=$d
  dl=$(sed -n 's/^bindings (plan digest \([0-9a-f]*\)):$/\1/p' "$out/launch.out")
  ds=$(sed -n 's/^digest //p' "$out/spank.out")
  db=$(sed -n 's/^test_boot: .* ok (plan \([0-9a-f]*\),.*/\1/p' "$out/boot.out")
  dr=$(sed -n 's/^digest //p' "$out/report.out")
  if [ "$expect" = ok ]; then
    echo "$name: topo $dt launch $dl spank $ds boot $db report $dr"
    [ -n "$dt" ] && [ "$dt" = "$dl" ] && [ "$dt" = "$ds" ] && [ "$dt" = "$db" ] && [ "$dt" = "$dr" ] ||
      fail "$name: the five callers disagree: topo '$dt' launch '$dl' spank '$ds' boot '$db' report '$dr'$(
        cat "$out"/*.err "$out/spank.out" "$out/report.out" | head -20 | sed 's/^/\n  /')"
    if [ "$over" = 1 ]; then
      grep -q "^dpt-topo plan: oversubscribed as asked: host '$host': " "$out/topo.err" || fail "$name: dpt-topo plan does not say it oversubscribes: $(cat "$out/topo.err")"
      grep -q "^dpt-launch: oversubscribed as asked: host '$host': " "$out/launch.err" || fail "$name: dpt-launch does not say it oversubscribes: $(cat "$out/launch.err")"
      grep -q "DPT_OVERSUBSCRIBE=1" "$out/launch.out" || fail "$name: dpt-launch does not pass DPT_OVERSUBSCRIBE=1 to the ranks"
      grep -q "^note oversubscribed as asked: host '$host': " "$out/spank.out" || fail "$name: srun --dpt's planning has no note: $(cat "$out/spank.out")"
      grep -q "^dpt: bootstrap: oversubscribed as asked: host '$host': " "$out/boot.err" || fail "$name: the bootstrap's rank 0 does not say it oversubscribes: $(cat "$out/boot.err")"
      grep -q "^note host '$host': " "$out/report.out" || fail "$name: the report does not record it: $(cat "$out/report.out")"
    else
      ! grep -q "oversubscribed" "$out"/*.err "$out"/*.out || fail "$name: oversubscription said without oversubscribing"
    fi
  else
    # the message each prints, without its own prefix
    local mt ml ms mb mr
    mt=$(sed -n 's/^dpt-topo plan: //p' "$out/topo.err")
    ml=$(sed -n 's/^dpt-launch: //p' "$out/launch.err")
    ms=$(sed -n 's/^refused: //p' "$out/spank.out")
    mb=$(sed -n 's/^test_boot: rank [0-9]*: bootstrap: //p' "$out/boot.err" | head -1)
    mr=$(sed -n 's/^refused: //p' "$out/report.out")
    echo "$name: refused by all five: $mt"
    for c in topo launch spank boot report; do
      [ "$(cat "$out/$c.rc")" = 2 ] || fail "$name: $c exits $(cat "$out/$c.rc"), not 2"
    done
    [ -n "$mt" ] && [ "$mt" = "$ml" ] && [ "$mt" = "$ms" ] && [ "$mt" = "$mb" ] && [ "$mt" = "$mr" ] ||
      fail "$name: different refusals:\n  topo   $mt\n  launch $ml\n  spank  $ms\n  boot   $mb\n  report $mr"
    case "$mt" in *--oversubscribe*) ;; *) fail "$name: the refusal does not name --oversubscribe: $mt" ;; esac
    [ ! -s "$out/topo.out" ] && [ ! -s "$out/launch.out" ] || fail "$name: a refused plan printed something on stdout"
  fi
  # nothing written where they ran
  [ -z "$(ls -A "$out" | grep -v '\.\(out\|err\|rc\)$')" ] || fail "$name: files left: $(ls -A "$out")"
}

one_job mn1-8 "$mn1" 8 0 ok             # one rank per GPU
one_job mn1-4 "$mn1" 4 0 ok             # fewer ranks than GPUs
one_job gpu1-2 "$gpu1" 2 0 refused      # two ranks, one GPU
one_job gpu1-2-over "$gpu1" 2 1 ok
one_job cpu2-3 "$cpu2" 3 0 refused      # three CPU ranks, two cores
one_job cpu2-3-over "$cpu2" 3 1 ok
one_job cpu2-2 "$cpu2" 2 0 ok

# The report's plan is the launcher's plan computed for the job's own message (here 1.4 MiB of
# fp32 gradients, and half of it on an fp16 wire), its digest kept as launch_digest.
d=$("$topo" plan --nodes "$host" --node-xml "$mn1" --json | sed -n 's/^  "digest": "\([0-9a-f]*\)",$/\1/p')
for fp16 in 0 1; do
  out=$(env DPT_NODE_NAME="$host" DPT_LOCAL_SIZE=8 DPT_N_NODES=1 DPT_PLAN_DIGEST="$d" DPT_PLAN_XML="$mn1" \
        "$callers" report 1496480 $fp16)
  want=$("$topo" plan --nodes "$host" --node-xml "$mn1" --size 1496480 $([ $fp16 = 1 ] && echo --fp16) --json |
         sed -n 's/^  "digest": "\([0-9a-f]*\)",$/\1/p')
  echo "report for 1496480 bytes, fp16=$fp16: $(echo "$out" | tr '\n' ' ')"
  grep -q "^digest $want$" <<<"$out" && grep -q "^launch_digest $d$" <<<"$out" &&
    grep -q "^plan size_bytes $((1496480 / (fp16 + 1)))$" <<<"$out" && grep -q "^predicted_s [0-9.e-]*$" <<<"$out" ||
    fail "report sized for the job (fp16=$fp16): $out (want digest $want = dpt-topo plan --size 1496480, launch_digest $d)"
done

[ $fails = 0 ] && echo "ok: dpt-topo plan, dpt-launch, srun --dpt, the bootstrap and the report agree"
[ $fails = 0 ]
