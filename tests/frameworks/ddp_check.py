#!/usr/bin/env python3
"""A PyTorch DDP program as users write it, started by `srun --dpt` or `dpt-launch`.

    ddp_check.py OUT_DIR

Nothing dpt-specific: torch.distributed.init_process_group("gloo", init_method="env://")
reads RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, which the launcher set from the plan.
Each rank writes OUT_DIR/rank-<RANK>.json: its torch rank and world size, its node, the
rendezvous it used, its launcher's and MPI's rank variables, and its parameters after two
DDP steps on its shard of one fixed global batch.  Rank 0 then trains the same model on
one process with the whole batch (no torch.distributed) and records the largest parameter
difference, which the tests bound by 1e-5.

Why 1e-5 holds with room: DDP averages the ranks' gradients of their shard means, which
is the gradient of the whole-batch mean summed in another order.  In float32 (unit
roundoff u = 2^-24 ~ 6e-8) a sum of n = 32 terms differs by at most ~n*u ~ 2e-6 relative,
so each gradient differs by ~2e-6 * |g| (|g| < 1 here); two SGD steps at lr 0.1 with
momentum 0.9 move a parameter by < 0.1 * (1 + 1.9) * 2e-6 ~ 6e-7 from the reference --
an order of magnitude under the bound.  A wrong rank order, a missing rank or a shard
taken twice changes parameters by ~1e-2.
"""
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

from check_common import base_record  # this directory: sys.path[0]

GLOBAL_BATCH = 32
STEPS = 2


def model_and_data():
    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(16, 32), nn.Tanh(), nn.Linear(32, 4))
    g = torch.Generator().manual_seed(99)
    x = torch.randn(STEPS, GLOBAL_BATCH, 16, generator=g)
    y = torch.randint(0, 4, (STEPS, GLOBAL_BATCH), generator=g)
    return model, x, y


def train(model, x, y):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    for s in range(x.shape[0]):
        opt.zero_grad()
        loss_fn(model(x[s]), y[s]).backward()
        opt.step()


def flat(model):
    m = model.module if hasattr(model, "module") else model
    return torch.cat([p.detach().reshape(-1) for p in m.parameters()])


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    if GLOBAL_BATCH % world:
        sys.exit(f"ddp_check: world size {world} does not divide the batch {GLOBAL_BATCH}")
    model, x, y = model_and_data()
    ddp = nn.parallel.DistributedDataParallel(model)
    shard = GLOBAL_BATCH // world
    lo = rank * shard
    train(ddp, x[:, lo:lo + shard], y[:, lo:lo + shard])
    params = flat(ddp)
    rec = base_record(rank, world, float(params.double().sum()))
    dist.barrier()
    if rank == 0:
        ref, rx, ry = model_and_data()
        train(ref, rx, ry)
        rec["max_diff_vs_one_process"] = float((params - flat(ref)).abs().max())
        rec["max_move"] = float((flat(ref) - flat(model_and_data()[0])).abs().max())
    # every rank must end with the same parameters (DDP keeps replicas in step)
    allp = [torch.zeros_like(params) for _ in range(world)]
    dist.all_gather(allp, params)
    rec["max_diff_across_ranks"] = float(max((p - params).abs().max() for p in allp))
    with open(os.path.join(out, f"rank-{rank}.json"), "w") as f:
        json.dump(rec, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
