#!/bin/bash
# failed_run_files.sh — a dpt-train run that fails (here: no dataset where --data-dir points, on
# both ranks) leaves its report and nothing else: the ranks' <report>.rank<N>.err error files are
# in the report's errors and removed.  With --report PATH and with the default name in the
# working directory.  dpt-launch adds how each rank ended to that report (it writes none of its own).
# usage: failed_run_files.sh DPT_LAUNCH DPT_TRAIN DPT_REPORT
set -u
launch=$1 train=$2 report=$3
tmp=$(mktemp -d /tmp/dpt-failed-run.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
unset DPT_REPORT

mkdir "$tmp/a" "$tmp/b"
"$launch" -n 2 -- "$train" --dataset fashion-mnist --data-dir "$tmp/none" --report "$tmp/a/run.json" >"$tmp/log" 2>&1
rc=$?
echo "--report run.json: exit $rc, left: $(ls -A "$tmp/a" | tr '\n' ' ')"
[ $rc = 2 ] || fail "exit $rc, not 2: $(cat "$tmp/log")"
[ "$(ls -A "$tmp/a")" = run.json ] || fail "left $(ls -A "$tmp/a" | tr '\n' ' ') instead of the report alone"
"$report" "$tmp/a/run.json" >"$tmp/sum" || fail "dpt-report run.json failed"
[ "$(grep -c "^  error     rank [01] on .*$tmp/none/train-images-idx3-ubyte: cannot open" "$tmp/sum")" = 2 ] ||
  fail "the report does not name both ranks' error once each: $(grep error "$tmp/sum")"
# dpt-train announced its report: dpt-launch added how each rank ended to it (no report of its own)
python3 - "$tmp/a/run.json" <<'PY' || fail "run.json lacks the ranks' ends from dpt-launch: $(grep -c '"end"' "$tmp/a/run.json")"
import json, sys
doc = json.load(open(sys.argv[1]))
ends = [(r["rank"], r["end"]["status"], r["end"]["by"], r["env"]["RANK"]) for r in doc["ranks"]]
assert doc["program"] == "dpt-train" and ends == [(0, 2, "dpt-launch", "0"), (1, 2, "dpt-launch", "1")], ends
PY

(cd "$tmp/b" && "$launch" -n 2 -- "$train" --dataset fashion-mnist --data-dir "$tmp/none") >"$tmp/log" 2>&1
rc=$?
echo "default name: exit $rc, left: $(ls -A "$tmp/b" | tr '\n' ' ')"
[ $rc = 2 ] || fail "default name: exit $rc, not 2"
ls -A "$tmp/b" | grep -qx 'dpt-report-dpt-train-[0-9]*\.json' && [ "$(ls -A "$tmp/b" | wc -l)" = 1 ] ||
  fail "default name: left $(ls -A "$tmp/b" | tr '\n' ' ') instead of the report alone"

[ $fails = 0 ] && echo "ok: a failed dpt-train leaves its report only"
[ $fails = 0 ]
