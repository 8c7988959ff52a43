#!/bin/sh
# One line per task: what Slurm and the dpt plugin gave it (key=value, no spaces in values).
aff=$(awk '/^Cpus_allowed_list:/ {print $2}' /proc/self/status)
dpt=$(env | grep -c '^DPT_')
echo "procid=${SLURM_PROCID} node=${SLURMD_NODENAME} nodeid=${SLURM_NODEID} localid=${SLURM_LOCALID}" \
  "step=${SLURM_JOB_ID}.${SLURM_STEP_ID} affinity=${aff} cvd=${CUDA_VISIBLE_DEVICES-unset}" \
  "dpt_vars=${dpt} rank=${DPT_RANK-unset} size=${DPT_SIZE-unset} cuda_dev=${DPT_CUDA_DEVICE-unset} step_gpus=${SLURM_STEP_GPUS-unset}" \
  "cpuset=${DPT_CPUSET-unset} bound=${DPT_CPUS_BOUND-unset} hca=${NCCL_IB_HCA-unset}" \
  "omp=${OMP_NUM_THREADS-unset} digest=${DPT_PLAN_DIGEST-unset} RANK=${RANK-unset}" \
  "LOCAL_RANK=${LOCAL_RANK-unset} WORLD_SIZE=${WORLD_SIZE-unset} comm=${DPT_COMM-unset}" \
  "fp16=${DPT_FP16-unset} launcher=${DPT_LAUNCHER-unset} plan_env=${DPT_SPANK_PLAN+set}" \
  "oversub=${DPT_OVERSUBSCRIBE-unset}"
