#!/usr/bin/env bash
# spank_dpt.so on a real Slurm 22.05 cluster (cluster.sh: 4 nodes x 8 fake GPUs,
# leaf1 = n1,n3  leaf2 = n2,n4 so Slurm's name order is not the ring order).
#
#   spank_cluster_test.sh MODE PLUGIN DPT_TOPO NODE_XML
#   MODE: help   srun --help lists --dpt
#         inert  without --dpt: no DPT_* variables, same env names, GPUs and CPUs as
#                without the plugin at all; plain sbatch works
#         plan   srun --dpt -N4 --ntasks-per-node=8 --gpus-per-node=8 --mpi=pmix: every
#                task's ring rank, GPU, cpuset, HCAs, threads, digest == dpt-topo plan;
#                plugstack.conf defaults and --dpt overrides reach the tasks; a step on a
#                subset of the allocation gets that subset's plan
#         batch  #SBATCH --dpt: the inner srun steps get the same as srun --dpt; the
#                batch step itself is skipped
#         survey etc/mn1/sbatch/topo-survey.sbatch on the 4 nodes: same plan digest from
#                topology.conf and from SLURM_TOPOLOGY_ADDR, no node unlike the others
#         bad    --dpt=bogus, comm=<10,000 chars>, non-ASCII, a corrupted topology XML,
#                the env form with a bad value, a bad plugstack.conf argument: the step
#                fails fast with a dpt: message, the daemons survive, the next job works
# Every daemon is stopped on exit (trap), whatever happens.  Exit 77 = skipped.
set -uo pipefail

mode=${1:?mode} plugin=${2:?plugin} topo=${3:?dpt-topo} xml=${4:?node xml}
here=$(cd "$(dirname "$0")" && pwd)

for c in munged slurmctld slurmd srun sbatch python3; do
  command -v "$c" >/dev/null || { echo "SKIP: $c not installed"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (slurmd, mknod)"; exit 77; }

. "$here/testlib.sh"
testlib_dir "spank-$mode"
trap testlib_teardown EXIT
trap 'exit 130' INT TERM

# own ports per run: other helpers' clusters (cluster.sh defaults) may be up
ctl_port=$((20000 + ($$ % 200) * 50))
echo "required $plugin comm=auto" >"$dir/plugstack.conf"
DPT_SLURM_CTL_PORT=$ctl_port DPT_SLURM_BASE_PORT=$((ctl_port + 10)) \
  bash "$here/cluster.sh" start "$dir" 4 8 || { failed=1; exit 1; }
eval "$(bash "$here/cluster.sh" env "$dir")"
probe="$here/spank_probe.sh"
common=(-N4 --ntasks-per-node=8 --gpus-per-node=8 --mpi=pmix)

plan_json() { # NODES OUT [extra dpt-topo args]
  local nodes=$1 out=$2; shift 2
  "$topo" plan --topology-conf "$dir/topology.conf" --nodes "$nodes" --node-xml "$xml" --json "$@" >"$out"
}

case "$mode" in
help)
  out=$(srun --help 2>&1)
  check "srun --help lists --dpt" grep -q -- '--dpt=\[k=v,...\]' <<<"$out"
  check "the usage names the keys" grep -q 'ranks-per-gpu' <<<"$out"
  out=$(sbatch --help 2>&1)
  check "sbatch --help lists --dpt" grep -q -- '--dpt' <<<"$out"
  ;;

