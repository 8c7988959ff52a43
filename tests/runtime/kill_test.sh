#!/bin/bash
# kill_test.sh LAUNCH SIG NP WATCHDOG_S PROGRAM -- kill (SIGKILL) or stop
# (SIGSTOP: no progress) rank 1 of NP mid-collective and check that every
# other rank exits non-zero within the watchdog time, with a message naming
# rank 1 (under dpt-launch, a killed rank 1 is named by every survivor's
# watchdog, from the launcher's record).  LAUNCH is "mpirun" or the path of dpt-launch.
set -u
launch=$1 sig=$2 np=$3 wd=$4 prog=$5
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export DPT_WATCHDOG_SECONDS=$wd OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
if [ "$launch" = mpirun ]; then
  mpirun --oversubscribe --bind-to none --mca btl self,vader,tcp -n "$np" "$prog" "$dir" \
    2>"$dir/err" >"$dir/out" &
else
  "$launch" -n "$np" --oversubscribe --comm ring -- "$prog" "$dir" 2>"$dir/err" >"$dir/out" &
fi
lpid=$!
for _ in $(seq 300); do
  [ "$(ls "$dir" | grep -c '^pid\.')" -eq "$np" ] && break
  sleep 0.1
done
if [ "$(ls "$dir" | grep -c '^pid\.')" -ne "$np" ]; then
  echo "FAIL: the ranks did not start"; cat "$dir/err"; kill -9 $lpid; exit 1
fi
victim=$(cat "$dir/pid.1")
sleep 0.3
t0=$(date +%s.%N)
kill -"$sig" "$victim"
wait $lpid
rc=$?
t1=$(date +%s.%N)
kill -9 "$victim" 2>/dev/null
elapsed=$(echo "$t1 - $t0" | bc)
cat "$dir/err"
echo "launcher exit status $rc after ${elapsed}s (watchdog ${wd}s)"
fail=0
[ "$rc" -ne 0 ] || { echo "FAIL: exit status 0"; fail=1; }
# Within the watchdog time (+2 s for mpirun to tear the job down).
if [ "$(echo "$elapsed > $wd + 2" | bc)" = 1 ]; then echo "FAIL: took ${elapsed}s"; fail=1; fi
grep -q "rank 1" "$dir/err" || { echo "FAIL: no message names rank 1"; fail=1; }
if [ "$sig" = KILL ] && [ "$launch" != mpirun ]; then
  # dpt-launch records the dead rank at once: every survivor's watchdog reads it and
  # names rank 1 well before the deadline (not only the launcher's teardown).
  for r in $(seq 0 $((np - 1))); do
    [ "$r" -eq 1 ] && continue
    grep -q "dpt watchdog: rank $r .*a peer failed .*suspected rank 1 on .*killed by signal 9" "$dir/err" ||
      { echo "FAIL: survivor rank $r did not name the killed rank 1"; fail=1; }
  done
elif [ "$sig" = KILL ]; then
  grep -q "mpirun noticed that process rank 1 .*exited on signal 9\|Process name: \[\[[0-9]*,1\],1\]" "$dir/err" ||
    { echo "FAIL: mpirun does not name rank 1"; fail=1; }
fi
if [ "$sig" = STOP ]; then
  # A watchdog names the collective and the stopped rank, and every survivor ends
  # either by its own watchdog (naming rank 1) or, once the first rank has failed,
  # by the launcher stopping it (dpt-launch tears the job down at the first failure,
  # so on a loaded machine a survivor whose clock started later may not get to fire).
  n=$(grep -c "dpt watchdog: .*allreduce\[ring\].*suspected rank 1 .*stopped" "$dir/err")
  [ "$n" -ge 1 ] || { echo "FAIL: no watchdog message names the stopped rank 1"; fail=1; }
  for r in $(seq 0 $((np - 1))); do
    [ "$r" -eq 1 ] && continue
    if ! grep -q "dpt watchdog: rank $r .*suspected rank 1 .*stopped" "$dir/err" &&
       ! grep -q "dpt-launch: rank $r on .*after the launcher forwarded signal" "$dir/err" &&
       ! { [ "$launch" = mpirun ] && grep -q "mpiexec detected that one or more processes exited" "$dir/err"; }; then
      echo "FAIL: survivor rank $r neither reported the stopped rank nor was stopped by the launcher"; fail=1
    fi
  done
fi
exit $fail
