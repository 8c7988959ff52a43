#!/bin/sh
# bench/thintree/slurm_env.sh MASTER_ADDR CMD [ARGS...]
# What a PyTorch user's sbatch script does under plain srun (no dpt): ranks in Slurm's
# task order (RANK = SLURM_PROCID) and the rendezvous on the first node of the job
# (MASTER_ADDR given: that node's address, as `scontrol show hostnames | head -n1` would
# name it).  The baseline of bench/thintree/torch.sh.
set -eu
export MASTER_ADDR=${1:?usage: slurm_env.sh MASTER_ADDR CMD...}
shift
export RANK=${SLURM_PROCID:?run me under srun} WORLD_SIZE=${SLURM_NTASKS:?} LOCAL_RANK=${SLURM_LOCALID:-0}
export MASTER_PORT=${MASTER_PORT:-29500}
exec "$@"
