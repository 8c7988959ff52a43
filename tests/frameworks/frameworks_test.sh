#!/usr/bin/env bash
# Other frameworks' programs get the planned ring (issue 24): a PyTorch DDP program
# (ddp_check.py: gloo, init_method="env://", nothing dpt-specific) under dpt's launchers.
#
#   frameworks_test.sh launch DPT_LAUNCH HOSTFILE
#       dpt-launch -n 4 and --hostfile: torch's rank == RANK == MPI rank, MASTER_ADDR
#       127.0.0.1 / the hostfile's host, the parameters of two DDP steps == one process's
#       on the whole batch (1e-5); a user MASTER_ADDR of another host, a MASTER_PORT that
#       is not a port: exit 2 with a message naming the rank and node; a user MASTER_PORT
#       is kept; a taken MASTER_PORT: rank 0 says so, the launch fails; an mpi4py
#       program's MPI ranks are the plan's
#   frameworks_test.sh slurm PLUGIN DPT_TOPO NODE_XML DPT_REPORT
#       srun --dpt on the real cluster (cluster.sh: leaf1 = n1,n3, leaf2 = n2,n4, so Slurm's
#       order is not the ring's): every rank's torch rank and node == the plan's (dpt-topo
#       plan), MASTER_ADDR = NodeAddr of plan rank 0's node, MASTER_PORT derived from the
#       job and step, same numerics; a user MASTER_ADDR naming another node fails the step
#       with dpt's message; a taken MASTER_PORT is named by rank 0; an mpi4py program's
#       MPI ranks are Slurm's under plain --dpt and the plan's with SLURM_HOSTFILE from
#       dpt-topo plan --slurm-hostfile and --distribution=arbitrary; etc/examples' sbatch job;
#       the job report srun writes (report_verify.py): each rank's node, status or signal,
#       env, peak RSS, for a good step, a failing and killed rank, a missing program
#   Both modes: the same for a Lightning Trainer (lightning_check.py: Lightning chooses
#   TorchElasticEnvironment) and JAX (jax_check.py: jax.distributed.initialize with the plan),
#   from PyPI venvs (.ci/install-deps --tests), each skipped visibly when missing.
# Needs Debian's PyTorch (python3-torch, /usr/bin/python3); exit 77 = skipped.
set -uo pipefail

mode=${1:?mode}
here=$(cd "$(dirname "$0")" && pwd)
py=${DPT_TORCH_PYTHON:-/usr/bin/python3}
prog="$here/ddp_check.py"
verify="$here/ddp_verify.py"

"$py" -c 'import torch.distributed as d; assert d.is_available()' 2>/dev/null ||
  { echo "SKIP: $py has no torch.distributed (apt install python3-torch; bash .ci/install-deps does)"; exit 77; }

. "$here/../slurm/testlib.sh"

# Lightning 2.2.5 (on Debian's torch) and JAX 0.10.2 (CPU) from PyPI, each in its own venv
# (.ci/install-deps --tests: /opt/dpt-py, ~/.local/share/dpt-py without root); a missing one is
# skipped visibly.
venvs=/opt/dpt-py
[[ -d $venvs ]] || venvs=$HOME/.local/share/dpt-py
lightning_py=${DPT_LIGHTNING_PYTHON:-$venvs/lightning/bin/python}
jax_py=${DPT_JAX_PYTHON:-$venvs/jax/bin/python}
have_lightning() {
  [[ -z ${DPT_FRAMEWORKS_TORCH_ONLY:-} ]] ||
    { echo "SKIP (visibly): Lightning in the sanitizer build (the plain build runs it)"; return 1; }
  "$lightning_py" -c 'import pytorch_lightning' 2>/dev/null && return 0
  echo "SKIP (visibly): Lightning: $lightning_py cannot import pytorch_lightning (bash .ci/install-deps --tests makes it)"
  return 1
}
have_jax() {
  [[ -z ${DPT_FRAMEWORKS_TORCH_ONLY:-} ]] ||
    { echo "SKIP (visibly): JAX in the sanitizer build (the plain build runs it)"; return 1; }
  "$jax_py" -c 'import jax' 2>/dev/null && return 0
  echo "SKIP (visibly): JAX: $jax_py cannot import jax (bash .ci/install-deps --tests makes it)"
  return 1
}

