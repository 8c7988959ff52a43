#!/usr/bin/env bash
# Faults on a real Slurm 22.05 cluster (cluster.sh: 4 nodes x 8 fake GPUs; leaf1 = n1,n3
# leaf2 = n2,n4): issue 10.
#
#   fault_cluster_test.sh MODE DPT_TRAIN TEST_HANG PLUGIN NODE_XML
#   MODE: kill   test_hang (all-reduces forever, ring) on 4 nodes x 1 task, srun --mpi=pmix
#                --kill-on-bad-exit=0, so that Slurm leaves the survivors alone:
#                - SIGKILL rank 1 mid-collective: every other rank exits 1 by its dpt
#                  watchdog (DPT_WATCHDOG_SECONDS=3) between 1.5 and 7 s after the kill,
#                  its stderr names rank 1 (its pid, "process gone"); srun exits non-zero
#                - SIGSTOP rank 1: the same ("process stopped"); Slurm does not end the
#                  step (the stopped task holds it); after SIGCONT rank 1 ends too (its
#                  peers are gone) and srun exits non-zero
#                - SIGKILL rank 1 with --kill-on-bad-exit=1: Slurm ends the step first
#         usr1   dpt-train, 2 nodes: srun --time=1 --signal=USR1@27 (Slurm's end-of-time
#                warning; slurmctld looks every 30 s, so it lands 3-33 s into the job): every
#                task finishes its step, writes the checkpoint and exits 3 (so does srun);
#                a second srun with the same --checkpoint-dir and --resume auto says it
#                resumed from that checkpoint and step and finishes (exit 0)
#         term   dpt-train, 2 nodes: plain `scancel JOB` (SIGTERM, then SIGKILL after
#                KillWait=2 s) -> checkpoint, exit 3 within KillWait; then an `sbatch
#                --requeue` job (--resume auto) resumes from it, is preempted by `scancel
#                --signal=TERM`, sees srun exit 3, requeues itself, and its second run
#                resumes from the new checkpoint and finishes
#         dpt    the SPANK plugin (plugstack.conf): srun --dpt dpt-train, SIGKILL of task 1
#                (sharing node n1 with task 0; and alone on its node, where the survivors'
#                watchdogs name it): srun exits non-zero in time, slurmctld and every slurmd
#                still run, and the next srun --dpt job trains to the end (exit 0)
# Every mode ends with: the daemons alive and a next job that succeeds.
# Every daemon and every job is stopped on exit (trap), whatever happens.  Exit 77 = skipped.
set -uo pipefail

mode=${1:?mode} train=${2:?dpt-train} hang=${3:?test_hang} plugin=${4:?plugin} xml=${5:?node xml}
here=$(cd "$(dirname "$0")" && pwd)

