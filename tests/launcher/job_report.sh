#!/bin/bash
# job_report.sh — `dpt-launch` writes the job report of any program (runtime/dpt_report_end.h):
# per rank its node, pid, exit status or signal, wall time, peak RSS and the environment it
# was handed; a failing rank in errors[]; dpt-report shows it; --report PATH and --no-report.
# The program here is Python (Debian's python3) and sh: nothing of dpt inside the ranks.
# The reports are kept in OUT_DIR for report.schema (JSON Schema and the C validator).
# usage: job_report.sh DPT_LAUNCH DPT_REPORT OUT_DIR SLOW_FSYNC_SO
set -u
launch=$1 report=$2 out=$3 slow_fsync=$4
tmp=$(mktemp -d /tmp/dpt-job-report.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
unset DPT_REPORT
py=/usr/bin/python3

# rank 0 holds 64 MiB for 0.4 s and exits 0; rank 1 exits 5 at once
cat >"$tmp/prog.py" <<'EOF'
import os, sys, time
rank = int(os.environ["RANK"])
if rank == 0:
    block = bytearray(64 << 20)
    for i in range(0, len(block), 4096):
        block[i] = 1
    time.sleep(0.4)
    sys.exit(0)
sys.exit(5)
EOF
mkdir "$tmp/a"
(cd "$tmp/a" && "$launch" -n 2 --oversubscribe -- "$py" "$tmp/prog.py") >"$tmp/log" 2>&1
rc=$?
f=$(cd "$tmp/a" && ls dpt-report-python3-*.json 2>/dev/null)
echo "exit 1 of 2: dpt-launch exit $rc, left: $(ls -A "$tmp/a" | tr '\n' ' ')"
[ $rc = 5 ] || fail "dpt-launch exit $rc, not rank 1's 5: $(cat "$tmp/log")"
grep -q "^dpt-launch: report dpt-report-python3-[0-9]*.json$" "$tmp/log" || fail "no 'report' line: $(cat "$tmp/log")"
if [ -z "$f" ]; then
  fail "no dpt-report-python3-<pid>.json in the working directory"
else
  "$report" --check "$tmp/a/$f" >/dev/null || fail "$f does not validate"
  "$py" - "$tmp/a/$f" "$py" "$(hostname)" <<'EOF' || fail "$f: $(cat "$tmp/a/$f" | head -c 3000)"
import json, sys
doc = json.load(open(sys.argv[1]))
bad = []
def want(c, what):
    if not c:
        bad.append(what)
want(doc["program"] == "python3", "program %r" % doc["program"])
want(doc["job"]["command"][0] == sys.argv[2], "command %r" % doc["job"]["command"])
want(doc["job"]["launcher"] == "dpt-launch", "launcher %r" % doc["job"]["launcher"])
want(doc["job"]["exit_status"] == 5 and doc["job"]["ranks"] == 2 and not doc["job"]["partial"], "job %r" % doc["job"])
want(doc["plan"] and doc["plan"]["n_ranks"] == 2, "no plan")
r0, r1 = doc["ranks"]
want(sys.argv[1].endswith("-%d.json" % r0["pid"]), "name does not carry rank 0's pid %d" % r0["pid"])
for r in (r0, r1):
    e = r["end"]
    want(r["host"] == sys.argv[3] and e["by"] == "dpt-launch" and e["started"], "rank %d end %r" % (r["rank"], e))
    want(r["env"]["RANK"] == str(r["rank"]) and r["env"]["WORLD_SIZE"] == "2", "rank %d env %r" % (r["rank"], r["env"]))
    want(r["env"]["MASTER_ADDR"] == "127.0.0.1" and "MASTER_PORT" in r["env"], "rank %d rendezvous %r" % (r["rank"], r["env"]))
want(r0["end"]["status"] == 0 and r0["end"]["signal"] is None, "rank 0 status %r" % r0["end"])
want(r0["end"]["wall_s"] >= 0.4, "rank 0 wall %r < 0.4 s slept" % r0["end"]["wall_s"])
want(r0["peak_rss_bytes"] >= 64 << 20, "rank 0 peak RSS %d < the 64 MiB it touched" % r0["peak_rss_bytes"])
want(r1["end"]["status"] == 5 and r1["end"]["how"] == "exited with status 5", "rank 1 %r" % r1["end"])
want(r1["peak_rss_bytes"] < r0["peak_rss_bytes"], "rank 1 RSS not below rank 0's")
msgs = [x["message"] for x in doc["errors"]]
want(len(msgs) == 1 and msgs[0].startswith("rank 1 on %s (pid %d) exited with status 5" % (sys.argv[3], r1["pid"])),
     "errors %r" % msgs)
if bad:
    print("\n".join(bad), file=sys.stderr)
    sys.exit(1)
EOF
  "$report" "$tmp/a/$f" >"$tmp/sum" || fail "dpt-report $f failed"
  grep -q "^  ended     rank 1 on .*: exited with status 5 after .*, peak RSS .* (dpt-launch)$" "$tmp/sum" &&
    grep -q "^  env       rank 0 was handed RANK=0 LOCAL_RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=" "$tmp/sum" ||
    fail "dpt-report does not show the ranks' ends and env: $(cat "$tmp/sum")"
fi

# a rank killed by a signal: 128+9, the signal in the report; --report PATH with %p
mkdir "$tmp/b"
(cd "$tmp/b" && "$launch" -n 2 --oversubscribe --report "$tmp/b/run-%p.json" -- sh -c \
  '[ "$RANK" = 1 ] && kill -9 $$; sleep 0.2') >"$tmp/log" 2>&1
rc=$?
f=$(cd "$tmp/b" && ls run-*.json 2>/dev/null)
echo "killed rank: dpt-launch exit $rc, left: $(ls -A "$tmp/b" | tr '\n' ' ')"
[ $rc = 137 ] || fail "killed rank: dpt-launch exit $rc, not 137"
grep -q "^dpt-launch: rank 1 on .* killed by signal 9" "$tmp/log" || fail "killed rank: not named: $(cat "$tmp/log")"
[ -n "$f" ] && "$py" - "$tmp/b/$f" <<'EOF' || fail "killed rank: report $f: $(head -c 2000 "$tmp/b/$f" 2>/dev/null)"
import json, sys
doc = json.load(open(sys.argv[1]))
r0, r1 = doc["ranks"]
assert sys.argv[1].endswith("run-%d.json" % r0["pid"]), "%p is not rank 0's pid"
assert doc["program"] == "sh" and doc["job"]["exit_status"] == 137, doc["job"]
assert r1["end"]["signal"] == 9 and r1["end"]["signal_name"] == "SIGKILL" and r1["end"]["status"] is None, r1["end"]
assert "killed by signal 9" in doc["errors"][0]["message"], doc["errors"]
EOF

# a stopped rank and dpt-launch's SIGTERM (scancel, Ctrl-C): the supervisor continues the
# program after forwarding it (SIGCONT, as Slurm and a shell's kill do), so it ends on the
# SIGTERM instead of staying stopped and the job with it
mkdir "$tmp/s"
(cd "$tmp/s" && exec "$launch" -n 1 --report "$tmp/s/r.json" -- sh -c \
  'echo $$ >"$0/pid"; kill -STOP $$; exec sleep 60' "$tmp/s") >"$tmp/log" 2>&1 &
lp=$!
for _ in $(seq 300); do
  p=$(cat "$tmp/s/pid" 2>/dev/null) && [ -n "$p" ] && grep -q '^State:.*T' "/proc/$p/status" 2>/dev/null && break
  sleep 0.1
done
kill -TERM $lp
for _ in $(seq 300); do kill -0 $lp 2>/dev/null || break; sleep 0.1; done
if kill -0 $lp 2>/dev/null; then
  fail "stopped rank: dpt-launch still running 30 s after SIGTERM: $(cat "$tmp/log")"
  kill -KILL $lp; [ -n "${p:-}" ] && kill -KILL "$p"
fi
wait $lp
rc=$?
echo "stopped rank, SIGTERM to dpt-launch: exit $rc"
[ $rc = 143 ] || fail "stopped rank, SIGTERM: dpt-launch exit $rc, not 143: $(cat "$tmp/log")"
"$py" -c 'import json, sys
e = json.load(open(sys.argv[1]))["ranks"][0]["end"]
assert (e["signal"], e["forwarded"]) == (15, True), e' "$tmp/s/r.json" ||
  fail "stopped rank, SIGTERM: not ended by the forwarded SIGTERM: $(head -c 3000 "$tmp/s/r.json")"

# a supervisor killed before its program ends (mpirun's teardown SIGKILLs them): its part
# was written ahead, so the report still has the rank, with no end recorded
mkdir "$tmp/w"
(cd "$tmp/w" && "$launch" -n 2 --oversubscribe --report "$tmp/w/r.json" -- sh -c \
  'if [ "$RANK" = 1 ]; then
     for i in $(seq 200); do [ -s "$DPT_LAUNCH_STATUS_DIR/rank.1.json" ] && break; sleep 0.1; done
     kill -KILL $PPID
   fi; sleep 2') >"$tmp/log" 2>&1
rc=$?
echo "supervisor of rank 1 killed: dpt-launch exit $rc"
[ $rc != 0 ] || fail "supervisor killed: dpt-launch exit 0"
"$report" --check "$tmp/w/r.json" >/dev/null || fail "supervisor killed: the report does not validate"
"$py" - "$tmp/w/r.json" <<'EOF' || fail "supervisor killed: $(head -c 3000 "$tmp/w/r.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
r1 = [r for r in doc["ranks"] if r["rank"] == 1][0]
e = r1["end"]
assert not doc["job"]["partial"] and doc["job"]["ranks_reporting"] == 2, doc["job"]
assert e["started"] and e["status"] is None and e["signal"] is None and e["wall_s"] == 0, e
assert e["how"].startswith("no end recorded: its supervisor was killed before the program ended (mpirun"), e
assert r1["pid"] > 0 and r1["env"]["RANK"] == "1", r1
assert any(x["message"].startswith("rank 1 on ") and "no end recorded" in x["message"] for x in doc["errors"]), \
    doc["errors"]
EOF

# a file system whose fsync takes longer than mpirun's teardown grace (a busy disk, NFS): rank 0's
# supervisor still records its end. Rank 0 exits 3 at once; its supervisor is the slow one
# (slow_fsync.c: 1.5 s per fsync, only there), so rank 1's supervisor may end first and mpirun's
# teardown (SIGTERM, SIGKILL a second later) meets it while it writes. Rank 1 exits 2 after 0.5 s,
# or ends on the SIGTERM forwarded by that teardown: either way recorded, never "no end recorded".
mkdir "$tmp/f"
(cd "$tmp/f" && LD_PRELOAD="$slow_fsync" DPT_TEST_SLOW_FSYNC_RANK=0 DPT_TEST_SLOW_FSYNC_MS=1500 \
  ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
  "$launch" -n 2 --oversubscribe --report "$tmp/f/r.json" -- sh -c \
  'if [ "$RANK" = 0 ]; then exit 3; fi; sleep 0.5; exit 2') >"$tmp/log" 2>&1
rc=$?
echo "slow fsync in rank 0's supervisor: dpt-launch exit $rc"
[ $rc = 3 ] || fail "slow fsync: dpt-launch exit $rc, not rank 0's 3: $(cat "$tmp/log")"
"$report" --check "$tmp/f/r.json" >/dev/null || fail "slow fsync: the report does not validate"
"$py" - "$tmp/f/r.json" <<'EOF' || fail "slow fsync: a rank's end was lost: $(head -c 3000 "$tmp/f/r.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
assert not doc["job"]["partial"] and doc["job"]["ranks_reporting"] == 2, doc["job"]
e0, e1 = (r["end"] for r in sorted(doc["ranks"], key=lambda r: r["rank"]))
assert (e0["status"], e0["signal"], e0["forwarded"], e0["how"]) == (3, None, False, "exited with status 3"), e0
assert (e1["status"], e1["signal"]) in ((2, None), (None, 15)), e1
EOF

# --hostfile without node topology (--gpus-per-node 4 on this 2-core machine: the plan has no
# CPUs for the ranks): each rank placed on its plan host unbound, not in a rankfile slot past
# the cores (mpirun refused that); MPI rank == RANK; the report has all 4
mkdir "$tmp/h"
echo "localhost slots=8" >"$tmp/hosts"
(cd "$tmp/h" && "$launch" --hostfile "$tmp/hosts" -N 1 --gpus-per-node 4 -- sh -c \
  '[ "$OMPI_COMM_WORLD_RANK" = "$RANK" ] && [ "$CUDA_VISIBLE_DEVICES" = "$RANK" ]') >"$tmp/log" 2>&1
rc=$?
f=$(cd "$tmp/h" && ls dpt-report-sh-*.json 2>/dev/null)
echo "--hostfile, 4 ranks per host on $(nproc) cores without a node topology: exit $rc, report $f"
[ $rc = 0 ] || fail "--hostfile --gpus-per-node 4: exit $rc: $(cat "$tmp/log")"
[ -n "$f" ] && "$py" -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert [(r["rank"], r["end"]["status"], r["env"]["CUDA_VISIBLE_DEVICES"]) for r in d["ranks"]] == \
  [(r, 0, str(r)) for r in range(4)], d["ranks"]' "$tmp/h/$f" || fail "--hostfile --gpus-per-node 4: report $f"

# a variable the user set and dpt kept (MASTER_PORT) is named in the report
mkdir "$tmp/k"
port=$("$py" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
(cd "$tmp/k" && MASTER_PORT=$port "$launch" -n 1 -- true) >"$tmp/log" 2>&1 || fail "MASTER_PORT kept: exit $?"
f=$(cd "$tmp/k" && ls dpt-report-true-*.json 2>/dev/null)
[ -n "$f" ] && "$report" "$tmp/k/$f" | grep -q "^  env       rank 0 kept the user's: MASTER_PORT=$port" ||
  fail "the user's MASTER_PORT is not named in the report: $("$report" "$tmp/k/$f" 2>&1 | grep env)"

# --no-report: nothing left; a program that is not there: refused before the launch (exit 2)
mkdir "$tmp/c"
(cd "$tmp/c" && "$launch" -n 1 --no-report -- true) >"$tmp/log" 2>&1 || fail "--no-report: exit $?: $(cat "$tmp/log")"
[ -z "$(ls -A "$tmp/c")" ] || fail "--no-report left $(ls -A "$tmp/c")"
(cd "$tmp/c" && "$launch" -n 1 -- "$tmp/no-such-program") >"$tmp/log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "program \"$tmp/no-such-program\" not found or not executable" "$tmp/log" ||
  fail "missing program: exit $rc: $(cat "$tmp/log")"
[ -z "$(ls -A "$tmp/c")" ] || fail "missing program left $(ls -A "$tmp/c")"

mkdir -p "$out" && cp "$tmp"/a/dpt-report-python3-*.json "$out/job-report-python.json" 2>/dev/null &&
  cp "$tmp"/b/run-*.json "$out/job-report-killed.json" 2>/dev/null &&
  cp "$tmp"/w/r.json "$out/job-report-unrecorded.json" 2>/dev/null
[ $fails = 0 ] && echo "ok: dpt-launch's job report of a Python and a shell program: ends, signals, RSS, env"
[ $fails = 0 ]
