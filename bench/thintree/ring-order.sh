#!/bin/sh
# bench/thintree/ring-order.sh "NODE NODE ..." CMD [ARGS...]
# Run CMD (one task per node, under plain srun) as the rank whose ring position is
# the index of this task's node in the list: dpt's communicators order their ring
# by DPT_RANK (runtime/dpt_ctx.c), so this runs the same ring in any node order --
# e.g. the "random" alternative of `dpt-topo plan --json`.
set -eu
order=$1
shift
pos=0
found=-1
n=0
for node in $order; do
  [ "$node" = "${SLURMD_NODENAME:?ring-order.sh: run me under srun}" ] && found=$pos
  pos=$((pos + 1))
  n=$((n + 1))
done
if [ "$found" -lt 0 ]; then
  echo "ring-order.sh: node $SLURMD_NODENAME is not in the order \"$order\"" >&2
  exit 2
fi
if [ "$n" -ne "${SLURM_NTASKS:-0}" ]; then
  echo "ring-order.sh: the order names $n nodes but the step has SLURM_NTASKS=${SLURM_NTASKS:-?} tasks (one per node expected)" >&2
  exit 2
fi
export DPT_RANK=$found DPT_SIZE=$n DPT_LOCAL_RANK=0 DPT_LOCAL_SIZE=1 DPT_NODE_ID=$found \
  DPT_N_NODES=$n DPT_NODE_NAME=$SLURMD_NODENAME
exec "$@"