for c in munged slurmctld slurmd srun sbatch scancel scontrol squeue bc; do
  command -v "$c" >/dev/null || { echo "SKIP: $c not installed"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (slurmd, mknod)"; exit 77; }

. "$here/testlib.sh"
testlib_dir "fault-$mode"
bg_pids=()     # background sruns of this script
cleanup() {
  local p f
  # jobs first: a stopped task (SIGSTOP) would otherwise outlive its slurmd
  if [[ -n "${SLURM_CONF:-}" ]]; then
    scancel --full $(squeue -h -o %i 2>/dev/null) >/dev/null 2>&1 || true
  fi
  for f in "$dir"/*/pid.*; do
    [[ -e "$f" ]] || continue
    p=$(cat "$f" 2>/dev/null) || continue
    [[ "$p" =~ ^[0-9]+$ ]] && kill -0 "$p" 2>/dev/null && { kill -CONT "$p"; kill -KILL "$p"; } 2>/dev/null
  done
  for p in "${bg_pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  if [[ -n "${SLURM_CONF:-}" ]]; then
    for _ in $(seq 50); do [[ -z "$(squeue -h -o %i 2>/dev/null)" ]] && break; sleep 0.1; done
  fi
  testlib_teardown
}
trap cleanup EXIT
trap 'exit 130' INT TERM

now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }                     # seconds since T (float)
between() { [[ $(echo "$1 >= $2 && $1 <= $3" | bc) == 1 ]]; } # X in [LO, HI]

# own ports per run (not the other cluster tests' ranges): other helpers' clusters may be up
ctl_port=$((22000 + ($$ % 180) * 50))
if [[ "$mode" == dpt ]]; then echo "required $plugin" >"$dir/plugstack.conf"; fi
DPT_SLURM_CTL_PORT=$ctl_port DPT_SLURM_BASE_PORT=$((ctl_port + 10)) \
  bash "$here/cluster.sh" start "$dir" 4 8 || { failed=1; exit 1; }
eval "$(bash "$here/cluster.sh" env "$dir")"
host=$(hostname -s)

# task_status SRUN_STDERR: "TASK STATUS" per task srun reported ("Killed", "Exited with exit
# code 1"); srun names tasks as "task 1" or "tasks 0-1,3"
task_status() {
  awk '/^srun: error: [^:]+: tasks? [0-9,-]+: / {
         sub(/^srun: error: [^:]+: tasks? /, ""); list = $0; sub(/:.*/, "", list)
         st = $0; sub(/^[^:]*: /, "", st)
         n = split(list, parts, ","); for (i = 1; i <= n; i++) {
           if (split(parts[i], ab, "-") == 2) { for (t = ab[1]; t <= ab[2]; t++) print t, st }
           else print parts[i], st } }' "$1"
}
status_of() { task_status "$1" | awk -v t="$2" '$1 == t { $1 = ""; sub(/^ /, ""); print; exit }'; }

# tasks_ended D N: each of the step's N tasks ended non-zero -- srun's stderr lists it (srun
# prints a line only for a task that ended non-zero), or srun gave up waiting for the step
# ("Timed out waiting for job step to complete": it waits KillWait + 2 s after the abort, and
# a loaded machine's other slurmstepd can report later) and the task's process (D/pid.T) is
# gone within KillWait (2 s, cluster.sh) + 3 s, so no task outlives the step
tasks_ended() {
  local d=$1 n=$2 t pid i st
  for ((t = 0; t < n; t++)); do
    [[ -n $(status_of "$d/srun.err" "$t") ]] && continue
    grep -q 'Timed out waiting for job step to complete' "$d/srun.err" ||
      { echo "task $t: srun reports no end and did not time out waiting for the step"; return 1; }
    pid=$(cat "$d/pid.$t" 2>/dev/null) || { echo "task $t: no pid file"; return 1; }
    for ((i = 0; i < 100; i++)); do
      st=$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) || break
      [[ $st == Z ]] && break
      sleep 0.05
    done
    ((i < 100)) || { echo "task $t (pid $pid): still running 5 s after srun gave up on the step"; return 1; }
    echo "task $t: not reported by srun (it timed out waiting for the step), its process (pid $pid) is gone"
  done
}

# wait_files DIR PREFIX N [TRIES]: until DIR holds N files PREFIX.* (0.05 s per try)
wait_files() {
  local i
  for ((i = 0; i < ${4:-600}; i++)); do
    [[ $(ls "$1" 2>/dev/null | grep -c "^$2\.") -ge $3 ]] && return 0
    sleep 0.05
  done
  return 1
}
# wait_gone T0 OUTVAR PID...: poll until every PID is gone (20 s at most); OUTVAR gets
# "pid=seconds-after-T0 ..." and the latest exit in ${OUTVAR}_max
wait_gone() {
  local t0=$1 var=$2 p left i; shift 2
  local -A at=()
  for ((i = 0; i < 400; i++)); do
    left=0
    for p in "$@"; do
      [[ -n "${at[$p]:-}" ]] && continue
      if kill -0 "$p" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$p/stat" 2>/dev/null) != Z ]]; then
        left=1
      else
        at[$p]=$(since "$t0")
      fi
    done
    ((left)) || break
    sleep 0.05
  done
  local s="" max=0
  for p in "$@"; do
    s+="$p=${at[$p]:-never} "
    [[ -z "${at[$p]:-}" ]] && max=999 || max=$(echo "if (${at[$p]} > $max) ${at[$p]} else $max" | bc)
  done
  printf -v "$var" '%s' "$s"
  printf -v "${var}_max" '%s' "$max"
}

