#!/bin/sh
# test_faults: a rank of dpt-train dies (kill: SIGKILL, segv: SIGSEGV, oom: an
# allocation fails) or stalls (stop: SIGSTOP) during start-up, a gradient
# all-reduce, a checkpoint or validation (DPT_FAULT=PHASE:RANK:KIND[:STEP]).
# For each phase: dpt-launch exits non-zero within the watchdog time + a margin,
# every survivor exits non-zero and writes <report>.rank<N>.err (dpt.error/1)
# naming the failed rank, its node and the phase it was in (or, when a rank
# writes the report after them, that report holds them: runtime/dpt_report); dpt-launch (kill,
# segv) or the survivors' watchdog lines (oom, stop) name the rank and its node, and
# dpt-launch's verdict names the injected rank in every case (not a survivor).
# usage: test_faults.sh dpt-launch dpt-train KIND
L=$1 T=$2 KIND=$3
WD=4
tmp=$(mktemp -d /tmp/dpt-test-faults.XXXXXX)
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
node=$(hostname)
export DPT_WATCHDOG_SECONDS=$WD
# start-up (data, model: ~2 s) + the watchdog + teardown; under ASan (-DDPT_SANITIZE=ON)
# start-up and teardown take several times longer, and a SIGSEGV is ASan's report + exit 1
margin=20 asan=0 # a loaded 2-core machine (-j2) took up to 17.8 s for stop
ldd "$T" 2>/dev/null | grep -q 'libasan\|libclang_rt.asan' && margin=30 asan=1
# 3 ranks, 4 steps per epoch, a checkpoint every 2 steps, validation at each epoch's end
common="--dataset synthetic --synthetic-images 96 --image-size 32 --width 0.0625 --batch-size 8
        --iterations 12 --seed 3 --log-every 50 --prefetch 1 --checkpoint-every 2"
victim=1
for phase in startup allreduce checkpoint validation; do
  d=$tmp/$phase
  mkdir -p "$d"
  [ $phase = checkpoint ] && victim=0 || victim=$(( (victim + 1) % 3 )) # rank 0 too
  t0=$(date +%s.%N)
  DPT_FAULT=$phase:$victim:$KIND:2 "$L" -n 3 --oversubscribe --threads 1 -- "$T" $common --checkpoint-dir "$d/ck" \
      --report "$d/rep.json" >"$d/log" 2>&1
  st=$?
  el=$(echo "$(date +%s.%N) - $t0" | bc)
  # a stopped rank stays stopped after its launcher is gone: end it (its pid is in the log)
  pid=$(sed -n 's/.*DPT_FAULT: rank [0-9]* (pid \([0-9]*\)) fails on purpose.*/\1/p' "$d/log")
  [ "$KIND" = stop ] && [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null
  echo "$KIND in $phase (rank $victim): dpt-launch exit $st after ${el}s"
  grep -q "DPT_FAULT: rank $victim .* in phase $phase" "$d/log" || { fail "$phase: the fault did not fire: $(tail -5 "$d/log")"; continue; }
  [ "$st" != 0 ] || fail "$phase: dpt-launch exit 0"
  [ "$(echo "$el < $WD + $margin" | bc)" = 1 ] || fail "$phase: took ${el}s (watchdog ${WD}s, margin ${margin}s)"
  # dpt-launch's last line names the injected rank (not a survivor whose watchdog fired):
  # kill/segv: it died of the signal; oom: it failed with an error in the phase; stop: the
  # survivors' watchdogs named it
  named=$(grep "^dpt-launch: .*(first failing rank" "$d/log" | tail -1)
  echo "  $named"
  case $KIND in
    kill) want="rank $victim on $node killed by signal " ;;
    segv) want="rank $victim on $node killed by signal "
          [ $asan = 1 ] && want="rank $victim on $node \(killed by signal \|exited with status 1 \)" ;;
    oom) want="rank $victim on $node \(failed with an error in phase $phase\|exited with status\)" ;;
    stop) want="rank $victim on $node made no progress in phase $phase.*: named by the watchdogs of rank" ;;
  esac
  echo "$named" | grep -q "^dpt-launch: $want" ||
    fail "$phase: dpt-launch does not name rank $victim on $node: $(grep '^dpt-launch' "$d/log")"
  case $KIND in
    oom|stop) grep -q "dpt watchdog: .*suspected rank $victim on $node" "$d/log" ||
         fail "$phase: no watchdog line names rank $victim on $node: $(grep 'dpt watchdog' "$d/log")" ;;
  esac
  for r in 0 1 2; do
    [ $r = $victim ] && continue
    e=$d/rep.json.rank$r.err
    # a report written after the survivors' error files has taken them in (and removed them):
    # the same error, read back from its errors[] in the file's form
    [ -s "$e" ] || [ ! -s "$d/rep.json" ] || python3 - "$d/rep.json" "$r" >"$e" <<'PY'
