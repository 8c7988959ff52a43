#!/usr/bin/env bash
# bench/thintree/interrupt_test.sh BUILD_DIR [OUT.json]
#
# The emulation cleans up every namespace and daemon even when interrupted: starts
# bench/thintree/train.sh (network namespaces + munged + slurmctld + one slurmd per node +
# a running `srun --dpt dpt-train` step), sends SIGINT once the training step is running
# (as Ctrl-C in a terminal does, to the whole process group) and then checks that no
# namespace with the prefix and no process of that run (daemons, srun, slurmstepd,
# dpt-train: anything whose command line or working directory names the run's work
# directory, or that still sits in one of its namespaces) is left.  Also runs
# netns_test.sh (down twice, TERM in the middle of `up`).  Prints one JSON document
# (dpt.bench.cleanup/1) to OUT.json (default stdout); exit 0 when everything was cleaned.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=$(cd "${1:?usage: interrupt_test.sh BUILD_DIR [OUT.json]}" && pwd)
out=${2:-/dev/stdout}
export DPT_TT_PREFIX=dpti$$
log=$(mktemp /tmp/dpt-interrupt.XXXXXX)
ours_ns() { ip netns list 2>/dev/null | awk '{print $1}' | grep -c "^$DPT_TT_PREFIX-" || true; }
t0=$(date +%s)
# its own process group, so that INT reaches train.sh, srun and everything it started, like Ctrl-C
# (a background job of a script starts with SIGINT ignored, and bash cannot trap a signal
# ignored on entry: restore its default first, as a terminal's foreground job has it)
setsid env STEPS=100000 VARIANTS=fast DPT_SLURM_CTL_PORT=28817 DPT_SLURM_BASE_PORT=29000 \
  python3 -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execvp(sys.argv[1], sys.argv[1:])' \
  bash "$here/train.sh" "$build" "$log.out" >"$log" 2>&1 &
pid=$!
running=0
for _ in $(seq 240); do # wait until the training step prints its first lines
  if grep -q "^train.sh: run 1 fast" "$log" && pgrep -f "dpt-train --comm ring" >/dev/null; then running=1; break; fi
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.5
done
work=$(grep -o '/tmp/dpt-thintree-train\.[A-Za-z0-9]*' "$log" | head -1)
[[ -n "$work" ]] || work=$(ls -dt /tmp/dpt-thintree-train.* 2>/dev/null | head -1)
sleep 3
ns_before=$(ours_ns)
procs_before=$(pgrep -f "dpt-thintree-train|dpt-train --comm ring" | wc -l)
t_int=$(date +%s.%N)
kill -INT -- "-$pid" 2>/dev/null
for _ in $(seq 120); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
if kill -0 "$pid" 2>/dev/null; then # not done within 60 s: a failure; stop it the hard way
  kill -TERM -- "-$pid" 2>/dev/null
  sleep 10
  t_done_fail=1
fi
wait "$pid" 2>/dev/null
rc=$?
[[ -z "${t_done_fail:-}" ]] || rc=-1
t_done=$(date +%s.%N)
sleep 1
ns_after=$(ours_ns)
# every process of that run: command line naming its work directory (daemons' config)
# or dpt-train of this test; processes in a namespace of ours
left=""
for p in $(pgrep -f "dpt-thintree-train|dpt-train --comm ring" 2>/dev/null); do
  [[ "$p" == "$$" ]] && continue
  left+="$p:$(tr '\0' ' ' </proc/"$p"/cmdline 2>/dev/null | cut -c1-80); "
done
n_left=$(pgrep -f "dpt-thintree-train|dpt-train --comm ring" 2>/dev/null | wc -l)
# a straggler would make the next run fail: remove what is left (not counted as cleaned)
if ((ns_after)); then bash "$here/netns.sh" down >/dev/null 2>&1; fi
netns_test=$(bash "$here/netns_test.sh" 2>&1)
netns_rc=$?
python3 - "$running" "$ns_before" "$procs_before" "$rc" "$ns_after" "$n_left" "$left" "$netns_rc" "$netns_test" \
  "$t_int" "$t_done" "$(($(date +%s) - t0))" "$(tail -5 "$log")" >"$out" <<'PY'
import json, sys
(running, ns_before, procs_before, rc, ns_after, n_left, left, netns_rc, netns_test, t_int, t_done, elapsed,
 tail) = sys.argv[1:]
ok = running == "1" and int(ns_after) == 0 and int(n_left) == 0 and netns_rc == "0"
print(json.dumps({"schema": "dpt.bench.cleanup/1", "training_step_was_running": running == "1",
                  "namespaces_before_interrupt": int(ns_before), "daemons_and_ranks_before_interrupt": int(procs_before),
                  "train_sh_exit_status": int(rc), "seconds_to_clean_up": round(float(t_done) - float(t_int), 2),
                  "namespaces_left": int(ns_after), "processes_left": int(n_left), "processes_left_list": left,
                  "netns_test_exit": int(netns_rc), "netns_test": netns_test.splitlines(),
                  "train_sh_log_tail": tail.splitlines(), "elapsed_s": int(elapsed), "clean": ok}, indent=1))
PY
rm -f "$log" "$log.out".*
python3 -c 'import json,sys; sys.exit(0 if json.load(open(sys.argv[1]))["clean"] else 1)' "$out" 2>/dev/null || exit 1
