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
  "$launch" -n "$np" --oversubscribe --comm ring --report "$dir/report.json" -- "$prog" "$dir" \
    2>"$dir/err" >"$dir/out" &
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
# Within the watchdog time, plus what follows it by design: the watchdog's grace for the
# other survivors to speak (min(0.5 s, limit/8): runtime/dpt_watchdog.c), mpirun's
# teardown of the rest (SIGCONT, odls_base_sigkill_timeout = 1 s, SIGTERM, 1 s, SIGKILL:
# Open MPI 4.1's odls) and 0.5 s for the launcher's summary and job report.
limit=$(echo "g = $wd / 8; if (g > 0.5) g = 0.5; $wd + g + 2 + 0.5" | bc -l)
if [ "$(echo "$elapsed > $limit" | bc)" = 1 ]; then echo "FAIL: took ${elapsed}s > ${limit}s"; fail=1; fi
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
if [ "$launch" != mpirun ]; then
  # How rank 1 ended, from its supervisor's part of the job report (written ahead, so it
  # is there even when mpirun's teardown SIGKILLs the supervisor): killed by the test's
  # SIGKILL; or, stopped, continued after the teardown's SIGTERM and ended by it, unless
  # mpirun's SIGKILL came first (it follows the SIGTERM within a second, sooner when
  # other ranks' exits cut its sleep short: Open MPI 4.1's odls).
  got=$(python3 -c 'import json, sys
ranks = json.load(open(sys.argv[1]))["ranks"]
e = [r for r in ranks if r["rank"] == 1][0]["end"]
print(e["signal"], e["forwarded"], e["how"])' "$dir/report.json" 2>&1)
  if [ "$sig" = KILL ]; then want="^9 False killed by signal 9 "
  else want="^\(15 True killed by signal 15 \|None False no end recorded: its supervisor was killed\)"; fi
  echo "rank 1 in the job report: $got"
  echo "$got" | grep -q "$want" || { echo "FAIL: rank 1's end in the job report (want $want)"; fail=1; }
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
