#!/usr/bin/env python3
"""torch.distributed.all_reduce (gloo) of SIZE bytes, timed, as a PyTorch user runs it.

    torch_allreduce.py SIZE_BYTES ITERS WARMUP

Rendezvous and ranks from the environment (env://: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT -- set by srun --dpt, or by slurm_env.sh from Slurm's own variables).  gloo's
all-reduce of a large dense tensor is a ring over the ranks in rank order (reduce-scatter
then all-gather), so the rank order decides which inter-switch links it crosses.  Rank 0
prints one JSON line: per iteration the max over ranks of its time, the hosts in rank
order, the checksum error."""
import json
import os
import sys
import time

import torch
import torch.distributed as dist


def main():
    size, iters, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    host = os.environ.get("SLURMD_NODENAME", "?")
    x = torch.full((size // 4,), float(rank + 1))
    want = world * (world + 1) / 2
    times = []
    err = 0.0
    for it in range(warmup + iters):
        x.fill_(float(rank + 1))
        dist.barrier()
        t0 = time.perf_counter()
        dist.all_reduce(x)
        t = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
        err = max(err, float((x - want).abs().max()))
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        if it >= warmup:
            times.append(float(t))
    hosts = [None] * world
    dist.all_gather_object(hosts, host)
    if rank == 0:
        print(json.dumps({"world": world, "bytes": size, "times_s": times, "hosts": hosts,
                          "max_abs_err": err, "master": os.environ.get("MASTER_ADDR")}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
