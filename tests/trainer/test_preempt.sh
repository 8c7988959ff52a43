#!/bin/sh
# test_preempt: Slurm's end of time / preemption outside Slurm.  SIGUSR1 to
# dpt-launch (forwarded to every rank) once training runs: all ranks stop after
# the same step, a checkpoint is written, rank 0 says so and the job exits 3;
# --resume auto then says it resumed and from which step and finishes (exit 0).
# One rank with SIGTERM (scancel) the same; without --checkpoint-dir: exit 1
# with a message that nothing was saved.
# Every run's job report goes to REPORT_DIR, checked with dpt-report --check (the
# preempted runs' reports say exit 3).
# usage: test_preempt.sh dpt-launch dpt-train dpt-report REPORT_DIR
L=$1 T=$2 R=$3 RD=$4
tmp=$(mktemp -d /tmp/dpt-test-preempt.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
mkdir -p "$RD" && rm -f "$RD"/preempt-*.json* || fail "cannot use the report directory '$RD'"
export DPT_REPORT="$RD/preempt-%p.json"
# enough steps that a run is never over before the signal lands (a step takes 0.05-0.2 s)
N=40
common="--dataset synthetic --synthetic-images 256 --image-size 32 --width 0.0625 --batch-size 8
        --iterations $N --no-val --seed 3 --log-every 1 --prefetch 1"

# start_and_signal SIGNAL LOG CMD...: run CMD in the background, send SIGNAL once the
# first progress line is in LOG, wait; sets $st to the exit status
start_and_signal() {
  sig=$1 log=$2
  shift 2
  "$@" >"$log" 2>&1 &
  pid=$!
  i=0
  while ! grep -q 2>/dev/null '^epoch 1/.* step 1/' "$log" && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
  [ $i -lt 600 ] || fail "no progress line after 30 s: $(tail -3 "$log")"
  kill -s "$sig" $pid
  wait $pid
  st=$?
}

# check_preempted NAME LOG DIR SIGNAME: exit 3, the message, its checkpoint; sets $step
check_preempted() {
  [ "$st" = 3 ] || fail "$1: exit $st, want 3: $(tail -5 "$2")"
  line=$(grep "^dpt-train: preempted by $4 at step " "$2")
  [ -n "$line" ] || fail "$1: no preemption message: $(tail -5 "$2")"
  step=$(echo "$line" | sed -n 's/.* at step \([0-9]*\); checkpoint \(.*\); resume with --resume auto$/\1/p')
  ck=$(echo "$line" | sed -n 's/.*; checkpoint \(.*\); resume with --resume auto$/\1/p')
  [ -n "$step" ] && [ "$step" -ge 1 ] && [ "$step" -lt $N ] || fail "$1: bad step in '$line'"
  [ "$ck" = "$(printf '%s/ckpt-%010d.dpt' "$3" "$step")" ] && [ -s "$ck" ] ||
    fail "$1: checkpoint '$ck' for step $step missing in $3: $(ls "$3")"
}

# check_resumed NAME LOG DIR: a resume of the checkpoint at $step that finishes
check_resumed() {
  [ "$st" = 0 ] || fail "$1 resume: exit $st: $(tail -5 "$2")"
  grep -q "^dpt-train: resumed from $3/ckpt-.* at step $step " "$2" ||
    fail "$1 resume: does not say it resumed at step $step: $(head -3 "$2")"
  n=$(sed -n 's/^dpt-train: done: \([0-9]*\) steps.*/\1/p' "$2")
  [ "$n" = $((N - step)) ] || fail "$1 resume: ran '$n' steps, want $((N - step))"
  [ -s "$3/$(printf "ckpt-%010d.dpt" $N)" ] || fail "$1 resume: no final checkpoint"
}

# 2 ranks, SIGUSR1 to dpt-launch (srun --signal=USR1@<s> sends it to the tasks alike)
start_and_signal USR1 "$tmp/2r.log" "$L" -n 2 --threads 1 -- "$T" $common --checkpoint-dir "$tmp/2r"
check_preempted "2 ranks" "$tmp/2r.log" "$tmp/2r" SIGUSR1
[ "$(grep -c '^dpt-train: preempted' "$tmp/2r.log")" = 1 ] || fail "2 ranks: the message must come from rank 0 only"
"$L" -n 2 --threads 1 -- "$T" $common --checkpoint-dir "$tmp/2r" --resume auto \
    >"$tmp/2r-resume.log" 2>&1
st=$?
check_resumed "2 ranks" "$tmp/2r-resume.log" "$tmp/2r"

# one rank, SIGTERM (scancel), double-buffered: the in-flight gradient is saved too
start_and_signal TERM "$tmp/1r.log" env OMP_NUM_THREADS=1 "$T" $common --double-buffering --checkpoint-dir "$tmp/1r"
check_preempted "1 rank" "$tmp/1r.log" "$tmp/1r" SIGTERM
OMP_NUM_THREADS=1 "$T" $common --double-buffering --checkpoint-dir "$tmp/1r" --resume auto >"$tmp/1r-resume.log" 2>&1
st=$?
check_resumed "1 rank" "$tmp/1r-resume.log" "$tmp/1r"

# no --checkpoint-dir: it says nothing was saved and exits 1 (not 3: nothing to resume)
start_and_signal USR1 "$tmp/nock.log" env OMP_NUM_THREADS=1 "$T" $common
[ "$st" = 1 ] || fail "no --checkpoint-dir: exit $st, want 1"
grep -q "preempted by SIGUSR1 at step [0-9]*, but no --checkpoint-dir was given" "$tmp/nock.log" ||
  fail "no --checkpoint-dir: no message: $(tail -3 "$tmp/nock.log")"

grep -l '"exit_status": 3' "$RD"/preempt-*.json >/dev/null 2>&1 || fail "no report of a preempted run (exit 3) in $RD"
"$R" --check "$RD"/preempt-*.json >"$tmp/check" 2>&1 || fail "invalid report: $(cat "$tmp/check")"
if [ $fails = 0 ]; then echo "ok: preemption (2 ranks SIGUSR1, 1 rank SIGTERM double-buffered): exit 3, checkpoint, resumed; without --checkpoint-dir exit 1"; rm -rf "$tmp"; fi
[ $fails = 0 ]