inert)
  srun "${common[@]}" "$probe" >"$dir/with.txt" 2>"$dir/with.err"
  check "plain srun with the plugin loaded succeeds" [ $? -eq 0 ]
  envnames='env | cut -d= -f1 | grep -v -E "^(SLURM_(JOB_ID|JOBID|STEP_LAUNCHER_PORT|SRUN_COMM_PORT|STEP_ID|STEPID|LAUNCH_NODE_IPADDR)|PMIX_.*|OMPI_.*)$" | sort'
  srun "${common[@]}" -o "$dir/env-with-%t.txt" sh -c "$envnames"
  : >"$dir/plugstack.conf" # the same without the plugin at all
  srun "${common[@]}" "$probe" >"$dir/without.txt" 2>"$dir/without.err" # srun's own notes ("queued and waiting") stay out of the comparison
  srun "${common[@]}" -o "$dir/env-without-%t.txt" sh -c "$envnames"
  echo "required $plugin" >"$dir/plugstack.conf"
  check "32 tasks reported" [ "$(grep -c '^procid=' "$dir/with.txt")" -eq 32 ]
  check "no DPT_* variables without --dpt" [ "$(grep -c 'dpt_vars=0 ' "$dir/with.txt")" -eq 32 ]
  check "no NCCL_IB_HCA, RANK, OMP_NUM_THREADS without --dpt" \
    [ "$(grep -c 'hca=unset omp=unset digest=unset RANK=unset' "$dir/with.txt")" -eq 32 ]
  # the same GPUs, CPUs and variable names as without the plugin
  norm() { sed -E 's/ step=[^ ]+//' "$1" | sort; }
  check "same GPUs and CPU binding as without the plugin" diff <(norm "$dir/with.txt") <(norm "$dir/without.txt")
  same=1
  for t in $(seq 0 31); do
    diff "$dir/env-with-$t.txt" "$dir/env-without-$t.txt" >/dev/null || { same=0; diff "$dir/env-with-$t.txt" "$dir/env-without-$t.txt" | head -5; }
  done
  check "same environment variable names in all 32 tasks as without the plugin" [ $same -eq 1 ]
  cat >"$dir/plain.sbatch" <<EOF
#!/bin/sh
#SBATCH -N2 --ntasks-per-node=2 --gpus-per-node=8 -o $dir/plain.out
srun $probe
EOF
  sbatch --wait "$dir/plain.sbatch" >/dev/null 2>&1
  check "plain sbatch job succeeds" [ $? -eq 0 ]
  check "plain sbatch: 4 tasks without DPT_ variables" [ "$(grep -c 'dpt_vars=0 ' "$dir/plain.out")" -eq 4 ]
  ;;

plan)
  srun "${common[@]}" "$probe" >"$dir/plain.txt" 2>&1
  start=$(date +%s%N)
  srun --dpt=topology="$xml",verbose "${common[@]}" "$probe" >"$dir/dpt.txt" 2>"$dir/dpt.err"
  rc=$?
  end=$(date +%s%N)
  check "srun --dpt succeeds" [ $rc -eq 0 ]
  cat "$dir/dpt.err"
  plan_json 'n[1-4]' "$dir/plan.json"
  check "tasks match dpt-topo plan (n[1-4], ring n1 n3 n2 n4)" \
    python3 "$here/spank_check.py" "$dir/plan.json" "$dir/dpt.txt" "$dir/plain.txt" comm=auto fp16=0
  check "verbose summary names the ring and the digest" \
    grep -q "dpt: plan $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$dir/plan.json"): 32 ranks on 4 nodes in 2 groups; ring n1 n3 n2 n4" "$dir/dpt.err"
  echo "srun --dpt took $(((end - start) / 1000000)) ms"
  # site defaults from plugstack.conf; the user's --dpt overrides them key by key
  echo "required $plugin comm=ring fp16 topology=$xml" >"$dir/plugstack.conf"
  srun --dpt=comm=nccl "${common[@]}" "$probe" >"$dir/dpt2.txt" 2>&1
  plan_json 'n[1-4]' "$dir/plan-fp16.json" --fp16
  check "plugstack.conf topology= and fp16 defaults, --dpt=comm=nccl override" \
    python3 "$here/spank_check.py" "$dir/plan-fp16.json" "$dir/dpt2.txt" "$dir/plain.txt" comm=nccl fp16=1
  # a step on part of an allocation: the step's nodes, not the job's
  salloc -N4 --ntasks-per-node=8 --gpus-per-node=8 bash -c \
    "srun -N2 -n16 --ntasks-per-node=8 -w n2,n3 $probe >$dir/sub-plain.txt; srun --dpt -N2 -n16 --ntasks-per-node=8 -w n2,n3 $probe >$dir/sub.txt" \
    >"$dir/salloc.err" 2>&1
  check "salloc + srun --dpt on n[2-3] succeeds" [ $? -eq 0 ]
  plan_json 'n[2-3]' "$dir/plan-sub.json" --fp16
  check "the step on n[2-3] gets the plan of n[2-3] (ring n3 n2)" \
    python3 "$here/spank_check.py" "$dir/plan-sub.json" "$dir/sub.txt" "$dir/sub-plain.txt" comm=ring fp16=1
  # ranks-per-gpu: 16 tasks per node on 8 GPUs
  srun --dpt=ranks-per-gpu=2 -N2 --ntasks-per-node=16 --gpus-per-node=8 "$probe" >"$dir/rpg.txt" 2>&1
  check "ranks-per-gpu=2: 32 tasks with two ranks per GPU" \
    [ "$(grep -o 'cuda_dev=[0-9]*' "$dir/rpg.txt" | sort | uniq -c | awk '$1 != 4' | wc -l)" -eq 0 -a "$(grep -o 'cuda_dev=[0-9]*' "$dir/rpg.txt" | sort -u | wc -l)" -eq 8 -a "$(grep -c '^procid=' "$dir/rpg.txt")" -eq 32 ]
  # ranks-per-gpu asks for oversubscription: srun says what is shared, the tasks get DPT_OVERSUBSCRIBE=1
  check "ranks-per-gpu=2: srun says the ranks share GPUs" \
    grep -q "^dpt: oversubscribed as asked: host 'n[0-9]*': 16 ranks on 8 GPUs: ranks [0-9]* and [0-9]* share GPU [0-9]* (ranks-per-gpu=2)$" "$dir/rpg.txt"
  check "ranks-per-gpu=2: every task has DPT_OVERSUBSCRIBE=1" [ "$(grep -c ' oversub=1$' "$dir/rpg.txt")" -eq 32 ]
  srun --dpt -N2 --ntasks-per-node=16 --gpus-per-node=8 true >"$dir/rpg-bad.txt" 2>&1
  cat "$dir/rpg-bad.txt"
  check "16 tasks on 8 GPUs without ranks-per-gpu fails with the planners' message naming --oversubscribe" \
    grep -q "dpt: host 'n[0-9]*': 16 ranks per node but its topology (.*) has 8 GPUs: ranks would share GPUs; use at most 8 ranks per node, or allow oversubscription (dpt-launch / dpt-topo plan --oversubscribe, srun --dpt=ranks-per-gpu=K, DPT_OVERSUBSCRIBE=1)" "$dir/rpg-bad.txt"
  ;;