# wait_srun PID LIMIT: wait for the background srun PID, at most LIMIT seconds after which
# it is stopped (a hang must fail the test, not time it out); sets $rc (124: it hung)
wait_srun() {
  local i
  for ((i = 0; i < $2 * 20; i++)); do kill -0 "$1" 2>/dev/null || break; sleep 0.05; done
  if kill -0 "$1" 2>/dev/null; then
    echo "srun still running after $2 s: stopping it"
    kill -TERM "$1"; sleep 1; kill -TERM "$1" 2>/dev/null
    wait "$1"; rc=124
  else
    wait "$1"; rc=$?
  fi
}

next_job_ok() { # LABEL
  check "$1: slurmctld and every slurmd still run" daemons_alive
  timeout 60 srun -N4 --ntasks-per-node=1 true
  check "$1: the next job (srun -N4 true) succeeds" [ $? -eq 0 ]
}

# survivors_gone NAME: ranks 0, 2, 3 are gone in time: not at once (Slurm's or MPI's
# doing), by the watchdog's deadline
survivors_gone() {
  local r p=()
  for r in 0 2 3; do p+=("$(cat "$d/pid.$r")"); done
  wait_gone "$t_sig" gone "${p[@]}"
  echo "$1: survivors gone at (s after the signal): $gone"
  check "$1: the last survivor exits between $(echo "$wd / 2" | bc -l | cut -c1-3) and $((wd + 4)) s after the signal (watchdog ${wd} s; ${gone_max} s)" \
    between "$gone_max" "$(echo "$wd / 2" | bc -l)" $((wd + 4))
}
# survivor_messages NAME STATE RANKS...: once srun is over, each of RANKS exited 1 and its
# stderr has its watchdog's message naming rank 1 (pid, STATE).  No survivor may die of
# SIGPIPE (writing to the dead peer's socket): dpt_comm_mpi_init ignores SIGPIPE so that
# the watchdog, not the signal, ends it.
survivor_messages() {
  local name=$1 state=$2 r st named=0; shift 2
  for r in "$@"; do
    st=$(status_of "$d/srun.err" "$r")
    grep -h "dpt watchdog" "$d/err.$r" | cut -c1-300
    check "$name: rank $r exits 1 and its watchdog names rank 1 (pid $victim, $state) [$st]" \
      eval '[ "$st" = "Exited with exit code 1" ] &&
            grep -q "^dpt watchdog: rank $r (.*suspected rank 1 on $host (pid $victim, $state)" "$d/err.$r"'
    named=$((named + 1))
  done
  check "$name: at least one survivor's watchdog names rank 1 ($named)" [ $named -ge 1 ]
}

tiny=(--dataset synthetic --synthetic-images 256 --image-size 32 --width 0.0625 --batch-size 8
      --no-val --seed 3 --log-every 1 --prefetch 1 --threads 1)

