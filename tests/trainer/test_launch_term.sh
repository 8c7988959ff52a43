#!/bin/sh
# test_launch_term: `kill -TERM <dpt-launch>` (a scheduler or an operator stopping
# the job) with 2 ranks: dpt-launch passes it on to the ranks (through mpirun as
# SIGUSR2, turned back into SIGTERM by the rank supervisors; mpirun would abort
# the job on a SIGTERM of its own), every rank stops after the same step, rank 0
# writes the checkpoint, and dpt-launch exits 3 like a preempted rank, so that a
# requeued job continues: the same command with --resume auto says that it
# resumed and from which step, and finishes.
# usage: test_launch_term.sh dpt-launch dpt-train dpt-report REPORT_DIR
L=$1 T=$2 R=$3 RD=$4
tmp=$(mktemp -d /tmp/dpt-test-launch-term.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
mkdir -p "$RD" && rm -f "$RD"/launch-term-*.json* || fail "cannot use the report directory '$RD'"
N=40
common="--dataset synthetic --synthetic-images 256 --image-size 32 --width 0.0625 --batch-size 8
        --iterations $N --no-val --seed 3 --log-every 1 --prefetch 1 --checkpoint-dir $tmp/ck"

"$L" -n 2 --threads 1 -- "$T" $common --report "$RD/launch-term-1.json" >"$tmp/1.log" 2>&1 &
pid=$!
i=0
while ! grep -q 2>/dev/null '^epoch 1/.* step 1/' "$tmp/1.log" && [ $i -lt 600 ]; do sleep 0.05; i=$((i + 1)); done
[ $i -lt 600 ] || fail "no progress line after 30 s: $(tail -3 "$tmp/1.log")"
t0=$(date +%s.%N)
kill -TERM $pid
wait $pid
st=$?
el=$(echo "$(date +%s.%N) - $t0" | bc)
echo "SIGTERM to dpt-launch: exit $st after ${el}s"
grep '^dpt-launch\|^dpt-train: preempted' "$tmp/1.log"
[ "$st" = 3 ] || fail "exit $st, want 3: $(grep -v '^epoch' "$tmp/1.log" | tail -8)"
line=$(grep "^dpt-train: preempted by SIGTERM at step " "$tmp/1.log")
step=$(echo "$line" | sed -n 's/.* at step \([0-9]*\); checkpoint .*/\1/p')
[ -n "$step" ] && [ "$step" -ge 1 ] && [ "$step" -lt $N ] || fail "no preemption message with a step: $(tail -5 "$tmp/1.log")"
[ "$(grep -c '^dpt-train: preempted' "$tmp/1.log")" = 1 ] || fail "the message must come from rank 0 only"
[ -n "$step" ] && [ -s "$tmp/ck/$(printf 'ckpt-%010d.dpt' "$step")" ] || fail "no checkpoint for step $step: $(ls "$tmp/ck")"
# (mpirun ends the job when the first rank has exited non-zero: the other one's
# exit may go unrecorded if it is still writing its report a second later)
grep -q "^dpt-launch: the ranks stopped after the forwarded SIGTERM: [12] of 2 exited with status 3" "$tmp/1.log" ||
  fail "dpt-launch does not say the ranks stopped after its SIGTERM: $(grep '^dpt-launch' "$tmp/1.log")"
grep -q "^dpt-launch: rank [01] on .* exited with status 3 after the launcher forwarded signal 15" "$tmp/1.log" ||
  fail "the ranks did not get SIGTERM from their supervisors: $(grep '^dpt-launch' "$tmp/1.log")"
grep -q "^dpt-launch: .*\(killed by signal\|without a failing rank\)" "$tmp/1.log" &&
  fail "a rank was killed: $(grep '^dpt-launch' "$tmp/1.log")"

"$L" -n 2 --threads 1 -- "$T" $common --resume auto --report "$RD/launch-term-2.json" >"$tmp/2.log" 2>&1
st=$?
[ "$st" = 0 ] || fail "resume: exit $st: $(tail -5 "$tmp/2.log")"
grep "^dpt-train: resumed" "$tmp/2.log"
grep -q "^dpt-train: resumed from $tmp/ck/$(printf 'ckpt-%010d.dpt' "$step") at step $step " "$tmp/2.log" ||
  fail "resume: does not say it resumed at step $step: $(grep '^dpt-train' "$tmp/2.log")"
grep -q "^dpt-train: done: $((N - step)) steps" "$tmp/2.log" || fail "resume: did not run the $((N - step)) steps left"
grep -q '"exit_status": 3' "$RD/launch-term-1.json" || fail "the first run's report does not say exit 3"
"$R" --check "$RD"/launch-term-*.json >"$tmp/check" 2>&1 || fail "invalid report: $(cat "$tmp/check")"
if [ $fails = 0 ]; then echo "ok: SIGTERM to dpt-launch (2 ranks): checkpoint at step $step, exit 3; --resume auto resumed at step $step"; rm -rf "$tmp"; fi
[ $fails = 0 ]
