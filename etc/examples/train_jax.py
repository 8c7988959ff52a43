#!/usr/bin/env python3
"""A JAX data-parallel training script under `srun --dpt` (or `dpt-launch`).

One process per GPU (without GPUs: per rank, on CPU).  jax.distributed.initialize() is
given the plan explicitly: coordinator MASTER_ADDR:MASTER_PORT (the node of plan rank 0),
process_id = RANK (the rank's position on dpt's planned ring), num_processes =
WORLD_SIZE.  Without these arguments JAX detects Slurm itself and numbers processes by
SLURM_PROCID (Slurm's order), its coordinator on the first node of the node list: not
dpt's ring.  The global device order follows the process ids, so the mesh below -- and
the all-reduce XLA inserts for the gradient (NCCL on GPUs, gloo on CPUs) -- follow the plan.

    srun --dpt python3 train_jax.py [--steps N] [--batch B] [--width W]
"""
import argparse
import os
import socket
import time

import jax

jax.config.update("jax_cpu_collectives_implementation", "gloo")  # CPU runs; GPUs use NCCL
jax.distributed.initialize(coordinator_address=f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}",
                           num_processes=int(os.environ["WORLD_SIZE"]), process_id=int(os.environ["RANK"]))

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64, help="per process")
    ap.add_argument("--width", type=int, default=1024)
    a = ap.parse_args()

    rank, world = jax.process_index(), jax.process_count()
    print(f"rank {rank}/{world} local {os.environ.get('LOCAL_RANK')} on "
          f"{os.environ.get('SLURMD_NODENAME') or socket.gethostname()} (coordinator "
          f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}, devices {jax.local_devices()})", flush=True)
    mesh = Mesh(np.array(jax.devices()), ("data",))  # process order = RANK order = the plan's ring
    data, replicated = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())

    rs = np.random.RandomState(rank)
    local_x = rs.standard_normal((a.batch * jax.local_device_count(), a.width)).astype(np.float32)
    local_y = rs.standard_normal((a.batch * jax.local_device_count(), 10)).astype(np.float32)
    x = jax.make_array_from_process_local_data(data, local_x)
    y = jax.make_array_from_process_local_data(data, local_y)
    w0 = np.random.RandomState(0).standard_normal((a.width, 10)).astype(np.float32) / np.sqrt(a.width)
    w = jax.device_put(w0, replicated)

    def loss(w, x, y):
        return jnp.mean((x @ w - y) ** 2)

    @jax.jit
    def step(w, x, y):
        l, g = jax.value_and_grad(loss)(w, x, y)  # the mean over the global batch: an all-reduce
        return w - 0.01 * g, l

    w, l = step(w, x, y)  # compiles
    l.block_until_ready()
    t0 = time.time()
    for _ in range(a.steps - 1):
        w, l = step(w, x, y)
    l.block_until_ready()
    dt = time.time() - t0
    if rank == 0 and a.steps > 1:
        print(f"{a.steps - 1} steps, {(a.steps - 1) * x.shape[0] / dt:.0f} samples/s, loss {float(l):.4f}",
              flush=True)
    jax.distributed.shutdown()


if __name__ == "__main__":
    main()