case "$mode" in
kill)
  wd=3
  export DPT_WATCHDOG_SECONDS=$wd
  # run_hang NAME SIG KILL_ON_BAD_EXIT: test_hang on n1..n4, SIG to rank 1 once all ranks
  # all-reduce; sets $d (its files), $victim, $t_sig, $sp (srun's pid)
  run_hang() {
    d="$dir/$1"
    mkdir -p "$d"
    timeout 60 srun -N4 --ntasks-per-node=1 --mpi=pmix --kill-on-bad-exit="$3" \
      -o "$d/out.%t" -e "$d/err.%t" "$hang" "$d" >"$d/srun.out" 2>"$d/srun.err" &
    sp=$!
    bg_pids+=("$sp")
    if ! wait_files "$d" pid 4; then
      fail "$1: the 4 ranks did not start in 30 s"; cat "$d"/err.* "$d/srun.err"; exit 1
    fi
    victim=$(cat "$d/pid.1")
    sleep 0.3 # well inside the all-reduce loop
    t_sig=$(now)
    kill -"$2" "$victim"
  }
  # 1. SIGKILL, Slurm told not to end the step: the watchdogs must
  run_hang kill9 KILL 0
  survivors_gone "SIGKILL"
  wait_srun "$sp" $((wd + 5))
  el=$(since "$t_sig")
  cat "$d/srun.err"
  check "SIGKILL: srun exits non-zero ($rc) within $((wd + 5)) s (${el} s)" \
    eval '[ $rc -ne 0 ] && [ $rc -ne 124 ] && between "$el" 0 $((wd + 5))'
  check "SIGKILL: srun reports task 1 killed" [ "$(status_of "$d/srun.err" 1)" = "Killed" ]
  survivor_messages "SIGKILL" "process gone" 0 2 3

  # 2. SIGSTOP: nothing dies; the survivors' watchdogs end them, the stopped rank holds
  # the step until it continues (and then ends: its peers are gone)
  run_hang stop STOP 0
  survivors_gone "SIGSTOP"
  check "SIGSTOP: after the survivors, srun still waits (Slurm does not end the step)" kill -0 "$sp"
  check "SIGSTOP: rank 1 is still stopped" [ "$(awk '{print $3}' "/proc/$victim/stat" 2>/dev/null)" = T ]
  t_cont=$(now)
  kill -CONT "$victim"
  wait_srun "$sp" $((wd + 5))
  el=$(since "$t_cont")
  cat "$d/srun.err"
  check "SIGSTOP: after SIGCONT srun exits non-zero ($rc) within $((wd + 5)) s (${el} s)" \
    eval '[ $rc -ne 0 ] && [ $rc -ne 124 ] && between "$el" 0 $((wd + 5))'
  survivor_messages "SIGSTOP" "process stopped" 0 2 3
  grep -h "dpt watchdog" "$d/err.1" | cut -c1-300
  st=$(status_of "$d/srun.err" 1)
  check "SIGSTOP: rank 1, continued, ends too: exit 1 (its watchdog) [$st]" \
    eval '[ "$st" = "Exited with exit code 1" ]'

  # 3. SIGKILL with --kill-on-bad-exit=1: Slurm ends the step, the watchdog need not
  run_hang kobe KILL 1
  wait_srun "$sp" $((wd + 5))
  el=$(since "$t_sig")
  cat "$d/srun.err"
  check "--kill-on-bad-exit=1: srun exits non-zero ($rc) before the watchdog would (${el} s < ${wd} s)" \
    eval '[ $rc -ne 0 ] && [ $rc -ne 124 ] && between "$el" 0 $wd'
  next_job_ok "after the kills"
  ;;

