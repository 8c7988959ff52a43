#!/bin/bash
# mpirun_command.sh — the mpirun command dpt-launch gives Open MPI, against golden files: its
# flags, the rankfile (--hostfile with the node's CPUs), and each rank's app context (-n 1,
# --host, every -x variable the rank's program and supervisor read, the supervisor and the
# program's arguments in order), one argument per line as a shell reads the printed command
# back (dpt-launch quotes it for pasting: the program's "y z" and "it's" must come back whole).
# Dry runs only: nothing is started, and no host is reached, so two made-up hosts can stand
# for a two-node job.  The run's own values are replaced by names: the dpt-launch path (SELF),
# the program's (PROG), this host's name (HOST), the plan digests (DIGEST), the rendezvous
# port and run id (PORT, RUNID), the node XML files (CPU2_XML, GPU1_XML);
# --allow-run-as-root (root only) is dropped.  A change to the command is a change to what
# every rank sees: it shows up here as a diff, and DPT_UPDATE_GOLDEN=1 rewrites the files
# once the change is meant.
#
# usage: mpirun_command.sh DPT_LAUNCH GOLDEN_DIR CPU2_XML GPU1_XML
set -u
launch=$1 golden=$2 cpu2=$(realpath "$3") gpu1=$(realpath "$4")
tmp=$(mktemp -d /tmp/dpt-mpirun-cmd.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*" >&2; fails=$((fails + 1)); }
printf 'node-a slots=2\nnode-b slots=2\n' >"$tmp/hosts"
prog=$(type -P true) # the program as dpt-launch finds it on PATH
host=$(hostname)

# case NAME ARGS...: dpt-launch ARGS -- true x "y z" "it's", dry run, in a clean environment (but for
# the sanitizers' options)
case_() {
  local name=$1 out=$tmp/$1.out
  shift
  if ! (cd "$tmp" && env -i PATH="$PATH" DPT_MPIRUN=mpirun ${ASAN_OPTIONS+"ASAN_OPTIONS=$ASAN_OPTIONS"} \
      ${LSAN_OPTIONS+"LSAN_OPTIONS=$LSAN_OPTIONS"} "$launch" "$@" --dry-run -- true x "y z" "it's") \
      >"$out" 2>"$tmp/$name.err"; then
    fail "$name: dpt-launch $* --dry-run failed: $(cat "$tmp/$name.err")"
    return
  fi
  # the rankfile section, then the command: an argument per line, "-x NAME=value" on one
  awk '/^rankfile \(/ { r = 1; print; next } r && /^rank / { print; next } { r = 0 }' "$out" >"$tmp/$name.txt"
  # (read back as a shell would: the printed command is quoted for pasting into one)
  sed -n 's/^command: //p' "$out" | python3 -c '
import shlex, sys
a = shlex.split(sys.stdin.read())
i = 0
while i < len(a):
    print("  -x " + a[i + 1] if a[i] == "-x" else a[i])
    i += 2 if a[i] == "-x" else 1' >>"$tmp/$name.txt"
  sed -i -E -e "s#^$launch\$#SELF#; s#^$prog\$#PROG#; s#=$cpu2\$#=CPU2_XML#; s#=$gpu1\$#=GPU1_XML#" \
    -e "s#NODE_NAME=$host\$#NODE_NAME=HOST#; s#'$host'#'HOST'#g; s#=[0-9a-f]{16}\$#=DIGEST#" \
    -e 's#MASTER_PORT=[0-9]+$#MASTER_PORT=PORT#' \
    -e 's#RUN_ID=dpt-launch-.*$#RUN_ID=RUNID#; /^--allow-run-as-root$/d' "$tmp/$name.txt"
  if [ "${DPT_UPDATE_GOLDEN:-0}" = 1 ]; then
    cp "$tmp/$name.txt" "$golden/$name.txt"
    echo "updated $golden/$name.txt"
  elif ! diff -u "$golden/$name.txt" "$tmp/$name.txt" >"$tmp/$name.diff"; then
    fail "$name: the mpirun command differs from $golden/$name.txt (- golden, + now; DPT_UPDATE_GOLDEN=1 to accept):"
    cat "$tmp/$name.diff" >&2
  else
    echo "ok: $name ($(grep -c '^  -x ' "$tmp/$name.txt") -x variables, $(grep -c '^:$' "$tmp/$name.txt") ':')"
  fi
}

# this node, 2 ranks on its 2 cores: the communicator, the report path, -v, threads
case_ local-2 -n 2 --input "$cpu2" --comm ring --report /shared/r.json --threads 1 -v
# this node, its one GPU: CUDA_VISIBLE_DEVICES and DPT_CUDA_DEVICE
case_ local-gpu -n 1 --input "$gpu1"
# 3 ranks on 2 cores: DPT_OVERSUBSCRIBE and what they share
case_ local-oversub -n 3 --oversubscribe --input "$cpu2"
# two nodes without their topology: --host per app context, unbound, DPT_PLAN_GPUS
case_ hosts-gpus --hostfile "$tmp/hosts" -N 2 --gpus-per-node 2 --no-report
# two nodes with it: a rankfile on the plan's CPUs
case_ hosts-rankfile --hostfile "$tmp/hosts" -N 2 --input "$cpu2"

[ "$fails" = 0 ] || { echo "mpirun_command: $fails failure(s)" >&2; exit 1; }
echo "mpirun_command: ok"
