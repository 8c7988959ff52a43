#!/usr/bin/env bash
# dpt_boot under `srun --mpi=pmix` on a real Slurm 22.05 cluster (tests/slurm/cluster.sh:
# 4 nodes x 8 fake GPUs, leaf1 = n1,n3  leaf2 = n2,n4 under core).
#
#   boot_slurm_test.sh TEST_BOOT DPT_TOPO NODE_XML DPT_BENCH [SPANK_PLUGIN]
#
#  1. 32 tasks (-N4 --ntasks-per-node=8): every rank bootstraps over Slurm's PMIx
#     server, builds the tree from SLURM_TOPOLOGY_ADDR, and computes the plan that
#     `dpt-topo plan` computes from topology.conf (same digest, ring n1 n3 n2 n4);
#     blobs travel from the first and last plan rank.
#  2. dpt_boot_init: MPI (Open MPI under srun) and a ring communicator in plan order.
#  3. One task (SLURM_PROCID 2) plans with DPT_FP16=1: the step fails, the message
#     names rank 2 and the others.
#  4. With the SPANK plugin: srun --dpt=topology=XML: the tasks verify the plugin's
#     DPT_PLAN_DIGEST and DPT_RANK against their own plan; dpt-bench names srun --dpt
#     (not dpt-launch, whose variables the plugin sets) on its first line and in its report.
# Every daemon is stopped on exit (trap).  Exit 77 = skipped.
set -uo pipefail
test_boot=${1:?test_boot} topo=${2:?dpt-topo} xml=${3:?node xml} bench=${4:?dpt-bench} plugin=${5:-}
here=$(cd "$(dirname "$0")" && pwd)
cluster="$here/../slurm/cluster.sh"

for c in munged slurmctld slurmd srun; do
  command -v "$c" >/dev/null || { echo "SKIP: $c not installed"; exit 77; }
done
[[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (slurmd, mknod)"; exit 77; }

. "$here/../slurm/testlib.sh"
testlib_dir boot
trap testlib_teardown EXIT
trap 'exit 130' INT TERM

ctl_port=$((21000 + ($$ % 200) * 50))
if [[ -n "$plugin" ]]; then echo "required $plugin" >"$dir/plugstack.conf"; fi
DPT_SLURM_CTL_PORT=$ctl_port DPT_SLURM_BASE_PORT=$((ctl_port + 10)) \
  bash "$cluster" start "$dir" 4 8 || { failed=1; exit 1; }
eval "$(bash "$cluster" env "$dir")"
export DPT_WATCHDOG_SECONDS=60

digest=$("$topo" plan --topology-conf "$dir/topology.conf" --nodes 'n[1-4]' --node-xml "$xml" --json |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["digest"])')
check "dpt-topo plan gives a digest ($digest)" [ -n "$digest" ]

# 1. PMIx bootstrap, 32 ranks
out=$(DPT_PLAN_XML=$xml srun -N4 --ntasks-per-node=8 --mpi=pmix "$test_boot" --expect-transport pmix \
  --nodes 4 --ring n1,n3,n2,n4 --digest "$digest" 2>&1)
rc=$?
echo "$out" | tail -n 5
check "srun --mpi=pmix: 32 ranks agree on dpt-topo's plan" \
  grep -q "test_boot: 32 ranks on 4 nodes via pmix: ok (plan $digest, ring n1,n3,n2,n4)" <<<"$out"
check "srun --mpi=pmix exits 0" [ $rc -eq 0 ]

# 2. dpt_boot_init: MPI world + ring communicator in the plan's order
out=$(DPT_PLAN_XML=$xml srun -N4 --ntasks-per-node=2 --mpi=pmix "$test_boot" --comm ring \
  --ring n1,n3,n2,n4 2>&1)
rc=$?
echo "$out" | tail -n 3
check "dpt_boot_init under srun: ring communicator in plan order" \
  grep -q "test_boot: 8 ranks on 4 nodes via pmix: ok .*comm ring" <<<"$out"
check "dpt_boot_init under srun exits 0" [ $rc -eq 0 ]

# 3. a disagreeing rank is named
out=$(DPT_PLAN_XML=$xml srun -N2 --ntasks-per-node=2 --mpi=pmix sh -c \
  'if [ "$SLURM_PROCID" = 2 ]; then export DPT_FP16=1; fi; exec "$0"' "$test_boot" 2>&1)
rc=$?
echo "$out" | head -n 2
check "disagreeing rank: the step fails" [ $rc -ne 0 ]
check "disagreeing rank: every rank names rank 2 (fp16=1) and ranks 0-1,3" \
  [ "$(grep -c 'rank 2 computed plan [0-9a-f]* (fp16=1.*ranks 0-1,3 computed' <<<"$out")" -eq 4 ]

# 4. the SPANK plugin's plan, verified by every task
if [[ -n "$plugin" ]]; then
  out=$(srun --dpt=topology="$xml" -N4 --ntasks-per-node=8 --gpus-per-node=8 --mpi=pmix \
    "$test_boot" --nodes 4 --ring n1,n3,n2,n4 --digest "$digest" 2>&1)
  rc=$?
  echo "$out" | tail -n 3
  check "srun --dpt: tasks verify the plugin's DPT_PLAN_DIGEST and DPT_RANK" \
    grep -q "test_boot: 32 ranks on 4 nodes via pmix: ok (plan $digest" <<<"$out"
  check "srun --dpt exits 0" [ $rc -eq 0 ]
  # who started the ranks, as dpt-bench says it and writes it in its report
  out=$(srun --dpt=topology="$xml" -N2 --ntasks-per-node=2 --gpus-per-node=8 --mpi=pmix \
    "$bench" allreduce --max-bytes 4K --iters 1 --warmup 0 --no-resnet --report "$dir/bench.json" 2>&1)
  rc=$?
  echo "$out" | head -n 3
  check "srun --dpt dpt-bench: exits 0" [ $rc -eq 0 ]
  check "srun --dpt dpt-bench: its first line says the ranks came from srun --dpt" \
    grep -q "^# dpt-bench allreduce: 4 ranks (.*, via spank)" <<<"$out"
  check "srun --dpt dpt-bench: its report's job.launcher is spank" python3 -c '
import json, sys
job = json.load(open(sys.argv[1]))["job"]
sys.exit(0 if job["launcher"] == "spank" else "job.launcher %r" % job["launcher"])' "$dir/bench.json"
  # a tampered digest is caught by every task
  out=$(srun --dpt=topology="$xml" -N2 --ntasks-per-node=8 --gpus-per-node=8 --mpi=pmix sh -c \
    'export DPT_PLAN_DIGEST=0123456789abcdef; exec "$0"' "$test_boot" 2>&1)
  rc=$?
  check "srun --dpt with a tampered DPT_PLAN_DIGEST fails" [ $rc -ne 0 ]
  check "... and says the launcher's plan differs" \
    grep -q "launcher announced plan 0123456789abcdef (DPT_PLAN_DIGEST) to ranks 0-15" <<<"$out"
fi
exit $failed