usr1)
  export DPT_WATCHDOG_SECONDS=30
  ck="$dir/usr1/ck"
  mkdir -p "$dir/usr1"
  t0=$(now)
  timeout 60 srun -N2 --ntasks-per-node=1 --mpi=pmix --time=1 --signal=USR1@27 \
    "$train" "${tiny[@]}" --iterations 100000 --checkpoint-dir "$ck" \
    >"$dir/usr1/out" 2>"$dir/usr1/err"
  rc=$?
  el=$(since "$t0")
  grep -v '^epoch' "$dir/usr1/out"; grep '^epoch' "$dir/usr1/out" | tail -n 1; cat "$dir/usr1/err"
  check "srun --signal=USR1@27 --time=1: srun exits 3 ($rc) after ${el} s (< 45 s)" \
    eval '[ $rc -eq 3 ] && between "$el" 0 45'
  check "every task exits 3 (srun: tasks 0 and 1)" \
    eval '[ "$(status_of "$dir/usr1/err" 0)" = "Exited with exit code 3" ] && [ "$(status_of "$dir/usr1/err" 1)" = "Exited with exit code 3" ]'
  line=$(grep '^dpt-train: preempted by SIGUSR1 at step ' "$dir/usr1/out")
  step=$(sed -n 's/^dpt-train: preempted by SIGUSR1 at step \([0-9]*\); checkpoint .*; resume with --resume auto$/\1/p' <<<"$line")
  check "rank 0 says: preempted by SIGUSR1 at step S; checkpoint; resume with --resume auto ('$line')" \
    [ -n "$step" ]
  step=${step:-0}
  ckpt=$(printf '%s/ckpt-%010d.dpt' "$ck" "$step")
  check "the checkpoint of step $step is named and written ($ckpt)" \
    eval 'grep -qF "; checkpoint $ckpt; " <<<"$line" && [ -s "$ckpt" ]'
  check "exactly one preemption message (rank 0's)" [ "$(grep -c 'preempted by' "$dir/usr1/out")" -eq 1 ]
  # the same job again: --resume auto continues from that step, 8 more steps
  timeout 60 srun -N2 --ntasks-per-node=1 --mpi=pmix \
    "$train" "${tiny[@]}" --iterations $((step + 8)) --checkpoint-dir "$ck" --resume auto \
    >"$dir/usr1/out2" 2>"$dir/usr1/err2"
  rc=$?
  grep -v '^epoch' "$dir/usr1/out2"; cat "$dir/usr1/err2"
  check "second srun --resume auto exits 0 ($rc)" [ $rc -eq 0 ]
  check "it says it resumed from $ckpt at step $step" \
    grep -q "^dpt-train: resumed from $ckpt at step $step " "$dir/usr1/out2"
  check "it ran the 8 remaining steps and wrote the final checkpoint" \
    eval 'grep -q "^dpt-train: done: 8 steps" "$dir/usr1/out2" && [ -s "$(printf "%s/ckpt-%010d.dpt" "$ck" $((step + 8)))" ]'
  next_job_ok "after the preemption"
  ;;

term)
  export DPT_WATCHDOG_SECONDS=30
  ck="$dir/term/ck"
  mkdir -p "$dir/term"
  # 1. srun, then plain scancel: SIGTERM to every task, SIGKILL KillWait (2 s) later
  timeout 60 srun -N2 --ntasks-per-node=1 --mpi=pmix -J dpt-term \
    "$train" "${tiny[@]}" --iterations 100000 --checkpoint-dir "$ck" \
    >"$dir/term/out" 2>"$dir/term/err" &
  sp=$!
  bg_pids+=("$sp")
  for _ in $(seq 600); do grep -q '^epoch 1/.* step 1/' "$dir/term/out" 2>/dev/null && break; sleep 0.05; done
  job=$(squeue -h -n dpt-term -o %i)
  t0=$(now)
  scancel "$job"
  wait_srun "$sp" 10
  el=$(since "$t0")
  grep -v '^epoch' "$dir/term/out"; cat "$dir/term/err"
  check "scancel $job: srun exits 3 ($rc) within KillWait (${el} s < 2.5 s: the tasks were not SIGKILLed)" \
    eval '[ $rc -eq 3 ] && between "$el" 0 2.5'
  check "every task exits 3 (srun: tasks 0 and 1)" \
    eval '[ "$(status_of "$dir/term/err" 0)" = "Exited with exit code 3" ] && [ "$(status_of "$dir/term/err" 1)" = "Exited with exit code 3" ]'
  s1=$(sed -n 's/^dpt-train: preempted by SIGTERM at step \([0-9]*\); checkpoint .*; resume with --resume auto$/\1/p' "$dir/term/out")
  check "rank 0 says: preempted by SIGTERM at step S1 (${s1:-none}); checkpoint; resume with --resume auto" [ -n "$s1" ]
  s1=${s1:-0}
  c1=$(printf '%s/ckpt-%010d.dpt' "$ck" "$s1")
  check "its checkpoint $c1 is written" [ -s "$c1" ]
  N=$((s1 + 48))

  # 2. sbatch --requeue: resume (run 0), preempted by scancel --signal=TERM (the steps,
  # not the batch shell), requeue on exit 3, resume again (run 1) to the end
  cat >"$dir/term/job.sbatch" <<EOF
