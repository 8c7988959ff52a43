#!/usr/bin/env python3
"""A JAX program as the README tells users to write it under `srun --dpt` / `dpt-launch`.

    jax_check.py OUT_DIR

jax.distributed.initialize() with the plan passed explicitly: coordinator
MASTER_ADDR:MASTER_PORT (plan rank 0's node), num_processes = WORLD_SIZE,
process_id = RANK -- JAX's own Slurm detection would number processes by
SLURM_PROCID (Slurm's order) and host the coordinator on the first node of the
node list.  Two SGD steps of a linear least-squares model in float32, each rank on
its shard of one fixed global batch, the gradients averaged across processes
(process_allgather, gloo CPU collectives); rank 0 repeats them on one process
with the whole batch.  Output as ddp_check.py's (OUT_DIR/rank-<process_index>.json)
so ddp_verify.py checks both.  The bound 1e-5 holds for the reason ddp_check.py
gives: the averaged shard gradients are the whole-batch gradient summed in another
order (~n u |g| with n = 32, u = 2^-24); two steps at lr 0.1 move a weight by
< 0.2 * 2e-6.  A process order that is not RANK's fails the rank check."""
import json
import os
import sys

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.distributed.initialize(coordinator_address=f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                           num_processes=int(os.environ["WORLD_SIZE"]), process_id=int(os.environ["RANK"]))
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.experimental import multihost_utils  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_common import base_record  # noqa: E402

GLOBAL_BATCH, STEPS, LR = 32, 2, 0.1


def data():
    rs = np.random.RandomState(99)
    w0 = rs.standard_normal((16, 4)).astype(np.float32) * 0.1
    x = rs.standard_normal((STEPS, GLOBAL_BATCH, 16)).astype(np.float32)
    t = rs.standard_normal((STEPS, GLOBAL_BATCH, 4)).astype(np.float32)
    return jnp.asarray(w0), jnp.asarray(x), jnp.asarray(t)


def loss(w, x, t):
    return jnp.mean((x @ w - t) ** 2)


grad = jax.jit(jax.grad(loss))


def main():
    out = sys.argv[1]
    rank, world = jax.process_index(), jax.process_count()
    w, x, t = data()
    shard = GLOBAL_BATCH // world
    lo = rank * shard
    for s in range(STEPS):
        g = grad(w, x[s, lo:lo + shard], t[s, lo:lo + shard])
        w = w - LR * jnp.mean(multihost_utils.process_allgather(g), axis=0)
    rec = base_record(rank, world, float(np.asarray(w, dtype=np.float64).sum()))
    allw = multihost_utils.process_allgather(w)
    rec["max_diff_across_ranks"] = float(jnp.max(jnp.abs(allw - w)))
    if rank == 0:
        r, rx, rt = data()
        w0 = r
        for s in range(STEPS):
            r = r - LR * grad(r, rx[s], rt[s])
        rec["max_diff_vs_one_process"] = float(jnp.max(jnp.abs(w - r)))
        rec["max_move"] = float(jnp.max(jnp.abs(r - w0)))
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump(rec, f)
    multihost_utils.sync_global_devices("done")
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