import json, sys
for x in json.load(open(sys.argv[1]))["errors"]:
    if x["rank"] == int(sys.argv[2]) and x.get("file"):
        print(json.dumps({"schema": "dpt.error/1", "kind": x["kind"], "rank": x["rank"], "node": x["host"],
                          "phase": x["phase"], "suspect": x["suspect"]}))
PY
    [ -s "$e" ] || { fail "$phase: survivor rank $r wrote no $e (nor is it in rep.json)"; continue; }
    grep -q "\"schema\": \"dpt.error/1\", \"kind\": \"watchdog\"" "$e" &&
      grep -q "\"suspect\": {\"rank\": $victim, \"node\": \"$node\", \"phase\": \"[a-z ]*$phase" "$e" ||
      fail "$phase: $e does not name rank $victim on $node in phase $phase: $(cat "$e")"
    # (its watchdog wrote the file and then _exit(1); its supervisor's line may be cut by the teardown)
    ! grep -q "^dpt-launch: rank $r on .*exited with status 0" "$d/log" || fail "$phase: survivor rank $r exited 0"
  done
  [ $phase = checkpoint ] && [ "$KIND" = kill ] && cat "$d/log" "$d"/rep.json.rank*.err | grep -v '^ \|^--\|^$'
done
# the default report name (no --report, no DPT_REPORT) carries rank 0's pid: every
# rank's error file takes rank 0's name (agreed at start-up), not its own pid's
if [ "$KIND" = kill ]; then
  d=$tmp/default
  mkdir -p "$d"
  (cd "$d" && env -u DPT_REPORT DPT_FAULT=allreduce:1:kill:2 "$L" -n 3 --oversubscribe --threads 1 -- "$T" $common \
      --checkpoint-dir "$d/ck" >"$d/log" 2>&1)
  # dpt-launch wrote the job report (the program could not): under rank 0's default
  # name, with the survivors' error files taken in -- and their names were rank 0's
  left=$(cd "$d" && ls | grep -v '^log$\|^ck$' | tr '\n' ' ')
  got=$(python3 - "$d" <<'PY'
import glob, json, os, sys
files = glob.glob(os.path.join(sys.argv[1], "dpt-report-dpt-train-*.json"))
if len(files) != 1:
    sys.exit(0)
doc = json.load(open(files[0]))
pid0 = [r["pid"] for r in doc["ranks"] if r["rank"] == 0]
print(os.path.basename(files[0]), pid0[0] if pid0 else "-",
      " ".join(sorted(e["file"] for e in doc["errors"] if e.get("file"))))
PY
)
  echo "default report name: left $left; report, rank 0 pid, error files taken in: $got"
  set -- $got
  [ $# = 4 ] && [ "$left" = "$1 " ] && [ "$1" = "dpt-report-dpt-train-$2.json" ] &&
    [ "$3 $4" = "$1.rank0.err $1.rank2.err" ] ||
    fail "default report name: the survivors' error files do not share rank 0's name, or dpt-launch wrote no report under it: left $left; $got"
fi
if [ $fails = 0 ]; then echo "ok: $KIND of a rank in start-up, all-reduce, checkpoint, validation: named by the survivors"; rm -rf "$tmp"; fi
[ $fails = 0 ]