#!/bin/bash
#SBATCH -N2 --ntasks-per-node=1 --requeue --open-mode=append -J dpt-requeue -o $dir/term/job.out
echo "run \${SLURM_RESTART_COUNT:-0} of job \$SLURM_JOB_ID"
srun --mpi=pmix $train ${tiny[*]} --iterations $N --checkpoint-dir $ck --resume auto
rc=\$?
echo "srun exit \$rc"
if [ \$rc -eq 3 ]; then scontrol requeue \$SLURM_JOB_ID; echo "requeue: \$?"; fi
exit \$rc
EOF
  t0=$(now)
  job=$(sbatch --parsable "$dir/term/job.sbatch")
  check "sbatch --requeue accepted ($job)" [ -n "$job" ]
  for _ in $(seq 600); do grep -q '^epoch ' "$dir/term/job.out" 2>/dev/null && break; sleep 0.05; done
  scancel --signal=TERM "$job"
  # requeued: Slurm holds it for about 2 minutes (BeginTime); an admin lets it go at once
  st=""
  for _ in $(seq 300); do
    st=$(squeue -h -j "$job" -o '%T %r' 2>/dev/null)
    [[ "$st" == "PENDING BeginTime" || -z "$st" ]] && break
    sleep 0.1
  done
  check "the job requeued itself (pending, reason BeginTime: '$st')" [ "$st" = "PENDING BeginTime" ]
  scontrol update JobId="$job" StartTime=now
  for _ in $(seq 600); do [[ -z "$(squeue -h -j "$job" 2>/dev/null)" ]] && break; sleep 0.1; done
  el=$(since "$t0")
  grep -v '^epoch' "$dir/term/job.out"
  check "the job is over within 45 s (${el} s)" \
    eval '[ -z "$(squeue -h -j "$job" 2>/dev/null)" ] && between "$el" 0 45'
  out="$dir/term/job.out"
  # (pipefail: `sed | grep -q` fails when grep quits at its match while sed still writes and gets
  # SIGPIPE -- seen once in CI on run 1's long tail; grep reads everything instead)
  check "run 0 resumed from $c1 at step $s1" \
    eval 'sed -n "/^run 0 /,/^run 1 /p" "$out" | grep "^dpt-train: resumed from $c1 at step $s1 " >/dev/null'
  s2=$(sed -n 's/^dpt-train: preempted by SIGTERM at step \([0-9]*\); checkpoint .*; resume with --resume auto$/\1/p' "$out")
  # (the requeue itself is seen as run 1; "requeue: 0" may never be printed: scontrol requeue
  # ends the running batch shell too, sometimes before its echo -- seen once in CI)
  check "run 0: preempted by SIGTERM at step S2 (${s2:-none}), srun exit 3, requeued (run 1 follows)" \
    eval '[ -n "$s2" ] && grep -q "^srun exit 3$" "$out" && grep -q "^run 1 of job $job$" "$out"'
  s2=${s2:-0}
  c2=$(printf '%s/ckpt-%010d.dpt' "$ck" "$s2")
  check "run 1 (SLURM_RESTART_COUNT=1) resumed from $c2 at step $s2" \
    eval 'sed -n "/^run 1 /,\$p" "$out" | grep "^dpt-train: resumed from $c2 at step $s2 " >/dev/null'
  check "run 1 trains the $((N - s2)) steps left to step $N and srun exits 0" \
    eval 'grep -q "^dpt-train: done: $((N - s2)) steps" "$out" && [ "$(grep "^srun exit" "$out" | tail -n 1)" = "srun exit 0" ] && [ -s "$(printf "%s/ckpt-%010d.dpt" "$ck" $N)" ]'
  next_job_ok "after the requeue"
  ;;