batch)
  srun "${common[@]}" "$probe" >"$dir/plain.txt" 2>&1
  srun -N2 --ntasks-per-node=8 --gpus-per-node=8 -w n3,n4 "$probe" >"$dir/plain34.txt" 2>&1
  cat >"$dir/job.sbatch" <<EOF
#!/bin/bash
#SBATCH --dpt=topology=$xml,comm=ring
#SBATCH -N4 --ntasks-per-node=8 --gpus-per-node=8
#SBATCH -o $dir/job.out -e $dir/job.err
echo "batch step: DPT_RANK=\${DPT_RANK-unset} option=\${SLURM_SPANK__SLURM_SPANK_OPTION_dpt_dpt-unset}"
srun --mpi=pmix $probe > $dir/inner1.txt
srun -N2 -n16 --ntasks-per-node=8 -w n3,n4 $probe > $dir/inner2.txt
EOF
  sbatch --wait "$dir/job.sbatch" >/dev/null 2>&1
  check "#SBATCH --dpt job succeeds" [ $? -eq 0 ]
  cat "$dir/job.out" "$dir/job.err"
  check "the batch step itself is skipped (no DPT_RANK) and carries the option" \
    grep -q "batch step: DPT_RANK=unset option=topology=$xml,comm=ring" "$dir/job.out"
  plan_json 'n[1-4]' "$dir/plan.json"
  plan_json 'n[3-4]' "$dir/plan34.json"
  check "inner srun over the allocation == dpt-topo plan" \
    python3 "$here/spank_check.py" "$dir/plan.json" "$dir/inner1.txt" "$dir/plain.txt" comm=ring
  check "inner srun on n[3-4] == dpt-topo plan of n[3-4]" \
    python3 "$here/spank_check.py" "$dir/plan34.json" "$dir/inner2.txt" "$dir/plain34.txt" comm=ring
  ;;

survey)
  export PATH="$(dirname "$topo"):$PATH" HWLOC_XMLFILE="$xml"
  OUT="$dir/survey" sbatch --wait --nodes=4 -o "$dir/survey.out" "$here/../../etc/mn1/sbatch/topo-survey.sbatch" >/dev/null 2>&1
  check "topo-survey.sbatch succeeds" [ $? -eq 0 ]
  cat "$dir/survey.out" | head -5
  plan_json 'n[1-4]' "$dir/plan.json"
  d=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["digest"])' "$dir/plan.json")
  check "the survey's plans (topology.conf and SLURM_TOPOLOGY_ADDR) are dpt-topo's" \
    grep -q "plan digest from topology.conf: $d, from SLURM_TOPOLOGY_ADDR: $d" "$dir/survey.out"
  check "4 node XMLs and views" [ "$(ls "$dir"/survey/nodes/*.json | wc -l)" -eq 4 ]
  check "no node unlike n1" grep -q "nodes unlike n1: 0" "$dir/survey.out"
  ;;