# a TCP port held open by a listener: hold_port sets $held (the port) and $holder (its
# pid); release_port ends it
hold_port() {
  "$py" -c 'import socket, sys, time
s = socket.socket(socket.AF_INET6); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("::", 0)); s.listen(1); open(sys.argv[1], "w").write("%d\n" % s.getsockname()[1]); time.sleep(300)' \
    "$dir/held.port" &
  holder=$!
  for _ in $(seq 100); do [[ -s "$dir/held.port" ]] && break; sleep 0.1; done
  held=$(cat "$dir/held.port")
}
release_port() {
  [[ -n "${holder:-}" ]] || return 0
  kill "$holder" 2>/dev/null
  wait "$holder" 2>/dev/null
  holder=
  rm -f "$dir/held.port"
}

# mpi_verify OUT.json WORLD [PLAN.json] [--expect-differ]: what mpi_check.py gathered --
# every MPI_COMM_WORLD rank equals its RANK (dpt's plan rank) and runs on the plan's node
# for that rank; with --expect-differ, the opposite must show for at least one rank
# (Slurm's own task order: the check can fail)
mpi_verify() {
  python3 - "$@" <<'PY'
import json, sys
recs = json.load(open(sys.argv[1]))
world = int(sys.argv[2])
plan = json.load(open(sys.argv[3])) if len(sys.argv) > 3 and sys.argv[3] != "-" else None
differ = "--expect-differ" in sys.argv
bad = []
for r in recs:
    where = "MPI rank %d (SLURM_PROCID %s) on %s" % (r["mpi_rank"], r["SLURM_PROCID"], r["host"])
    if r["mpi_size"] != world:
        bad.append("%s: MPI size %d" % (where, r["mpi_size"]))
    if r["RANK"] != str(r["mpi_rank"]):
        bad.append("%s: RANK=%s" % (where, r["RANK"]))
    elif plan and plan["nodes"][plan["ranks"][r["mpi_rank"]]["node"]]["host"] != r["host"]:
        bad.append("%s: the plan puts rank %d elsewhere" % (where, r["mpi_rank"]))
print("mpi_verify: %d MPI ranks, %d not in plan order%s" % (len(recs), len(bad), "".join("\n  " + b for b in bad[:4])))
ok = len(recs) == world and (bool(bad) if differ else not bad)
sys.exit(0 if ok else 1)
PY
}