dpt)
  wd=3
  export DPT_WATCHDOG_SECONDS=$wd
  # the plugin's default communicator (comm=auto: DPT_COMM=auto, the plan's ring on CPU)
  dopt="--dpt=topology=$xml"
  # run_dpt NAME SRUN-LAYOUT...: dpt-train under srun --dpt, SIGKILL to task 1 once training
  # runs; sets $d, $victim, $t_sig, $rc, $el (srun's exit status and time after the kill)
  run_dpt() {
    d="$dir/$1"; shift
    mkdir -p "$d"
    timeout 60 srun "$dopt" "$@" --mpi=pmix --kill-on-bad-exit=0 -o "$d/out.%t" -e "$d/err.%t" \
      sh -c 'echo $$ >"$0/pid.$SLURM_PROCID"; shift; exec "$@"' "$d" x \
      "$train" "${tiny[@]}" --iterations 100000 >"$d/srun.out" 2>"$d/srun.err" &
    sp=$!
    bg_pids+=("$sp")
    for _ in $(seq 600); do grep -q '^epoch 1/.* step 1/' "$d/out.0" 2>/dev/null && break; sleep 0.05; done
    if ! grep -q '^epoch 1/.* step 1/' "$d/out.0" 2>/dev/null; then
      fail "$1: dpt-train under srun --dpt did not train in 30 s"; cat "$d"/err.* "$d/srun.err"; exit 1
    fi
    victim=$(cat "$d/pid.1")
    sleep 0.3
    t_sig=$(now)
    kill -KILL "$victim"
    wait_srun "$sp" $((wd + 5))
    el=$(since "$t_sig")
    cat "$d/srun.err"; cat "$d"/err.* | cut -c1-300
  }
  # task 1 shares n1 with task 0 (Slurm's PMIx server in slurmstepd may end the step itself)
  run_dpt shared -N2 --ntasks-per-node=2 --gpus-per-node=8
  check "srun --dpt, task 1 of 4 killed (node shared): srun exits non-zero ($rc) within $((wd + 5)) s (${el} s)" \
    eval '[ $rc -ne 0 ] && [ $rc -ne 124 ] && between "$el" 0 $((wd + 5))'
  check "srun reports task 1 killed" [ "$(status_of "$d/srun.err" 1)" = "Killed" ]
  check "every task of the step ended non-zero (srun reports each, or its process is gone)" tasks_ended "$d" 4
  next_job_ok "after the kill (shared node)"
  # task 1 alone on n2: nothing but the dpt watchdog ends the survivors
  run_dpt alone -N4 --ntasks-per-node=1 --gpus-per-node=1
  check "srun --dpt, task 1 of 4 killed (own node): srun exits non-zero ($rc) within $((wd + 5)) s (${el} s)" \
    eval '[ $rc -ne 0 ] && [ $rc -ne 124 ] && between "$el" 0 $((wd + 5))'
  survivor_messages "srun --dpt, own node" "process gone" 0 2 3
  next_job_ok "after the kill (own node)"
  # and the next --dpt job trains to the end
  timeout 60 srun "$dopt" -N2 --ntasks-per-node=2 --gpus-per-node=8 --mpi=pmix \
    "$train" "${tiny[@]}" --iterations 6 >"$dir/next.out" 2>"$dir/next.err"
  rc=$?
  grep -v '^epoch' "$dir/next.out"; cat "$dir/next.err"
  check "the next srun --dpt dpt-train job (4 ranks, 6 steps) exits 0 ($rc)" \
    eval '[ $rc -eq 0 ] && grep -q "^dpt-train: done: 6 steps" "$dir/next.out" && grep -q "4 rank(s)" "$dir/next.out"'
  ;;
*)
  echo "unknown mode $mode"; exit 2 ;;
esac

exit $failed
