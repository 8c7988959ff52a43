#!/usr/bin/env python3
"""A plain PyTorch DistributedDataParallel training script -- nothing dpt-specific.

Under `srun --dpt` (or `dpt-launch`) every rank finds in its environment what torchrun
would set: RANK (its position on dpt's planned ring), WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR (the node of plan rank 0) and MASTER_PORT, and only its own GPU in
CUDA_VISIBLE_DEVICES.  So init_process_group("env://") puts NCCL's ring (or gloo's) in
the planned order.  On GPUs it trains with NCCL; without them (a CPU test) with gloo.

    srun --dpt python3 train_ddp.py [--steps N] [--batch B] [--width W]
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.nn as nn


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64, help="per rank")
    ap.add_argument("--width", type=int, default=1024)
    a = ap.parse_args()

    cuda = torch.cuda.is_available()
    dist.init_process_group("nccl" if cuda else "gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    # dpt narrows CUDA_VISIBLE_DEVICES to the plan's GPU; when Slurm's gres already had
    # narrowed it, DPT_CUDA_DEVICE is the plan's GPU within that list
    dev = torch.device("cuda", int(os.environ.get("DPT_CUDA_DEVICE", "0"))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    print(f"rank {rank}/{world} local {local} on {os.environ.get('SLURMD_NODENAME') or socket.gethostname()} "
          f"(rendezvous {os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}, device {dev})",
          flush=True)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(a.width, a.width), nn.ReLU(), nn.Linear(a.width, 10)).to(dev)
    ddp = nn.parallel.DistributedDataParallel(model, device_ids=[dev.index] if cuda else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01 * world, momentum=0.9)
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    loss_fn = nn.CrossEntropyLoss()
    t0 = time.time()
    for step in range(a.steps):
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if step == 0:
            t0 = time.time()  # the first step builds DDP's buckets
    if cuda:
        torch.cuda.synchronize()
    dt = time.time() - t0
    if rank == 0 and a.steps > 1:
        print(f"{a.steps - 1} steps, {(a.steps - 1) * a.batch * world / dt:.0f} samples/s, "
              f"loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