bad)
  cp "$xml" "$dir/corrupt.xml"
  truncate -s 5000 "$dir/corrupt.xml"
  big=$(head -c 10000 /dev/zero | tr '\0' x)
  expect_fail() { # NAME PATTERN srun-args...
    local name=$1 pattern=$2; shift 2
    local t0 t1 rc
    t0=$(date +%s%N)
    timeout 60 "$@" >"$dir/bad.out" 2>&1
    rc=$?
    t1=$(date +%s%N)
    check "$name: fails" [ $rc -ne 0 -a $rc -ne 124 ]
    check "$name: says '$pattern'" grep -q -e "$pattern" "$dir/bad.out"
    check "$name: fails fast ($(((t1 - t0) / 1000000)) ms)" [ $(((t1 - t0) / 1000000)) -lt 10000 ]
    grep -m3 . "$dir/bad.out" | cut -c1-200
    check "$name: slurmctld and every slurmd still run" daemons_alive
    srun -N4 --ntasks-per-node=1 true
    check "$name: the next job succeeds" [ $? -eq 0 ]
  }
  expect_fail "--dpt=bogus" "dpt: --dpt: unknown key 'bogus'" srun --dpt=bogus -N1 true
  expect_fail "--dpt=comm=<10,000 chars>" "dpt: --dpt: the value is longer than the limit of 4095 characters" \
    srun "--dpt=comm=$big" -N1 true
  expect_fail "--dpt non-ASCII" "dpt: --dpt: byte 0xC3 at offset 6" srun $'--dpt=comm=r\xc3\xa9ng' -N1 true
  expect_fail "--dpt control byte" "dpt: --dpt: byte 0x1B" srun $'--dpt=topology=/x\x1b[2J' -N1 true
  expect_fail "corrupted topology XML" "dpt: node topology (--dpt topology=): $dir/corrupt.xml" \
    srun --dpt=topology="$dir/corrupt.xml" "${common[@]}" true
  expect_fail "missing topology XML" "dpt: node topology.*$dir/none.xml" \
    srun --dpt=topology="$dir/none.xml" "${common[@]}" true
  expect_fail "env form with a bad value" "dpt: --dpt: unknown key 'colour'" \
    env SLURM_SPANK__SLURM_SPANK_OPTION_dpt_dpt=colour=blue srun -N1 true
  expect_fail "sbatch --dpt=bogus is refused at submission" "dpt: --dpt: unknown key 'bogus'" \
    sbatch --dpt=bogus --wrap true
  expect_fail "bad tree file" "dpt: switch tree" srun --dpt=tree=/nonexistent/topology.conf,topology="$xml" -N1 true
  # node side: --export=NONE drops DPT_SPANK_PLAN (not a SLURM_* variable): every task
  # refuses to start without its plan, in task_init, with a dpt: message
  expect_fail "srun --export=NONE --dpt (no plan reaches the nodes)" \
    "dpt: --dpt is set for this step but srun computed no plan" \
    srun --export=NONE --dpt=topology="$xml" "${common[@]}" true
  # a bad site default: the plugin (required) refuses to initialise, every job says why
  echo "required $plugin bogus-default=1" >"$dir/plugstack.conf"
  srun -N1 true >"$dir/bad.out" 2>&1
  check "bad plugstack.conf argument: srun fails" [ $? -ne 0 ]
  check "bad plugstack.conf argument: says so" \
    grep -q "dpt: plugstack.conf argument 1: unknown key 'bogus-default'" "$dir/bad.out"
  echo "required $plugin" >"$dir/plugstack.conf"
  check "bad plugstack.conf argument: daemons alive" daemons_alive
  srun --dpt=topology="$xml" "${common[@]}" true
  check "after all that, srun --dpt works" [ $? -eq 0 ]
  check "daemons alive at the end" daemons_alive
  ;;
*)
  echo "unknown mode $mode"; exit 2 ;;
esac

exit $failed