case "$mode" in
launch)
  launch=${2:?dpt-launch} hosts=${3:?hostfile}
  testlib_dir frameworks-launch
  trap 'release_port; rm -rf "$dir"' EXIT
  mkdir "$dir/n" "$dir/h"
  "$launch" -n 4 --oversubscribe -- "$py" "$prog" "$dir/n" >"$dir/n.log" 2>&1
  check "dpt-launch -n 4: the DDP program succeeds" [ $? -eq 0 ]
  check "dpt-launch -n 4: ranks, MPI ranks, MASTER_ADDR 127.0.0.1, numerics" \
    python3 "$verify" "$dir/n" 4 --master-addr 127.0.0.1 --mpi
  "$launch" --hostfile "$hosts" -N 1 --gpus-per-node 2 -- "$py" "$prog" "$dir/h" >"$dir/h.log" 2>&1
  check "dpt-launch --hostfile: the DDP program succeeds" [ $? -eq 0 ]
  check "dpt-launch --hostfile: ranks, MPI ranks, MASTER_ADDR = the hostfile's host, numerics" \
    python3 "$verify" "$dir/h" 2 --master-addr localhost --mpi
  # an MPI program: under dpt-launch the MPI ranks are the plan's (one app context per rank)
  if "$py" -c 'import mpi4py' 2>/dev/null; then
    "$launch" --hostfile "$hosts" -N 1 --gpus-per-node 2 -- "$py" "$here/mpi_check.py" "$dir/mpi.json" >"$dir/mpi.log" 2>&1
    check "dpt-launch --hostfile: the mpi4py program succeeds" [ $? -eq 0 ]
    check "... MPI_COMM_WORLD ranks == plan ranks" mpi_verify "$dir/mpi.json" 2
  else
    echo "SKIP (visibly): mpi4py missing for $py (apt install python3-mpi4py; bash .ci/install-deps does)"
  fi
  # a Lightning Trainer (CPU, ddp) and JAX (CPU, gloo) under dpt-launch --hostfile
  if have_lightning; then
    mkdir "$dir/lf"
    "$launch" --hostfile "$hosts" -N 1 --gpus-per-node 2 -- "$lightning_py" "$here/lightning_check.py" "$dir/lf" \
      >"$dir/lf.log" 2>&1
    check "dpt-launch --hostfile: the Lightning Trainer (ddp) program succeeds" [ $? -eq 0 ]
    check "... Lightning chose TorchElasticEnvironment; ranks, MASTER_ADDR, numerics" \
      python3 "$verify" "$dir/lf" 2 --master-addr localhost --mpi --cluster-env TorchElasticEnvironment
  fi
  if have_jax; then
    mkdir "$dir/jx"
    "$launch" --hostfile "$hosts" -N 1 --gpus-per-node 2 -- "$jax_py" "$here/jax_check.py" "$dir/jx" \
      >"$dir/jx.log" 2>&1
    check "dpt-launch --hostfile: the JAX program (jax.distributed.initialize with the plan) succeeds" [ $? -eq 0 ]
    check "... process_index == RANK, MASTER_ADDR, numerics" python3 "$verify" "$dir/jx" 2 --master-addr localhost --mpi
  fi
  # bad input: a MASTER_ADDR of another host, a MASTER_PORT that is not one
  out=$(MASTER_ADDR=192.0.2.1 "$launch" -n 2 -- "$py" "$prog" "$dir/n" 2>&1); rc=$?
  echo "$out"
  check "a user MASTER_ADDR of another host: exit 2" [ $rc -eq 2 ]
  check "... naming the rank, its node, both addresses and the way out" grep -q \
    "rank 0 on .*: MASTER_ADDR=192.0.2.1 (set before the launch) is not the node of plan rank 0 (.*, address 127.0.0.1).*Unset MASTER_ADDR" <<<"$out"
  out=$(MASTER_PORT=http "$launch" -n 2 -- true 2>&1); rc=$?
  check "MASTER_PORT=http: exit 2 naming it" [ $rc -eq 2 ]
  grep -q 'MASTER_PORT="http" (set before the launch) is not a TCP port' <<<"$out" || fail "message: $out"
  # the user's own MASTER_ADDR (this host by name) and MASTER_PORT are kept
  rm -f "$dir/n"/*
  free=$("$py" -c 'import socket; s = socket.socket(); s.bind(("", 0)); print(s.getsockname()[1])')
  MASTER_ADDR=localhost MASTER_PORT=$free "$launch" -n 2 -- "$py" "$prog" "$dir/n" >"$dir/k.log" 2>&1
  check "a user MASTER_ADDR of this host and MASTER_PORT: kept, the program succeeds" [ $? -eq 0 ]
  check "... every rank got them" [ "$(cat "$dir"/n/rank-*.json | grep -o "\"MASTER_ADDR\": \"localhost\", \"MASTER_PORT\": \"$free\"" | wc -l)" -eq 2 ]
  # a taken port: rank 0's supervisor names it, torch cannot start its store, the launch fails
  hold_port
  out=$(MASTER_PORT=$held "$launch" -n 2 -- "$py" "$prog" "$dir/n" 2>&1); rc=$?
  release_port
  echo "$out" | grep -v '^ ' | tail -4
  check "a taken MASTER_PORT: the launch fails" [ $rc -ne 0 ]
  check "... and rank 0 said which port on which node" grep -q \
    "dpt-launch: rank 0 on .*: MASTER_PORT $held cannot be listened on there" <<<"$out"
  ;;

slurm)
  plugin=${2:?plugin} topo=${3:?dpt-topo} xml=${4:?node xml} report=${5:?dpt-report}
  for c in munged slurmctld slurmd srun; do
    command -v "$c" >/dev/null || { echo "SKIP: $c not installed"; exit 77; }
  done
  [[ $(id -u) -eq 0 ]] || { echo "SKIP: needs root (slurmd, mknod)"; exit 77; }
  testlib_dir frameworks-slurm
  trap 'release_port; testlib_teardown' EXIT
  trap 'exit 130' INT TERM
  # the cluster's own ports below 20000: the MASTER_PORTs dpt derives are 20000-29999
  ctl_port=$((10000 + ($$ % 180) * 50))
  echo "required $plugin" >"$dir/plugstack.conf"
  DPT_SLURM_CTL_PORT=$ctl_port DPT_SLURM_BASE_PORT=$((ctl_port + 10)) \
    bash "$here/../slurm/cluster.sh" start "$dir" 4 8 || { failed=1; exit 1; }
  eval "$(bash "$here/../slurm/cluster.sh" env "$dir")"
  chmod 0777 "$dir"
  # In the ASan build the clients (srun, sbatch) run with the sanitizer runtime in
  # LD_PRELOAD, which srun hands on to the tasks: Python is not instrumented (and ASan's
  # C++ exception interceptor aborts it), so the tasks' python drops it first.
  printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$py" >"$dir/python"
  chmod 0755 "$dir/python"
  py="$dir/python"
  common=(-N4 --ntasks-per-node=2 --gpus-per-node=8 --kill-on-bad-exit=1)
  "$topo" plan --topology-conf "$dir/topology.conf" --nodes 'n[1-4]' --node-xml "$xml" \
    --ranks-per-node 2 --json >"$dir/plan.json"
  mkdir -m 0777 "$dir/out"
  mkdir -m 0777 "$dir/rep"
  (cd "$dir/rep" && srun --dpt=topology="$xml" "${common[@]}" "$py" "$prog" "$dir/out") >"$dir/srun.log" 2>&1
  rc=$?
  check "srun --dpt: the DDP program succeeds on 8 ranks" [ $rc -eq 0 ]
  ((rc == 0)) || tail -20 "$dir/srun.log"
  check "srun --dpt: rank and node == the plan (ring n1 n3 n2 n4), MASTER_ADDR = NodeAddr, derived port, numerics" \
    python3 "$verify" "$dir/out" 8 --plan "$dir/plan.json" --master-addr 127.0.0.1 --slurm
  # the job report of the program (srun writes it after the step: spank/dpt_spank_report.h)
  rep=$(ls "$dir"/rep/dpt-report-*.json 2>/dev/null)
  grep '^dpt: report' "$dir/srun.log"
  check "... srun wrote the job report dpt-report-<job>.<step>.json, valid, said on stderr" \
    bash -c '[ -n "$1" ] && "$2" --check "$1" >/dev/null && grep -q "^dpt: report $1$" "$3"' _ "$rep" "$report" "$dir/srun.log"
  check "... per rank: its plan node, status 0, the env it was handed, peak RSS; nothing else left" \
    python3 "$here/report_verify.py" "$rep" "$dir/plan.json" --ok --only-file
  # a rank that exits 7 and one killed by SIGKILL: named in the report, with their nodes
  (cd "$dir/rep" && srun --dpt=topology="$xml" -N4 --ntasks-per-node=2 --gpus-per-node=8 sh -c \
    'case $RANK in 3) exit 7 ;; 5) sleep 0.5; kill -9 $$ ;; esac; sleep 1') >"$dir/srun-fail.log" 2>&1
  rc=$?
  check "a rank exits 7, another is killed: srun fails" [ $rc -ne 0 ]
  rep=$(ls -t "$dir"/rep/dpt-report-*.json 2>/dev/null | head -1)
  check "... the report names rank 3 (status 7) and rank 5 (SIGKILL) on their plan nodes" \
    python3 "$here/report_verify.py" "$rep" "$dir/plan.json" --fail 3:7 --kill 5:9
  # a program that is not there: every rank "not started", the report says so
  (cd "$dir/rep" && srun --dpt=topology="$xml" "${common[@]}" "$dir/no-such-program") >"$dir/srun-none.log" 2>&1
  rc=$?
  check "a program that does not exist: srun fails" [ $rc -ne 0 ]
  rep=$(ls -t "$dir"/rep/dpt-report-*.json 2>/dev/null | head -1)
  check "... the report: every rank not started, named with its node" \
    python3 "$here/report_verify.py" "$rep" "$dir/plan.json" --not-started "$dir/no-such-program"
  # report=none: no supervisor, no report, nothing left -- also under an enclosing step's
  # variables (an srun inside a task inherits them)
  mkdir -m 0777 "$dir/none"
  (cd "$dir/none" && DPT_LAUNCH_PARTS="$dir/none/outer.json" DPT_REPORT_ANNOUNCE="$dir/none/outer.json.announce" \
    srun --dpt=topology="$xml",report=none "${common[@]}" true) >"$dir/none.log" 2>&1
  check "srun --dpt=report=none: the step runs" [ $? -eq 0 ]
  check "... and leaves nothing in its directory" [ -z "$(ls -A "$dir/none")" ]
  # a Lightning Trainer and JAX: the same checks against the plan
  for fw in lightning jax; do
    have_$fw || continue
    [[ $fw = lightning ]] && fpy=$lightning_py fprog=lightning_check.py extra=(--cluster-env TorchElasticEnvironment)
    [[ $fw = jax ]] && fpy=$jax_py fprog=jax_check.py extra=()
    printf '#!/bin/sh\nunset LD_PRELOAD\nexec %s "$@"\n' "$fpy" >"$dir/python-$fw"
    chmod 0755 "$dir/python-$fw"
    mkdir -m 0777 "$dir/out-$fw"
    (cd "$dir/rep" && srun --dpt=topology="$xml" "${common[@]}" "$dir/python-$fw" "$here/$fprog" "$dir/out-$fw") \
      >"$dir/srun-$fw.log" 2>&1
    rc=$?
    check "srun --dpt: the $fw program succeeds on 8 ranks" [ $rc -eq 0 ]
    ((rc == 0)) || tail -20 "$dir/srun-$fw.log"
    check "... rank and node == the plan, MASTER_ADDR = NodeAddr, derived port, numerics" \
      python3 "$verify" "$dir/out-$fw" 8 --plan "$dir/plan.json" --master-addr 127.0.0.1 --slurm "${extra[@]}"
  done
  rm -f "$dir"/rep/dpt-report-*.json
  # the usual sbatch line sends MASTER_ADDR to a node that does not host rank 0
  out=$(cd "$dir/rep" && MASTER_ADDR=n2 srun --dpt=topology="$xml" "${common[@]}" "$py" "$prog" "$dir/out" 2>&1); rc=$?
  echo "$out" | grep 'dpt:' | head -2
  check "a user MASTER_ADDR naming n2: the step fails" [ $rc -ne 0 ]
  check "... with dpt's message naming a rank, its node and plan rank 0's node n1" grep -q \
    "dpt: rank [0-9] on n[1-4]: MASTER_ADDR=n2 (set before the launch) is not the node of plan rank 0 (n1, address 127.0.0.1)" <<<"$out"
  check "... and the job report says the ranks did not start, and why" python3 - "$(ls -t "$dir"/rep/dpt-report-*.json | head -1)" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
ends = [r["end"] for r in doc["ranks"]]
ok = ends and all(not e["started"] and "MASTER_ADDR=n2 (set before the launch)" in e["how"] for e in ends)
ok = ok and any("not started: dpt: rank" in e["message"] for e in doc["errors"])
print("report: %d ranks not started: %s" % (len(ends), ends[0]["how"][:120] if ends else "-"))
sys.exit(0 if ok else 1)
PY
  # a taken port on plan rank 0's node (every node is this host here)
  hold_port
  out=$(MASTER_PORT=$held srun --dpt=topology="$xml" "${common[@]}" "$py" "$prog" "$dir/out" 2>&1); rc=$?
  release_port
  echo "$out" | grep 'dpt:' | head -2
  check "a taken MASTER_PORT: the step fails" [ $rc -ne 0 ]
  check "... and rank 0 said which port on which node" grep -q \
    "dpt: rank 0 on n1: MASTER_PORT $held cannot be listened on there" <<<"$out"
  # MPI programs: their rank is MPI_COMM_WORLD's = SLURM_PROCID, Slurm's order -- unless the
  # tasks are laid out by the plan: dpt-topo plan --slurm-hostfile + --distribution=arbitrary
  if "$py" -c 'import mpi4py' 2>/dev/null; then
    srun --dpt=topology="$xml" --mpi=pmix "${common[@]}" "$py" "$here/mpi_check.py" "$dir/mpi-plain.json" \
      >"$dir/mpi-plain.log" 2>&1
    rc=$?
    check "srun --dpt --mpi=pmix: the mpi4py program succeeds" [ $rc -eq 0 ]
    ((rc == 0)) || tail -20 "$dir/mpi-plain.log"
    check "... and without the plan's layout its MPI ranks are Slurm's, not the plan's" \
      mpi_verify "$dir/mpi-plain.json" 8 "$dir/plan.json" --expect-differ
    "$topo" plan --topology-conf "$dir/topology.conf" --nodes 'n[1-4]' --node-xml "$xml" \
      --ranks-per-node 2 --slurm-hostfile "$dir/hostfile" >/dev/null
    SLURM_HOSTFILE="$dir/hostfile" srun --dpt=topology="$xml" --mpi=pmix --distribution=arbitrary -n 8 \
      --gpus-per-node=8 --kill-on-bad-exit=1 "$py" "$here/mpi_check.py" "$dir/mpi.json" >"$dir/mpi.log" 2>&1
    rc=$?
    check "SLURM_HOSTFILE from dpt-topo plan --slurm-hostfile, --distribution=arbitrary: succeeds" [ $rc -eq 0 ]
    ((rc == 0)) || tail -5 "$dir/mpi.log"
    check "... MPI_COMM_WORLD ranks == plan ranks, each on the plan's node" mpi_verify "$dir/mpi.json" 8 "$dir/plan.json"
  else
    echo "SKIP (visibly): mpi4py missing for $py (apt install python3-mpi4py; bash .ci/install-deps does)"
  fi
  # the example sbatch scripts (etc/examples), their MN-1 sizes overridden on the command line:
  # 8 ranks, each on the plan's node, and a throughput line (in the sbatch's cwd: its report)
  ex=$(cd "$here/../../etc/examples" && pwd)
  examples=(pytorch-ddp:"$py")
  have_lightning >/dev/null && examples+=(lightning:"$dir/python-lightning")
  have_jax >/dev/null && examples+=(jax:"$dir/python-jax")
  for e in "${examples[@]}"; do
    name=${e%%:*} epy=${e#*:}
    (cd "$dir/rep" && EXAMPLES=$ex PYTHON=$epy sbatch --wait -N4 --ntasks-per-node=2 --gpus-per-node=8 \
      --dpt=topology="$xml",verbose -o "$dir/example-$name.out" "$ex/$name.sbatch" --steps 3 --width 64) \
      >"$dir/sbatch-$name.log" 2>&1
    rc=$?
    check "etc/examples/$name.sbatch runs (sbatch --wait)" [ $rc -eq 0 ]
    ((rc == 0)) || tail -20 "$dir/example-$name.out"
    check "... 8 ranks, each on the plan's node, and a throughput line" python3 - "$dir/plan.json" \
      "$dir/example-$name.out" <<'PY'
import json, re, sys
plan = json.load(open(sys.argv[1]))
seen = {}
text = open(sys.argv[2]).read()
for m in re.finditer(r"^rank (\d+)/(\d+) local (\d+) on (\S+) ", text, re.M):
    seen[int(m.group(1))] = m.group(4)
want = {r: plan["nodes"][plan["ranks"][r]["node"]]["host"] for r in range(plan["n_ranks"])}
ok = seen == want and re.search(r"^2 steps, \d+ samples/s", text, re.M)
if not ok:
    print("example: ranks on", seen, "plan", want)
sys.exit(0 if ok else 1)
PY
  done
  check "the daemons survive" daemons_alive
  ;;
*)
  echo "usage: frameworks_test.sh launch|slurm ..." >&2
  exit 2
  ;;
esac
((failed == 0))
