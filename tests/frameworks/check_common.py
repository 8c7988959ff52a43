"""What every framework check (ddp_check.py, lightning_check.py, jax_check.py) records
per rank, in the one form ddp_verify.py reads: its rank and world as the framework says,
the launcher's variables it was handed, its node.  No framework imported here (the JAX
venv has no torch)."""
import os
import socket

ENV_KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
            "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID", "SLURM_PROCID", "SLURMD_NODENAME",
            "DPT_NODE_NAME", "DPT_RANK", "OMPI_COMM_WORLD_RANK", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS")


def base_record(rank, world, checksum):
    """The record's common part; the caller adds max_diff_across_ranks and, on rank 0,
    max_diff_vs_one_process and max_move."""
    return {
        "rank": rank,
        "world": world,
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
        "host": os.environ.get("SLURMD_NODENAME") or os.environ.get("DPT_NODE_NAME") or socket.gethostname(),
        "checksum": checksum,
    }
